"""The invariants of domain.md, checked directly in the database (no service code involved).

One reusable check for the crash, fault and property tests: ``await check(conn)`` reads every
component, its audit trail, the messages the service wrote about it, its tool row, its carrier,
the push outbox and the turns, and returns a ``Report`` listing each violation in words.

What must hold whatever happened before (crashes, races, retries):
- a component's audit trail is a path through the state machine that starts at ``open`` and
  ends at its current status; each transition was made by an actor allowed to make it;
- answer messages (``source_meta.componentAnswer``) in the asking thread correspond one to one,
  in order, to the answering transitions (``answered`` by Max, ``main-answered`` by Main): so an
  unanswered card has none, an answered one exactly one per answering (a revoke, then Max's
  answer, legitimately gives two); hand-offs and revoke events likewise match their transitions;
- the state columns are coherent (an answer only in an answered state, a due time only while
  ``open``, a secret's answer only ever ``{"selected": [], "hidden": true}``);
- ``display.states`` of the tool row agrees with ``message_components``;
- every carrier (``agent-question`` decision) agrees with its card: settled exactly when the
  card is answered, with the card's surface;
- each push outbox row is in a legal state, and per (decision, device) the rows alternate
  notify / withdraw — but for a notification that replaces the one before it (the news that
  Main answered, the question handed back, the question reopened after the news) — ending with
  what the decision's status calls for (a withdraw, or the news of Main's answer);
- no turn is stranded: undelivered input (user and event rows with ``delivered_at`` NULL) always
  has a queued or running turn on its thread, and ``threads.turn_state`` mirrors that turn.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from maxclaw.db.database import connect

ANSWERED = frozenset({"answered", "main-answered"})
HIDDEN = {"selected": [], "hidden": True}
# (from, to) → who may make it, and through which surfaces (None: no surface recorded)
TRANSITIONS: dict[tuple[str, str], tuple[frozenset[str], frozenset[str | None]]] = {
    ("open", "answered"): (frozenset({"max"}), frozenset({"card", "decision", "push"})),
    ("revoked", "answered"): (frozenset({"max"}), frozenset({"card", "decision", "push"})),
    ("handed-back", "answered"): (frozenset({"max"}), frozenset({"card", "decision", "push"})),
    # the lock stops the card itself only
    ("with-main", "answered"): (frozenset({"max"}), frozenset({"decision", "push"})),
    ("open", "with-main"): (frozenset({"max", "sweeper"}), frozenset({None})),
    ("with-main", "main-answered"): (frozenset({"main"}), frozenset({"main"})),
    # Main's hand_back, or the sweep when Main's time to decide ran out (main-timeout)
    ("with-main", "handed-back"): (frozenset({"main", "sweeper"}), frozenset({None})),
    ("main-answered", "revoked"): (frozenset({"max"}), frozenset({None})),
}


@dataclass
class Report:
    """Violations in words, plus how much was looked at."""

    violations: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def bad(self, what: str) -> None:
        self.violations.append(what)

    def __str__(self) -> str:
        head = ", ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        if not self.violations:
            return f"invariants hold ({head})"
        shown = "\n  ".join(self.violations[:40])
        more = len(self.violations) - 40
        return (f"{len(self.violations)} invariant violations ({head}):\n  {shown}"
                + (f"\n  … and {more} more" if more > 0 else ""))


async def check(conn: asyncpg.Connection) -> Report:
    """Every invariant, read in one repeatable-read snapshot so concurrent writers can't skew it."""
    report = Report()
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        data = await _load(conn)
    _check_components(data, report)
    _check_carriers(data, report)
    _check_outbox(data, report)
    _check_turns(data, report)
    return report


async def check_url(url: str) -> Report:
    conn = await connect(url)
    try:
        return await check(conn)
    finally:
        await conn.close()


async def assert_invariants(conn_or_url: asyncpg.Connection | str) -> Report:
    """``check`` and fail with every violation listed."""
    if isinstance(conn_or_url, str):
        report = await check_url(conn_or_url)
    else:
        report = await check(conn_or_url)
    assert not report.violations, str(report)
    return report


