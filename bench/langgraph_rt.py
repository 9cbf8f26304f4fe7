"""(l) LangGraph in the same run: ``interrupt()`` + ``Command(resume=…)`` on ``AsyncPostgresSaver``.

What a user would pick instead of MaxClaw for "the agent asks, a person answers later": a
LangGraph graph whose node calls ``interrupt()`` with the question, checkpointed in PostgreSQL;
the answer resumes it with ``Command(resume=…)``. One round trip = the first ``ainvoke`` (runs
to the interrupt, checkpoints it) + the resuming ``ainvoke`` (loads the checkpoint, finishes,
checkpoints again), on a fresh ``thread_id`` each time, as MaxClaw's round trips use fresh
threads. The saver is LangGraph's own (``langgraph-checkpoint-postgres``) on a psycopg pool
configured as its documentation says (autocommit, ``prepare_threshold=0``, dict rows), in a
database of its own on the same server as MaxClaw's, and it is measured by the same closed loop,
client counts and warm-up as the other modes, taking turns with them (``bench/run.py``).

It runs in the benchmark process (LangGraph is a library an application embeds, like mode b),
so its CPU per round trip is "python" (the benchmark process) + "postgres" (the backends of its
database). Optional: ``pip install -e '.[bench]'``; without it the suite says so and goes on.
"""

from __future__ import annotations

import itertools
import time
from importlib import metadata
from typing import Any, TypedDict

from bench.dataset import CARD_ARGS
from bench.loop import RoundTrip, Samples, closed_loop


def available() -> str | None:
    """None when LangGraph and its PostgreSQL saver can be imported, else why not."""
    try:
        import langgraph.checkpoint.postgres.aio
        import langgraph.graph  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        return f"not installed ({exc.name}): pip install -e '.[bench]'"
    return None


def versions() -> dict[str, str]:
    out = {}
    for name in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-postgres",
                 "psycopg", "psycopg-pool"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "?"
    return out


class CardState(TypedDict):
    title: str
    questions: list[dict[str, Any]]
    answer: Any


async def _ask(state: CardState) -> dict[str, Any]:
    from langgraph.types import interrupt

    # the question goes out with the interrupt; the resume value is the answer. An async node:
    # a plain one would run in a worker thread, which costs LangGraph a thread hop per step
    return {"answer": interrupt({"title": state["title"], "questions": state["questions"]})}


class LangGraph:
    """One compiled graph on a saver with a pool of ``clients`` connections."""

    def __init__(self, url: str, clients: int) -> None:
        self.url, self.clients = url, clients
        self.pool: Any = None
        self.graph: Any = None

    async def __aenter__(self) -> LangGraph:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from langgraph.graph import END, START, StateGraph
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        self.pool = AsyncConnectionPool(
            self.url, min_size=self.clients, max_size=self.clients, open=False,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row})
        await self.pool.open(wait=True)
        saver = AsyncPostgresSaver(self.pool)
        await saver.setup()
        builder = StateGraph(CardState)
        builder.add_node("ask", _ask)
        builder.add_edge(START, "ask")
        builder.add_edge("ask", END)
        self.graph = builder.compile(checkpointer=saver)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.pool.close()

    def round_trip(self, prefix: str) -> RoundTrip:
        from langgraph.types import Command

        seq, graph = itertools.count(), self.graph
        start = {"title": CARD_ARGS["title"], "questions": CARD_ARGS["questions"],
                 "answer": None}

        async def round_trip() -> tuple[float, float]:
            config = {"configurable": {"thread_id": f"{prefix}_{next(seq)}"}}
            t0 = time.perf_counter()
            asked = await graph.ainvoke(start, config)
            if "__interrupt__" not in asked:
                raise RuntimeError(f"the graph did not stop at the interrupt: {asked!r}")
            t1 = time.perf_counter()
            done = await graph.ainvoke(Command(resume=["keep"]), config)
            if done.get("answer") != ["keep"]:
                raise RuntimeError(f"the resume did not carry the answer: {done!r}")
            t2 = time.perf_counter()
            return t2 - t0, t2 - t1

        return round_trip

    async def point(self, tag: str, warmup: float, duration: float) -> Samples:
        clients = [self.round_trip(f"{tag}c{n}") for n in range(self.clients)]
        return await closed_loop(clients, warmup, duration)
