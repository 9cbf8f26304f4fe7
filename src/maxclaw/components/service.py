"""ComponentService: where a question becomes a card and an answer becomes a message.

Each public method is one transaction around one row of the transitions table
(``components/machine.py``):
1. ``_move``: the CAS on ``message_components`` from the row's from-states, the mirror into the
   tool row's ``display.states`` (the rev trigger syncs every client) and the audit row, in one
   statement (``store.TRANSITION``); no row back: another surface won → ``ComponentError``
   with the row's refusal code, and nothing else is written;
2. ``_effects``: the row's consequences, in the table's order — the answer message and the
   thread's wake-up, the carrier's settlement and its push withdrawal, the hand-off to Main,
   the revoke event. The due sweep runs the same rows set-wise (``_sweep_writes``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import asyncpg

from maxclaw.auth.service import Principal
from maxclaw.cards.answers import stored_answer, validate_answer
from maxclaw.cards.definitions import Card, ComponentDefinition, components_of_tool_call
from maxclaw.cards.rules import main_may_take
from maxclaw.cards.text import (
    answer_message_text,
    answer_meta,
    expired_text,
    handoff_meta,
    handoff_text,
    revoke_text,
    withdrawn_line,
    withdrawn_text,
)
from maxclaw.clock import Clock
from maxclaw.components import store
from maxclaw.components.machine import (
    UNSETTLED,
    Effect,
    Status,
    Surface,
    Transition,
    answerable,
    answerable_here,
    may_hand_to_main,
    statuses,
    transition,
)
from maxclaw.db.database import Database
from maxclaw.decisions import service as carriers
from maxclaw.errors import ComponentError, Invalid, NotFound
from maxclaw.metrics import Metrics
from maxclaw.presence import store as presence_store
from maxclaw.secrets.mask import mask_token
from maxclaw.secrets.service import SecretService
from maxclaw.timefmt import rfc3339_or_none
from maxclaw.timeline import store as timeline_store

WATCHED_DUE = timedelta(hours=1)
# Max answers from these states (the transitions table's ``answer`` rows): the card itself is
# locked while Main holds it, the panel and push are not.
ANSWERABLE = {s.value: statuses(answerable(s)) for s in (Surface.CARD, Surface.DECISION,
                                                         Surface.PUSH)}
CARD_ANSWERABLE = ANSWERABLE[Surface.CARD.value]
SWEEP_TO_MAIN = transition("to-main", Surface.SWEEP)
SWEEP_KEEP = transition("keep-open", Surface.SWEEP)
SWEEP_EXPIRE = transition("expire", Surface.SWEEP)
DEFINITION_CACHE_SIZE = 50_000
SECRET_LINE = "Submitted (not echoed)"
MAX_NOTE_CHARS = 2000  # Main's hand-back note, as long as a question may be


def state_of(row: dict[str, Any], rule: bool = False) -> dict[str, Any]:
    """A component's entry in ``display.states`` (the answer is already secret-safe), with what
    a client draws from it: ``answerable_here`` (the card takes Max's answer now) and
    ``main_may_take`` ("let Main decide" is offered now; ``rule`` is ``rules.main_may_take``)."""
    return {"status": row["status"], "answered_by": row["answered_by"],
            "answered_via": row["answered_via"], "answer": row["answer"],
            "due_at": rfc3339_or_none(row["due_at"]),
            "expires_at": rfc3339_or_none(row.get("expires_at")),
            "answerable_here": answerable_here(row["status"]),
            "main_may_take": may_hand_to_main(row["status"], rule),
            "withdrawn_reason": row.get("withdrawn_reason"),
            "superseded_by": row.get("superseded_by")}


def card_of(row: dict[str, Any]) -> Card:
    """The card a component row belongs to, from the call on its assistant row."""
    call_id = row["id"].rsplit(":", 1)[0]
    for call in row["tool_calls"] or []:
        if call.get("id") == call_id:
            return components_of_tool_call(call)
    raise NotFound("The call that posted this card is missing.")


def definition_of(row: dict[str, Any]) -> ComponentDefinition:
    return card_of(row).component(row["id"])


def component_projection(row: dict[str, Any], definition: ComponentDefinition,
                         rule: bool = False) -> dict[str, Any]:
    """``GET /v1/components/{id}``: the definition plus the state (never a secret)."""
    return {
        "answerable_here": answerable_here(row["status"]),
        "main_may_take": may_hand_to_main(row["status"], rule),
        **definition.model_dump(mode="json"),
        "status": row["status"], "answer": row["answer"], "answered_by": row["answered_by"],
        "answered_via": row["answered_via"], "main_reason": row["main_reason"],
        "due_at": rfc3339_or_none(row["due_at"]), "decision_id": row["decision_id"],
        "thread_id": row["thread_id"], "message_id": row["message_id"],
        "tool_message_id": row["tool_message_id"],
        "posted_at": rfc3339_or_none(row["posted_at"]),
        "answered_at": rfc3339_or_none(row["answered_at"]),
        "seen_at": rfc3339_or_none(row["seen_at"]),
        "expires_at": rfc3339_or_none(row.get("expires_at")),
        "withdrawn_reason": row.get("withdrawn_reason"),
        "superseded_by": row.get("superseded_by"),
    }


def _key(row: dict[str, Any]) -> store.Key:
    return (row["user_id"], row["id"])


def _thread(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["thread_id"], "kind": row["thread_kind"], "category": row["category"],
            "title": row["thread_title"]}


class ComponentService:
    """Cards: post, answer, hand to Main and back, revoke, sweep."""

    def __init__(self, db: Database, clock: Clock, metrics: Metrics,
                 secrets: SecretService) -> None:
        self.db = db
        self.clock = clock
        self.metrics = metrics
        self.secrets = secrets
        self._definitions: dict[tuple[str, str], ComponentDefinition] = {}

    # ----- reading -----

    async def _load(self, conn: asyncpg.Connection, user_id: str,
                    component_id: str) -> dict[str, Any]:
        row = await store.get_with_context(conn, user_id, component_id)
        if row is None:
            raise NotFound("No such component.")
        return row

    async def get(self, who: Principal, component_id: str) -> dict[str, Any]:
        """One component with its definition and state."""
        async with self.db.connection() as conn:
            row = await self._load(conn, who.user_id, component_id)
        who.check_thread(row["thread_id"])
        card = card_of(row)
        return component_projection(row, card.component(component_id),
                                    main_may_take(card, _thread(row)))

    # ----- posting (ask_user_question) -----

    async def post_card(self, conn: asyncpg.Connection, *, user_id: str, thread: dict[str, Any],
                        card: Card, assistant_message_id: int, turn_id: int | None,
                        content_for: Any, watching: bool | None = None) -> dict[str, Any]:
        """Create a card's rows inside the caller's transaction; returns the tool row.

        ``content_for(due_ats)`` builds the tool row's content from the components' due times.
        Due time: one hour if Max is watching the thread (no carrier), else
        ``main_after_minutes`` (and a carrier, which pushes). ``watching``: when the caller
        read it already (in the same transaction); None reads it here.
        """
        now = self.clock.now()
        if watching is None:
            watching = await presence_store.is_watching(conn, user_id, thread["id"], now)
        # main_after_minutes null: never to Main by time (Max can still let Main decide)
        due_at = None if card.main_after_minutes is None else now + (
            WATCHED_DUE if watching else timedelta(minutes=card.main_after_minutes))
        expires_at = (None if card.expires_after_minutes is None
                      else now + timedelta(minutes=card.expires_after_minutes))
        rule = main_may_take(card, thread)
        states = {c.id: {"status": Status.OPEN.value, "answered_by": None, "answered_via": None,
                         "answer": None, "due_at": rfc3339_or_none(due_at),
                         "expires_at": rfc3339_or_none(expires_at),
                         "answerable_here": answerable_here(Status.OPEN),
                         "main_may_take": may_hand_to_main(Status.OPEN, rule),
                         "withdrawn_reason": None, "superseded_by": None}
                  for c in card.components}
        tool_row = await timeline_store.insert_message(
            conn, user_id=user_id, thread_id=thread["id"], role="tool",
            tool_call_id=card.tool_call_id, content=content_for(due_at),
            display={"v": 1, "kind": "components", "states": states},
            source_meta={"tool": {"name": "ask_user_question", "status": 200}},
            turn_id=turn_id)
        # the carriers (and their pushes) of every question in two statements, however many
        decision_ids = {} if watching else await carriers.ensure_carriers(
            conn, [(user_id, c, thread) for c in card.components])
        await store.insert_components(conn, [
            {"id": c.id, "user_id": user_id, "thread_id": thread["id"],
             "message_id": assistant_message_id, "tool_message_id": tool_row["id"],
             "kind": c.kind, "stakes": c.stakes, "sensitive": c.sensitive, "due_at": due_at,
             "decision_id": decision_ids.get((user_id, c.id)), "expires_at": expires_at}
            for c in card.components])
        return tool_row

    # ----- the one transition shape and the one list of consequences -----

    async def _move(self, conn: asyncpg.Connection, user_id: str, component_id: str,
                    t: Transition, *, via: str | None = None,
                    answer: dict[str, Any] | None = None, main_note: str | None = None,
                    withdrawn_reason: str | None = None, superseded_by: str | None = None,
                    ) -> dict[str, Any] | None:
        """The CAS of row ``t`` with its mirror and audit (one statement); None if it lost.
        ``answer`` (already secret-safe) is written by answering rows; ``clears_answer`` rows
        wipe it."""
        answering = answer is not None
        return await store.transition(
            conn, user_id, component_id, sources=t.source_list(), target=t.target.value,
            actor=t.actor.value, via=via, answerable_here=CARD_ANSWERABLE,
            main_may_take=may_hand_to_main(t.target, rule=False),
            set_answer=answering or t.clears_answer, answer=answer,
            answered_by=t.actor.value if answering else None,
            answered_via=via if answering else None, main_note=main_note,
            withdrawn_reason=withdrawn_reason, superseded_by=superseded_by)

    async def _refuse(self, conn: asyncpg.Connection, user_id: str, component_id: str,
                      t: Transition, status: str | None = None) -> ComponentError:
        """The table's refusal for a CAS that found no row (``status``: as read, else now)."""
        if status is None:
            status = await store.status_of(conn, user_id, component_id)
        code = t.refusal(status)
        return ComponentError(code, t.refusal_text(code, status), data={"status": status})

    async def _effects(self, conn: asyncpg.Connection, t: Transition, row: dict[str, Any],
                       new: dict[str, Any], definition: ComponentDefinition, *,
                       answer: dict[str, Any] | None = None, via: str | None = None,
                       ) -> dict[str, Any]:
        """Everything row ``t`` implies beyond its CAS, mirror and audit, in the table's order
        (the lock order: carriers, then messages and the woken threads' turns). ``row`` is the
        component with its context; returns ``new`` with what the effects linked to it."""
        user_id = row["user_id"]
        for effect in t.effects:
            if effect is Effect.ANSWER_MESSAGE:
                assert answer is not None and via is not None
                await self._post_answer(conn, user_id, row, definition, answer,
                                        by_main=t.actor.value == "main", via=via)
            elif effect is Effect.SETTLE_CARRIER:
                assert answer is not None and via is not None
                await carriers.settle_carrier(conn, user_id, new["decision_id"], definition,
                                              answer, via)
            elif effect is Effect.ENSURE_CARRIER:
                # the panel and push can still answer while Main holds it
                decision = await carriers.ensure_carrier(conn, user_id, definition, _thread(row))
                if new["decision_id"] is None:
                    await store.set_decision(conn, user_id, row["id"], decision["id"])
                    new = {**new, "decision_id": decision["id"]}
            elif effect is Effect.HANDOFF_MESSAGE:
                main_id = await timeline_store.main_thread_id(conn, user_id)
                await timeline_store.insert_message(
                    conn, user_id=user_id, thread_id=main_id, role="user",
                    body=handoff_text(definition, row["thread_title"], row["thread_id"]),
                    source_meta=handoff_meta(definition, row["thread_id"],
                                             phase=t.target.value))
                await timeline_store.wake_thread(conn, user_id, main_id)
            elif effect is Effect.REOPEN_CARRIER:
                await carriers.revert(conn, user_id, new["decision_id"], row["thread_title"])
            elif effect is Effect.REVOKE_EVENT:
                await timeline_store.insert_input_and_wake(
                    conn, user_id=user_id, thread_id=row["thread_id"], role="event",
                    body=revoke_text(definition),
                    source_meta={"askHandoff": {"componentId": row["id"],
                                                "phase": t.target.value}})
            elif effect is Effect.WITHDRAW_CARRIER:
                line = withdrawn_line(new["withdrawn_reason"] or "", new["superseded_by"])
                await carriers.end_carrier(conn, user_id, new["decision_id"], line,
                                           t.target.value)
            elif effect is Effect.TELL_MAIN:
                if new["from_status"] == Status.WITH_MAIN:
                    main_id = await timeline_store.main_thread_id(conn, user_id)
                    await timeline_store.insert_message(
                        conn, user_id=user_id, thread_id=main_id, role="event",
                        body=withdrawn_text(definition, new["withdrawn_reason"] or t.target),
                        source_meta={"askHandoff": {"componentId": row["id"],
                                                    "threadId": row["thread_id"],
                                                    "phase": t.target.value}})
            elif effect is Effect.EXPIRY_EVENT:
                await timeline_store.insert_input_and_wake(
                    conn, user_id=user_id, thread_id=row["thread_id"], role="event",
                    body=expired_text(definition),
                    source_meta={"askHandoff": {"componentId": row["id"],
                                                "phase": t.target.value}})
            else:  # pragma: no cover - a new Effect must be handled here
                raise AssertionError(f"unhandled effect {effect!r}")
        return new

    # ----- Max answers -----

    async def answer(self, who: Principal, component_id: str, selected: Any, text: Any,
                     via: str, guard: carriers.AnswerGuard | None = None) -> dict[str, Any]:
        """Max's answer from the card, the panel or a push: exactly one surface wins.

        ``guard`` runs first inside the transaction (a push action token is spent there)."""
        if via not in ANSWERABLE:
            raise ValueError(f"unknown surface {via!r}")
        t = transition("answer", via)
        definition = await self._definition(who.user_id, component_id)
        answer = validate_answer(definition, selected, text)  # invalid: nothing is written
        kept = stored_answer(definition, answer)
        async with self.db.transaction() as conn:
            if guard is not None:
                await guard(conn)
            new = await self._move(conn, who.user_id, component_id, t, via=via, answer=kept)
            if new is None:
                lost = await self._refuse(conn, who.user_id, component_id, t)
                self.metrics.cas_conflicts.labels(lost.reason).inc()
                raise lost
            # the answer message's row needs only the component's own columns
            await self._effects(conn, t, new, new, definition, answer=answer, via=via)
        self.metrics.answers.labels(via).inc()
        return component_projection(new, definition)

    def remember(self, user_id: str, card: Card) -> None:
        """Cache the definitions of a card whose rows have committed (they never change), so
        the first answer on this process needs not read them back."""
        if len(self._definitions) + len(card.components) > DEFINITION_CACHE_SIZE:
            self._definitions.clear()
        for component in card.components:
            self._definitions[(user_id, component.id)] = component

    async def _definition(self, user_id: str, component_id: str) -> ComponentDefinition:
        """A component's definition; cached, since the call that defines it never changes."""
        key = (user_id, component_id)
        definition = self._definitions.get(key)
        if definition is None:
            async with self.db.connection() as conn:
                definition = definition_of(await self._load(conn, user_id, component_id))
            if len(self._definitions) >= DEFINITION_CACHE_SIZE:
                self._definitions.clear()  # bounded; a refill is one query per card
            self._definitions[key] = definition
        return definition

    async def _post_answer(self, conn: asyncpg.Connection, user_id: str, row: dict[str, Any],
                           definition: ComponentDefinition, answer: dict[str, Any], *,
                           by_main: bool, via: str) -> None:
        """The answer as Max's message in the asking thread; it wakes the thread. A secret
        answer's message row holds a masked body; the full one is sealed next to it."""
        body = answer_message_text(definition, answer, by_main=by_main)
        sealed = None
        if definition.sensitive:
            sealed = self.secrets.seal_answer(user_id, row["thread_id"], definition.id,
                                              str(answer.get("text") or ""), body)
            body = answer_message_text(definition, {**answer, "text": mask_token(definition.id)},
                                       by_main=by_main)
        await timeline_store.insert_input_and_wake(
            conn, user_id=user_id, thread_id=row["thread_id"], role="user", body=body,
            secret=sealed,
            display={"line": SECRET_LINE} if definition.sensitive else None,
            source_meta=answer_meta(definition, answer, by_main=by_main, via=via),
            sensitive=definition.sensitive)

    # ----- hand-off to Main -----

    async def to_main(self, who: Principal, component_id: str) -> dict[str, Any]:
        """Max taps "let Main decide": open → with-main, with a hand-off into Main's thread."""
        t = transition("to-main", Surface.CARD)
        async with self.db.transaction() as conn:
            row = await self._load(conn, who.user_id, component_id)
            card = card_of(row)
            if not main_may_take(card, _thread(row)):
                raise ComponentError("not_transferable")
            new = await self._move(conn, who.user_id, component_id, t)
            if new is None:
                raise await self._refuse(conn, who.user_id, component_id, t)
            new = await self._effects(conn, t, row, new, card.component(component_id))
        return component_projection({**row, **new}, card.component(component_id), True)

    async def main_answer(self, conn: asyncpg.Connection, main: Principal, component_id: str,
                          selected: Any, text: Any, reason: Any) -> None:
        """Main's ``answer_for_max`` inside the caller's transaction (with-main → main-answered)."""
        t = transition("answer_for_max", Surface.MAIN)
        if not isinstance(reason, str) or not reason.strip():
            raise Invalid.at(["arguments", "reason"], "a reason is required: say why you chose")
        row = await self._load(conn, main.user_id, component_id)
        definition = definition_of(row)
        if definition.stakes == "irreversible":
            raise ComponentError("irreversible")
        answer = validate_answer(definition, selected, text)
        new = await self._move(conn, main.user_id, component_id, t, via=t.surface.value,
                               answer=stored_answer(definition, answer),
                               main_note=reason.strip())
        if new is None:
            raise await self._refuse(conn, main.user_id, component_id, t)
        await self._effects(conn, t, row, new, definition, answer=answer, via=t.surface.value)
        self.metrics.answers.labels("main").inc()

    async def hand_back(self, conn: asyncpg.Connection, main: Principal, component_id: str,
                        note: Any = None) -> None:
        """Main's ``hand_back`` inside the caller's transaction: with-main → handed-back. Main's
        note, if any, is kept as ``main_reason``: Max reads it on the card ("Why?")."""
        t = transition("hand_back", Surface.MAIN)
        if note is not None and not isinstance(note, str):
            raise Invalid.at(["arguments", "note"], "note must be a string")
        if note is not None and len(note) > MAX_NOTE_CHARS:
            raise Invalid.at(["arguments", "note"], f"at most {MAX_NOTE_CHARS} characters")
        row = await self._load(conn, main.user_id, component_id)
        new = await self._move(conn, main.user_id, component_id, t,
                               main_note=(note or "").strip() or None)
        if new is None:
            raise await self._refuse(conn, main.user_id, component_id, t)
        await self._effects(conn, t, row, new, definition_of(row))

    async def revoke(self, who: Principal, component_id: str) -> dict[str, Any]:
        """Max revokes Main's answer: main-answered → revoked, the carrier reopens, and the
        asking thread gets an event so its agent can adjust."""
        t = transition("revoke", Surface.CARD)
        async with self.db.transaction() as conn:
            row = await self._load(conn, who.user_id, component_id)
            definition = definition_of(row)
            new = await self._move(conn, who.user_id, component_id, t)
            if new is None:
                raise await self._refuse(conn, who.user_id, component_id, t, row["status"])
            await self._effects(conn, t, row, new, definition)
        return component_projection({**row, **new, "answered_at": None}, definition)

    # ----- the asking agent withdraws -----

    async def withdraw(self, conn: asyncpg.Connection, who: Principal, thread_id: str,
                       component_ids: list[str], reason: str,
                       superseded_by: str | None = None) -> dict[str, list[str]]:
        """``withdraw_question`` (and ``supersedes``) inside the caller's transaction: each
        named component of ``thread_id`` that is unsettled → withdrawn. Returns the ids
        ``withdrawn`` now and those ``already`` withdrawn (idempotent); a settled one (answered,
        expired…) refuses the whole call and nothing is written."""
        t = transition("withdraw", Surface.TOOL)
        done: dict[str, list[str]] = {"withdrawn": [], "already": []}
        for component_id in component_ids:
            row = await self._load(conn, who.user_id, component_id)
            if row["thread_id"] != thread_id:
                raise NotFound("No question of this conversation has that id.")
            if row["status"] == t.target:
                done["already"].append(component_id)
                continue
            new = await self._move(conn, who.user_id, component_id, t,
                                   withdrawn_reason=reason, superseded_by=superseded_by)
            if new is None:
                raise await self._refuse(conn, who.user_id, component_id, t)
            await self._effects(conn, t, row, new, definition_of(row))
            done["withdrawn"].append(component_id)
        return done

    async def in_thread(self, conn: asyncpg.Connection, user_id: str, thread_id: str,
                        component_id: str) -> bool:
        row = await store.get_with_context(conn, user_id, component_id)
        return row is not None and row["thread_id"] == thread_id

    async def card_component_ids(self, conn: asyncpg.Connection, user_id: str, thread_id: str,
                                 tool_call_id: str) -> list[str]:
        """The component ids of the card ``tool_call_id`` posted in ``thread_id``."""
        return [r["id"] for r in await store.card_components(conn, user_id, thread_id,
                                                             tool_call_id)]

    # ----- the due sweep -----

    async def sweep_due(self, limit: int = 500, now: datetime | None = None) -> dict[str, int]:
        """One batch: due cards go to Main where it may take them; the others stay open with
        a carrier. ``SKIP LOCKED`` lets any number of sweepers run at once.

        The batch is written set-wise — a fixed number of statements whatever its size (it
        was ~8 per card, and 10,000 due cards took 14 s; docs/benchmarks.md).
        """
        async with self.db.transaction() as conn:
            rows = await store.claim_due(conn, now or self.clock.now(), limit)
            # a batch spans users, and ids are only unique per user: key by (user_id, id)
            cards = {_key(r): card_of(r) for r in rows}
            takes = {_key(r): main_may_take(cards[_key(r)], _thread(r)) for r in rows}
            moved = await store.sweep_move(
                conn, [k for k, t in takes.items() if t], [k for k, t in takes.items() if not t],
                to_main_target=SWEEP_TO_MAIN.target.value, keep_target=SWEEP_KEEP.target.value,
                sources=statuses(SWEEP_TO_MAIN.sources | SWEEP_KEEP.sources))
            # the claim locked every row, so each one moved; the filter is belt and braces
            take = [r for r in rows if takes[_key(r)] and _key(r) in moved]
            keep = [r for r in rows if not takes[_key(r)] and _key(r) in moved]
            if take or keep:
                await self._sweep_writes(conn, take, keep, cards, moved)
        self.metrics.sweeps.labels("handed_to_main").inc(len(take))
        self.metrics.sweeps.labels("kept_open").inc(len(keep))
        return {"handed_to_main": len(take), "kept_open": len(keep)}

    async def _sweep_writes(self, conn: asyncpg.Connection, take: list[dict[str, Any]],
                            keep: list[dict[str, Any]], cards: dict[store.Key, Card],
                            moved: dict[store.Key, dict[str, Any]]) -> None:
        """The effects of the sweep rows (``ENSURE_CARRIER`` for both, ``HANDOFF_MESSAGE`` for
        ``to-main``), set-wise, plus the mirror and the audit of the hand-overs (a kept card's
        status does not change, so it has no audit row). Lock order: tool rows ascending (in
        ``mirror_many``), then carriers, then the Main threads' turns in thread id order."""
        patches: dict[int, dict[str, Any]] = {}
        for row in take + keep:
            patches.setdefault(row["tool_message_id"], {})[row["id"]] = state_of(moved[_key(row)])
        await store.mirror_many(conn, patches)
        # a carrier for every swept card: the panel and push can answer it (even with Main)
        ids = await carriers.ensure_carriers(conn, [
            (row["user_id"], cards[_key(row)].component(row["id"]), _thread(row))
            for row in take + keep if moved[_key(row)]["decision_id"] is None])
        if ids:
            await store.set_decisions(conn, ids)
        if not take:
            return
        mains = await timeline_store.main_thread_ids(conn, sorted({r["user_id"] for r in take}))
        await timeline_store.insert_inputs_and_wake(conn, [
            {"user_id": row["user_id"], "thread_id": mains[row["user_id"]], "role": "user",
             "body": handoff_text(cards[_key(row)].component(row["id"]), row["thread_title"],
                                  row["thread_id"]),
             "source_meta": handoff_meta(cards[_key(row)].component(row["id"]),
                                         row["thread_id"])}
            for row in take])
        await store.audit_many(conn, [(row["user_id"], row["id"]) for row in take],
                               from_status=Status.OPEN.value,
                               to_status=SWEEP_TO_MAIN.target.value,
                               actor=SWEEP_TO_MAIN.actor.value)

    async def sweep_expired(self, limit: int = 500, now: datetime | None = None) -> int:
        """One batch of the ``expire`` row, set-wise like the due sweep (a fixed number of
        statements per batch; ``SKIP LOCKED`` + the CAS make each card expire once however
        many sweepers run). Lock order as the due sweep: the claimed components, tool rows
        ascending, carriers, then the woken threads in id order."""
        t = SWEEP_EXPIRE
        async with self.db.transaction() as conn:
            rows = await store.claim_expired(conn, now or self.clock.now(), limit)
            if not rows:
                return 0
            moved = await store.expire_move(conn, [_key(r) for r in rows], t.target.value,
                                            t.source_list())
            rows = [r for r in rows if _key(r) in moved]
            patches: dict[int, dict[str, Any]] = {}
            for row in rows:
                patches.setdefault(row["tool_message_id"], {})[row["id"]] = \
                    state_of(moved[_key(row)])
            await store.mirror_many(conn, patches)
            definitions = {_key(r): definition_of(r) for r in rows}
            for row in rows:  # WITHDRAW_CARRIER
                await carriers.end_carrier(conn, row["user_id"], row["decision_id"],
                                           "Expired unanswered", t.target.value)
            held = [r for r in rows if r["status"] == Status.WITH_MAIN]  # TELL_MAIN
            if held:
                mains = await timeline_store.main_thread_ids(
                    conn, sorted({r["user_id"] for r in held}))
                for row in held:
                    await timeline_store.insert_message(
                        conn, user_id=row["user_id"], thread_id=mains[row["user_id"]],
                        role="event", body=withdrawn_text(definitions[_key(row)], "it expired"),
                        source_meta={"askHandoff": {"componentId": row["id"],
                                                    "threadId": row["thread_id"],
                                                    "phase": t.target.value}})
            await timeline_store.insert_inputs_and_wake(conn, [  # EXPIRY_EVENT
                {"user_id": row["user_id"], "thread_id": row["thread_id"], "role": "event",
                 "body": expired_text(definitions[_key(row)]),
                 "source_meta": {"askHandoff": {"componentId": row["id"],
                                                "phase": t.target.value}}}
                for row in rows])
            for source in sorted({r["status"] for r in rows}):
                await store.audit_many(conn, [(r["user_id"], r["id"]) for r in rows
                                              if r["status"] == source],
                                       from_status=source, to_status=t.target.value,
                                       actor=t.actor.value)
        self.metrics.sweeps.labels("expired").inc(len(rows))
        return len(rows)

    async def sweep_expired_all(self, limit: int = 500) -> int:
        total = 0
        while True:
            n = await self.sweep_expired(limit)
            total += n
            if n < limit:
                return total

    async def sweep_due_all(self, limit: int = 500) -> dict[str, int]:
        """Sweep batches until nothing is due (``maxclaw sweep``)."""
        total = {"handed_to_main": 0, "kept_open": 0}
        while True:
            result = await self.sweep_due(limit)
            for key in total:
                total[key] += result[key]
            if sum(result.values()) < limit:
                return total

    async def open_components(self, user_id: str, thread_id: str) -> list[str]:
        """Ids of the thread's cards that are not settled (what ``finish`` reports)."""
        async with self.db.connection() as conn:
            return await store.thread_components(conn, user_id, thread_id,
                                                 statuses(UNSETTLED))