# ----- loading -----

async def _load(conn: asyncpg.Connection) -> dict[str, Any]:
    def rows(records: list[asyncpg.Record]) -> list[dict[str, Any]]:
        return [dict(r) for r in records]

    return {
        "components": rows(await conn.fetch(
            "SELECT id, user_id::text, thread_id::text, message_id, tool_message_id, kind, stakes,"
            " sensitive, status, answer, answered_by, answered_via, main_reason, due_at,"
            " expires_at, decision_id, answered_at, main_due_at FROM message_components"
            " ORDER BY id")),
        "audit": rows(await conn.fetch(
            "SELECT component_id, user_id::text, from_status, to_status, actor, via"
            " FROM component_audit ORDER BY id")),
        # every row the service writes about a component, in commit-independent id order
        "notices": rows(await conn.fetch(
            "SELECT id, user_id::text, thread_id::text, role, sensitive, body, display,"
            " source_meta FROM messages"
            " WHERE source_meta ? 'componentAnswer' OR source_meta ? 'askHandoff' ORDER BY id")),
        "tool_rows": {r["id"]: dict(r) for r in await conn.fetch(
            "SELECT id, user_id::text, thread_id::text, tool_call_id, display FROM messages"
            " WHERE id IN (SELECT tool_message_id FROM message_components)")},
        "assistant_rows": {r["id"]: dict(r) for r in await conn.fetch(
            "SELECT id, user_id::text, thread_id::text, role, tool_calls FROM messages"
            " WHERE id IN (SELECT message_id FROM message_components)")},
        "main_threads": {r["user_id"]: r["id"] for r in await conn.fetch(
            "SELECT id::text, user_id::text FROM threads WHERE kind = 'main'")},
        "decisions": rows(await conn.fetch(
            "SELECT id, user_id::text, kind, status, dedupe_key, component_id, thread_id::text,"
            " sensitive, answer_text, settled_via, settled_at FROM decisions ORDER BY id")),
        "outbox": rows(await conn.fetch(
            "SELECT o.id, o.user_id::text, o.device_id, o.decision_id, o.kind, o.status,"
            " o.attempts, o.sent_at, o.lease_until, o.last_error,"
            " o.payload->>'kind' AS payload_kind, o.payload ? 'main_note' AS handed_back,"
            " d.user_id::text AS device_user"
            " FROM push_outbox o LEFT JOIN push_devices d ON d.id = o.device_id ORDER BY o.id")),
        "stranded": rows(await conn.fetch(
            "SELECT m.thread_id::text, count(*) AS n FROM messages m"
            " WHERE m.delivered_at IS NULL AND m.role IN ('user', 'event')"
            "   AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.thread_id = m.thread_id"
            "                    AND t.status IN ('queued', 'running'))"
            " GROUP BY m.thread_id")),
        "turn_state": rows(await conn.fetch(
            "SELECT th.id::text, th.turn_state,"
            " (SELECT string_agg(t.status, ',') FROM turns t WHERE t.thread_id = th.id"
            "   AND t.status IN ('queued', 'running')) AS active FROM threads th")),
        "undelivered": await conn.fetchval(
            "SELECT count(*) FROM messages WHERE delivered_at IS NULL"
            " AND role IN ('user', 'event')"),
    }


# ----- components: audit path, answer messages, state columns, the display mirror -----

