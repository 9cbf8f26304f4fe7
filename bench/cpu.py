"""CPU time per round trip, by process: PostgreSQL backends, the service's Python, the load.

On a shared 2-core machine throughput swings with the neighbours' load, but the CPU a round
trip *consumes* barely does, so these figures locate the cost more steadily than rates do.
Backends are found in ``pg_stat_activity`` for the benchmark's database (a server on another
host has none visible: those figures are then absent).
"""

from __future__ import annotations

import os
from typing import Any

import asyncpg
import psutil


def _cpu(pid: int) -> float:
    try:
        t = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0
    return float(t.user + t.system)


async def backend_pids(conn: asyncpg.Connection) -> list[int]:
    """Every backend connected to the current database (ours: the database is private)."""
    rows = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                            " AND pid <> pg_backend_pid()")
    return [int(r["pid"]) for r in rows]


class Meter:
    """CPU seconds used between ``start`` and ``stop`` by named groups of processes."""

    def __init__(self) -> None:
        self.begin: dict[int, float] = {}
        self.used: dict[str, float] = {}

    def start(self, pids: list[int]) -> None:
        self.begin = {pid: _cpu(pid) for pid in pids}

    def stop(self, groups: dict[str, list[int]]) -> dict[str, float]:
        """CPU seconds per group; a process that appeared meanwhile counts from zero."""
        self.used = {name: sum(max(_cpu(pid) - self.begin.get(pid, 0.0), 0.0) for pid in pids)
                     for name, pids in groups.items()}
        return self.used


def per_round_trip_ms(used: dict[str, float], round_trips: int) -> dict[str, Any]:
    if not round_trips:
        return {}
    out = {name: round(seconds * 1000 / round_trips, 3) for name, seconds in used.items()}
    out["total"] = round(sum(used.values()) * 1000 / round_trips, 3)
    return out


def own_pid() -> int:
    return os.getpid()
