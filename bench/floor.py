"""(a) The floor: the statements the service sends for one round trip, replayed with asyncpg.

The floor is not written by hand. At the start of a run, one round trip goes through the
service objects (``AgentMessageService.post`` → ``ToolService.execute`` → ``ComponentService.
answer``) while every statement they send is recorded — its SQL, its arguments, its result —
and the transaction brackets around them. Replaying that script on a dedicated connection is
the floor: the same statements, in the same transactions, with the same parameters, and nothing
else (no validation, no projections, no pool checkout or reset). When the service's SQL
changes, the floor follows by construction; only Python and plumbing separate the two.

Per replayed round trip the values that must differ are substituted: the user, the thread, the
call id (and every string containing it: the component id, dedupe keys, message bodies), and
every id a statement returned (message, decision ids) wherever a later argument used it.
A replayed statement that returns fewer rows than it did when recorded (a CAS that found
nothing, say) fails the run: the floor must do the same work as the service.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from asyncpg.connection import Connection

from bench.counting import POOL_RESET

PHASES = ("post", "execute", "answer")


@dataclass
class Step:
    """One recorded statement: SQL with its arguments and result, or a BEGIN/COMMIT."""

    query: str
    args: tuple[Any, ...] = ()
    rows: list[dict[str, Any]] = field(default_factory=list)
    bracket: bool = False
    dynamic: list[bool] = field(default_factory=list)  # which arguments need substituting


class Recorder:
    """Records what asyncpg connections send while ``phase`` is set (class-level hooks)."""

    def __init__(self) -> None:
        self.phase: str | None = None
        self.steps: dict[str, list[Step]] = {p: [] for p in PHASES}

    @contextlib.contextmanager
    def hooked(self) -> Iterator[None]:
        original_execute, original_inner = Connection.execute, Connection._execute
        recorder = self

        async def execute(conn: Connection, query: str, *args: Any, **kw: Any) -> Any:
            result = await original_execute(conn, query, *args, **kw)
            if recorder.phase and not args and not query.startswith(POOL_RESET):
                recorder.steps[recorder.phase].append(Step(query, bracket=True))
            return result

        async def inner(conn: Connection, query: str, args: Any, *a: Any, **kw: Any) -> Any:
            result = await original_inner(conn, query, args, *a, **kw)
            if recorder.phase:
                records = result[0] if kw.get("return_status") else result
                recorder.steps[recorder.phase].append(Step(
                    query, tuple(args), [dict(r) for r in records or []]))
            return result

        Connection.execute = execute
        Connection._execute = inner
        try:
            yield
        finally:
            Connection.execute = original_execute
            Connection._execute = original_inner


class Script:
    """A recorded round trip and the values a replay must replace."""

    def __init__(self, steps: dict[str, list[Step]], user_id: str, thread_id: str,
                 call_id: str) -> None:
        self.steps = steps
        self.user_id, self.thread_id, self.call_id = user_id, thread_id, call_id
        self.execute_in_post = False  # the post carried "execute": true (no execute step)
        self.returned_ids = {v for ss in steps.values() for s in ss for r in s.rows
                             for k, v in r.items() if _is_id(k, v)}
        for step in (s for ss in steps.values() for s in ss):
            step.dynamic = [self._needs(a) for a in step.args]

    def counts(self) -> dict[str, int]:
        return {phase: len(steps) for phase, steps in self.steps.items()}

    def statements(self, phase: str) -> list[str]:
        return [" ".join(s.query.split()) for s in self.steps[phase]]

    def _needs(self, value: Any) -> bool:
        if isinstance(value, str):
            return any(x in value for x in (self.user_id, self.thread_id, self.call_id))
        if isinstance(value, int) and not isinstance(value, bool):
            return value in self.returned_ids
        if isinstance(value, list | tuple):
            return any(self._needs(v) for v in value)
        if isinstance(value, dict):
            return any(self._needs(k) or self._needs(v) for k, v in value.items())
        return False


_WRITES = re.compile(r"\b(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


def _writes(query: str) -> bool:
    return _WRITES.search(query) is not None


def _is_id(key: str, value: Any) -> bool:
    return (key == "id" or key.endswith("_id")) and isinstance(value, int) \
        and not isinstance(value, bool)


class Replay:
    """One round trip's substitutions: strings by substring, returned ids by value."""

    def __init__(self, script: Script, user_id: str, thread_id: str, call_id: str,
                 after_commit: str | None = None) -> None:
        self.script = script
        self.after_commit = after_commit  # a prototype: a statement sent after each COMMIT
        self.user_id = user_id
        self.strings = [(script.call_id, call_id), (script.thread_id, thread_id),
                        (script.user_id, user_id)]
        self.ids: dict[int, int] = {}

    def value(self, v: Any) -> Any:
        if isinstance(v, str):
            for old, new in self.strings:
                if old in v:
                    v = v.replace(old, new)
            return v
        if isinstance(v, int) and not isinstance(v, bool):
            return self.ids.get(v, v)
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, tuple):
            return tuple(self.value(x) for x in v)
        if isinstance(v, dict):
            return {self.value(k): self.value(x) for k, x in v.items()}
        return v

    async def run(self, conn: asyncpg.Connection, phase: str) -> None:
        in_transaction = False
        for step in self.script.steps[phase]:
            if step.bracket:
                await conn.execute(step.query)
                in_transaction = step.query.upper().startswith("BEGIN")
                if self.after_commit and step.query.upper().startswith("COMMIT"):
                    await conn.execute(self.after_commit, self.user_id)
                continue
            args = [self.value(a) if d else a for a, d in zip(step.args, step.dynamic,
                                                                strict=True)]
            rows = await conn.fetch(step.query, *args)
            if len(rows) < len(step.rows):
                raise RuntimeError(f"the floor's replay found {len(rows)} rows where the "
                                   f"service found {len(step.rows)}:\n{step.query}")
            for old, new in zip(step.rows, rows, strict=False):
                for key, value in old.items():
                    if _is_id(key, value):
                        self.ids[value] = new[key]
            # a write sent on its own (autocommit, e.g. a merged statement) commits by itself
            if self.after_commit and not in_transaction and _writes(step.query):
                await conn.execute(self.after_commit, self.user_id)


async def post(conn: asyncpg.Connection, script: Script, user_id: str, thread_id: str,
               call_id: str, after_commit: str | None = None) -> Replay:
    """The assistant row and ``execute`` (the card posted); returns the replay to answer."""
    replay = Replay(script, user_id, thread_id, call_id, after_commit)
    await replay.run(conn, "post")
    await replay.run(conn, "execute")
    return replay


async def answer(conn: asyncpg.Connection, replay: Replay) -> None:
    await replay.run(conn, "answer")