def _check_components(data: dict[str, Any], report: Report) -> None:
    trail: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in data["audit"]:
        trail[row["component_id"]].append(row)
    notices: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in data["notices"]:
        meta = row["source_meta"] or {}
        if "componentAnswer" in meta:
            notices[(meta["componentAnswer"].get("componentId"), "answer")].append(row)
        else:
            hand = meta["askHandoff"]
            # ``wakes: false`` marks an origin event: the asking thread's history line of
            # where its question went (handed to Main, Main answered, handed back)
            kind = "origin:" if hand.get("wakes") is False else ""
            notices[(hand.get("componentId"), kind + hand.get("phase", "?"))].append(row)
    known = {c["id"] for c in data["components"]}
    for cid, _kind in notices:
        if cid not in known:
            report.bad(f"{cid}: a service notice names a component that does not exist")
    for cid in trail:
        if cid not in known:
            report.bad(f"{cid}: audit rows for a component that does not exist")
    for c in data["components"]:
        report.counts["components"] += 1
        report.counts[f"status:{c['status']}"] += 1
        steps = trail.get(c["id"], [])
        report.counts["transitions"] += len(steps)
        _check_trail(c, steps, report)
        _check_answer_messages(c, steps, notices.get((c["id"], "answer"), []), report)
        _check_handoff_messages(c, steps, notices, data["main_threads"], report)
        _check_columns(c, report)
        _check_mirror(c, data["tool_rows"].get(c["tool_message_id"]),
                      data["assistant_rows"].get(c["message_id"]), report)


def _check_trail(c: dict[str, Any], steps: list[dict[str, Any]], report: Report) -> None:
    status = "open"
    for step in steps:
        edge = (step["from_status"], step["to_status"])
        if step["from_status"] != status:
            path = " → ".join(f"[{s['from_status']}→{s['to_status']} by {s['actor']}/{s['via']}]"
                              for s in steps)
            report.bad(f"{c['id']}: audit says {step['from_status']}→{step['to_status']} while "
                       f"the card was {status}: {path}")
        allowed = TRANSITIONS.get(edge)
        if allowed is None:
            report.bad(f"{c['id']}: illegal transition {edge[0]} → {edge[1]}")
        elif step["actor"] not in allowed[0] or step["via"] not in allowed[1]:
            report.bad(f"{c['id']}: {edge[0]} → {edge[1]} by {step['actor']} via {step['via']}")
        if step["user_id"] != c["user_id"]:
            report.bad(f"{c['id']}: audit row of another user")
        status = step["to_status"]
    if status != c["status"]:
        report.bad(f"{c['id']}: status {c['status']} but its audit trail ends at {status}")


def _check_answer_messages(c: dict[str, Any], steps: list[dict[str, Any]],
                           messages: list[dict[str, Any]], report: Report) -> None:
    answerings = [s for s in steps if s["to_status"] in ANSWERED]
    report.counts["answer_messages"] += len(messages)
    if len(messages) != len(answerings):
        report.bad(f"{c['id']}: {len(messages)} answer messages for {len(answerings)} answerings"
                   f" (status {c['status']})")
        return
    for step, msg in zip(answerings, messages, strict=True):
        meta = msg["source_meta"]["componentAnswer"]
        by = "main" if step["to_status"] == "main-answered" else "max"
        if (meta.get("answeredBy"), meta.get("via")) != (by, step["via"]):
            report.bad(f"{c['id']}: answer message says {meta} for a {step['to_status']} "
                       f"via {step['via']}")
        if (msg["thread_id"], msg["user_id"], msg["role"]) != (c["thread_id"], c["user_id"],
                                                               "user"):
            report.bad(f"{c['id']}: answer message {msg['id']} is not Max's row in the asking "
                       "thread")
        if msg["sensitive"] != c["sensitive"]:
            report.bad(f"{c['id']}: answer message {msg['id']} sensitive={msg['sensitive']}")
        if c["sensitive"] and (msg["display"] or {}).get("line") != "Submitted (not echoed)":
            report.bad(f"{c['id']}: a secret answer's row lacks display.line")


def _check_handoff_messages(c: dict[str, Any], steps: list[dict[str, Any]],
                            notices: dict[tuple[str, str], list[dict[str, Any]]],
                            main_threads: dict[str, str], report: Report) -> None:
    handoffs = notices.get((c["id"], "with-main"), [])
    n_to_main = sum(s["to_status"] == "with-main" for s in steps)
    if len(handoffs) != n_to_main:
        report.bad(f"{c['id']}: {len(handoffs)} hand-off messages for {n_to_main} hand-offs")
    for msg in handoffs:
        if msg["thread_id"] != main_threads.get(c["user_id"]):
            report.bad(f"{c['id']}: hand-off message {msg['id']} is not in the user's Main")
    revokes = notices.get((c["id"], "revoked"), [])
    n_revoked = sum(s["to_status"] == "revoked" for s in steps)
    if len(revokes) != n_revoked:
        report.bad(f"{c['id']}: {len(revokes)} revoke events for {n_revoked} revokes")
    for msg in revokes:
        if msg["thread_id"] != c["thread_id"] or msg["role"] != "event":
            report.bad(f"{c['id']}: revoke event {msg['id']} is not an event in the asking thread")
    _check_origin_events(c, steps, notices, report)


# the moves whose asking thread is told, in its history, where the question went
ORIGIN_PHASES = ("with-main", "main-answered", "handed-back")


def _check_origin_events(c: dict[str, Any], steps: list[dict[str, Any]],
                         notices: dict[tuple[str, str], list[dict[str, Any]]],
                         report: Report) -> None:
    """One non-waking event in the asking thread per move to Main, by Main or back."""
    for phase in ORIGIN_PHASES:
        events = notices.get((c["id"], "origin:" + phase), [])
        moves = sum(s["to_status"] == phase for s in steps)
        if len(events) != moves:
            report.bad(f"{c['id']}: {len(events)} origin events for {moves} moves to {phase}")
        for msg in events:
            if msg["thread_id"] != c["thread_id"] or msg["role"] != "event":
                report.bad(f"{c['id']}: origin event {msg['id']} ({phase}) is not an event in "
                           "the asking thread")


def _check_columns(c: dict[str, Any], report: Report) -> None:
    status, cid = c["status"], c["id"]
    if status in ANSWERED:
        want_by = "max" if status == "answered" else "main"
        if c["answered_by"] != want_by or c["answer"] is None or c["answered_at"] is None:
            report.bad(f"{cid}: {status} with answered_by={c['answered_by']}, "
                       f"answer={'set' if c['answer'] is not None else None}, "
                       f"answered_at={c['answered_at']}")
        if status == "main-answered" and (c["answered_via"] != "main" or not c["main_reason"]):
            report.bad(f"{cid}: main-answered without via main and a reason")
    elif any(c[k] is not None for k in ("answer", "answered_by", "answered_via")):
        report.bad(f"{cid}: {status} but still carries an answer")
    if c["due_at"] is not None and status != "open":
        report.bad(f"{cid}: due_at set while {status}")
    # Main's time to decide: set by every move to with-main, cleared by every other move
    if (c["main_due_at"] is not None) != (status == "with-main"):
        report.bad(f"{cid}: main_due_at={c['main_due_at']} while {status}")
    if c["sensitive"] != (c["kind"] == "secret"):
        report.bad(f"{cid}: sensitive={c['sensitive']} for a {c['kind']} component")
    if c["sensitive"] and c["answer"] not in (None, HIDDEN):
        report.bad(f"{cid}: a secret component's stored answer is not hidden")
    if status == "with-main" and c["decision_id"] is None:
        report.bad(f"{cid}: with Main but without a carrier (panel and push can't reach it)")


def _same_time(shown: Any, stored: datetime | None) -> bool:
    if shown is None or stored is None:
        return shown is None and stored is None
    try:
        return datetime.fromisoformat(str(shown)) == stored
    except ValueError:
        return False


def _check_mirror(c: dict[str, Any], tool: dict[str, Any] | None,
                  assistant: dict[str, Any] | None, report: Report) -> None:
    cid = c["id"]
    call_id = cid.rsplit(":", 1)[0]
    if assistant is None or assistant["role"] != "assistant" or not any(
            (call or {}).get("id") == call_id for call in assistant["tool_calls"] or []):
        report.bad(f"{cid}: its assistant row does not carry call {call_id}")
    if tool is None:
        report.bad(f"{cid}: its tool row is missing")
        return
    if (tool["thread_id"], tool["user_id"], tool["tool_call_id"]) != (c["thread_id"],
                                                                       c["user_id"], call_id):
        report.bad(f"{cid}: tool row {tool['id']} belongs to another thread, user or call")
    display = tool["display"] or {}
    if display.get("v") != 1 or display.get("kind") != "components":
        report.bad(f"{cid}: tool row display is not a components display")
    state = (display.get("states") or {}).get(cid)
    if state is None:
        report.bad(f"{cid}: display.states has no entry")
        return
    for key in ("status", "answered_by", "answered_via", "answer"):
        if state.get(key) != c[key]:
            report.bad(f"{cid}: display.states.{key}={state.get(key)!r} but the row has "
                       f"{c[key]!r}")
    for key in ("due_at", "expires_at"):
        if not _same_time(state.get(key), c[key]):
            report.bad(f"{cid}: display {key} {state.get(key)} but the row has {c[key]}")
    report.counts["mirrors"] += 1


# ----- carriers -----

def _check_carriers(data: dict[str, Any], report: Report) -> None:
    components = {c["id"]: c for c in data["components"]}
    decisions = {d["id"]: d for d in data["decisions"]}
    for c in data["components"]:
        if c["decision_id"] is not None and c["decision_id"] not in decisions:
            report.bad(f"{c['id']}: carrier {c['decision_id']} does not exist")
    for d in data["decisions"]:
        if d["kind"] != "agent-question":
            continue
        report.counts["carriers"] += 1
        c = components.get(d["component_id"])
        if c is None:
            report.bad(f"decision {d['id']}: carries a component that does not exist")
            continue
        if d["dedupe_key"] != f"ask:{c['id']}" or c["decision_id"] != d["id"]:
            report.bad(f"decision {d['id']}: not linked both ways with {c['id']} "
                       f"(component points at {c['decision_id']})")
        if (d["user_id"], d["thread_id"], d["sensitive"]) != (c["user_id"], c["thread_id"],
                                                              c["sensitive"]):
            report.bad(f"decision {d['id']}: user, thread or sensitivity differs from {c['id']}")
        settled = d["status"] == "settled"
        if settled != (c["status"] in ANSWERED):
            report.bad(f"decision {d['id']}: {d['status']} while {c['id']} is {c['status']}")
        elif settled and (d["settled_via"] != c["answered_via"] or d["settled_at"] is None
                          or d["answer_text"] is None):
            report.bad(f"decision {d['id']}: settled via {d['settled_via']} but the card was "
                       f"answered via {c['answered_via']}")
        elif not settled and any(d[k] is not None for k in ("settled_via", "settled_at",
                                                             "answer_text")):
            report.bad(f"decision {d['id']}: open but keeps a settlement")


# ----- push outbox -----

OUTBOX_STATES = frozenset({"pending", "sending", "sent", "dead"})


def _check_outbox(data: dict[str, Any], report: Report) -> None:
    decisions = {d["id"]: d for d in data["decisions"]}
    streams: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for row in data["outbox"]:
        report.counts["outbox_rows"] += 1
        report.counts[f"outbox:{row['status']}"] += 1
        if row["status"] not in OUTBOX_STATES:
            report.bad(f"outbox {row['id']}: status {row['status']}")
        if (row["status"] == "sent") != (row["sent_at"] is not None):
            report.bad(f"outbox {row['id']}: status {row['status']} with sent_at {row['sent_at']}")
        if row["status"] == "sent" and row["attempts"] < 1:
            report.bad(f"outbox {row['id']}: sent without an attempt")
        if row["status"] == "sending" and row["lease_until"] is None:
            report.bad(f"outbox {row['id']}: sending without a lease")
        if row["device_user"] is not None and row["device_user"] != row["user_id"]:
            report.bad(f"outbox {row['id']}: queued for another user's device")
        if row["decision_id"] is not None:
            streams[(row["decision_id"], row["device_id"])].append(row)
    for (decision_id, device_id), rows in streams.items():
        d = decisions.get(decision_id)
        if d is None:
            continue  # the FK cascades; a missing decision means the user was deleted
        if any(r["user_id"] != d["user_id"] for r in rows):
            report.bad(f"outbox for decision {decision_id}: a row of another user")
        kinds = [r["kind"] for r in rows]
        if d["status"] == "open" and kinds[-1] != "notify":
            report.bad(f"outbox for decision {decision_id} / device {device_id}: last row is "
                       f"{kinds[-1]} for an open decision")
        # what the device may have shown: without the notifications that never reached it
        # (cancelled before an attempt, or given up), which get no withdraw
        shown = [r for r in rows if not _unshown(r)]
        shown_kinds = [r["kind"] for r in shown]
        if any(a["kind"] == b["kind"] and not _replaces(a, b)
               for a, b in itertools.pairwise(shown)):
            report.bad(f"outbox for decision {decision_id} / device {device_id}: "
                       f"kinds do not alternate: {kinds}")
        if d["status"] != "open" and shown and shown[-1]["kind"] != "withdraw" \
                and shown[-1]["payload_kind"] != "main-answered":
            report.bad(f"outbox for decision {decision_id} / device {device_id}: last row is "
                       f"{shown_kinds[-1]} for an {d['status']} decision")
        for earlier, later in itertools.pairwise(rows):
            # a notification queued before a later withdraw must never be delivered after it
            if (earlier["kind"] == "notify" and earlier["status"] == "pending"
                    and later["kind"] == "withdraw"):
                report.bad(f"outbox {earlier['id']}: a superseded notification is still pending")
        for i, later in enumerate(shown):
            # a withdraw only for a notification that was handed to the device's receiver: the
            # row before it that may have shown (a newer notification cancelled unsent leaves
            # the older one on the device, and that one is what the withdraw removes)
            earlier = shown[i - 1] if i else None
            if later["kind"] == "withdraw" and (earlier is None or earlier["kind"] != "notify"
                                                or earlier["attempts"] == 0):
                report.bad(f"outbox {later['id']}: a withdraw for a notification never sent")
        if rows[0]["kind"] == "withdraw":
            report.bad(f"outbox {rows[0]['id']}: a withdraw with no notification before it")


def _replaces(earlier: dict[str, Any], later: dict[str, Any]) -> bool:
    """Two notifications in a row, the later replacing the earlier on the device (the same
    collapse id): the news that Main answered replaces the question, the question handed
    back replaces its first notification, and a question reopened by a revoke replaces the
    news. Any other pair of notifications without a withdraw between is a duplicate."""
    return earlier["kind"] == later["kind"] == "notify" and (
        later["payload_kind"] == "main-answered" or bool(later["handed_back"])
        or earlier["payload_kind"] == "main-answered")


def _unshown(row: dict[str, Any]) -> bool:
    """A notification that never reached the device: cancelled before any attempt, or given
    up after its attempts failed."""
    return row["kind"] == "notify" and row["status"] == "dead" and (
        row["attempts"] == 0 or not (row["last_error"] or "").startswith("superseded"))


# ----- turns -----

def _check_turns(data: dict[str, Any], report: Report) -> None:
    report.counts["undelivered_inputs"] = int(data["undelivered"])
    for row in data["stranded"]:
        report.bad(f"thread {row['thread_id']}: {row['n']} undelivered input rows and no queued "
                   "or running turn (stranded)")
    for row in data["turn_state"]:
        report.counts["threads"] += 1
        active = row["active"]
        want = active if active in ("queued", "running") else "idle"
        if active is not None and "," in active:
            report.bad(f"thread {row['id']}: more than one active turn ({active})")
        elif row["turn_state"] != want:
            report.bad(f"thread {row['id']}: turn_state {row['turn_state']} but its active turn "
                       f"is {active}")
