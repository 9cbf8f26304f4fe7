"""The push line: ``maxclaw push-worker`` delivering to a webhook receiver on 127.0.0.1.

Two measurements, one worker process (the dispatcher alone, as operators run it), the receiver
in this process (it notes when each delivery arrived):

- **deliveries/s**: ``backlog`` notify rows for 50 users x 2 devices are queued in one
  transaction (its hint wakes the worker); the rate is rows / (last arrival - commit).
- **answer -> withdraw delivered**: cards posted through the service objects (each carrier's
  notification goes to the user's 2 devices and is delivered first), then answered on the card
  at ``rate`` answers/s; each answer's two withdraws are timed from the moment the answer is
  sent (the service call starts) to their arrival. Also counted: withdraws queued for a device whose
  notification was never handed to a receiver (must be 0).

``python -m bench.push [--database-url URL]`` runs it alone; ``python -m bench`` runs it last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.dataset import CARD_ARGS
from bench.pg import BenchDatabase, choose_server
from bench.roundtrip import in_process, make_identities, make_stocks, run_async
from bench.stats import summary_ms
from maxclaw.db.database import connect

DEVICES_PER_USER = 2


class Receiver:
    """A minimal keep-alive HTTP/1.1 server answering 200; notes each delivery's arrival."""

    def __init__(self) -> None:
        self.arrivals: dict[str, float] = {}  # Idempotency-Key -> perf_counter at arrival
        self.withdraws: dict[str, list[float]] = {}  # collapse_id -> arrivals
        self.count = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._changed = asyncio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> Receiver:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def wait_count(self, n: int, timeout_s: float) -> None:
        async with asyncio.timeout(timeout_s):
            while self.count < n:
                self._changed.clear()
                await self._changed.wait()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                now = time.perf_counter()
                length, key = 0, ""
                for line in head.decode("latin-1").split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                    elif name.lower() == "idempotency-key":
                        key = value.strip()
                body = json.loads(await reader.readexactly(length))
                if key not in self.arrivals:
                    self.arrivals[key] = now
                    self.count += 1
                    if body.get("kind") == "withdraw":
                        self.withdraws.setdefault(body["collapse_id"], []).append(now)
                    self._changed.set()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def start_worker(url: str, log_path: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MAXCLAW_PUSH_ALLOW_PRIVATE_URLS": "true", "MAXCLAW_LOG_JSON": "true",
           "MAXCLAW_LOG_LEVEL": "WARNING"}
    with log_path.open("ab") as log:
        return subprocess.Popen([sys.executable, "-m", "maxclaw.cli", "push-worker",
                                 "--database-url", url], env=env, stdout=log,
                                stderr=subprocess.STDOUT)


async def add_devices(conn: Any, receiver: Receiver, user_ids: list[str]) -> list[tuple[str, int]]:
    devices = []
    for user_id in user_ids:
        for k in range(DEVICES_PER_USER):
            address = f"{receiver.url}/{user_id}/{k}"
            devices.append((user_id, int(await conn.fetchval(
                "INSERT INTO push_devices (user_id, platform, config, secret)"
                " VALUES ($1, 'webhook', $2, 'bench-secret-0123456789') RETURNING id",
                user_id, {"url": address, "address": address}))))
    return devices


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def throughput(conn: Any, receiver: Receiver, devices: list[tuple[str, int]],
                     backlog: int, worker_pid: int) -> dict[str, Any]:
    picks = [devices[i % len(devices)] for i in range(backlog)]
    before = receiver.count
    cpu_before = cpu_s(worker_pid)
    async with conn.transaction():
        await conn.execute(
            "INSERT INTO push_outbox (user_id, device_id, kind, collapse_id, payload)"
            " SELECT u, d, 'notify', 'bench', jsonb_build_object('kind', 'bench', 'n', ord)"
            " FROM unnest($1::uuid[], $2::bigint[]) WITH ORDINALITY AS x(u, d, ord)",
            [u for u, _ in picks], [d for _, d in picks])
        await conn.execute("SELECT pg_notify('maxclaw_push', '')")
    committed = time.perf_counter()
    await receiver.wait_count(before + backlog, timeout_s=300)
    last = max(receiver.arrivals.values())
    seconds = last - committed
    cpu_ms = (cpu_s(worker_pid) - cpu_before) * 1000 / backlog
    return {"deliveries": backlog, "seconds": round(seconds, 3),
            "deliveries_per_s": round(backlog / seconds),
            # the worker's own CPU per delivery, and the rate one free core would allow
            "worker_cpu_ms_per_delivery": round(cpu_ms, 3),
            "per_core_ceiling_per_s": round(1000 / cpu_ms) if cpu_ms else None,
            "load_average_1m": round(os.getloadavg()[0], 1)}


async def answer_to_withdraw(url: str, receiver: Receiver, answers: int,
                             rate: float) -> dict[str, Any]:
    users = 50
    conn = await connect(url)
    try:
        async with in_process(url) as services:
            idents = await make_identities(services, "push", users)
            await add_devices(conn, receiver, [i.user_id for i in idents])
            stocks = await make_stocks(url, idents, answers // users + 2)
            cards = []
            before = receiver.count
            for n in range(answers):
                ident, stock = idents[n % users], stocks[n % users]
                agent, thread, call_id = ident.principal("agent"), stock.take(), f"pb{n}"
                await services.agent_messages.post(agent, thread, {
                    "role": "assistant", "content": None,
                    "tool_calls": [{"id": call_id, "type": "function", "function": {
                        "name": "ask_user_question", "arguments": json.dumps(CARD_ARGS)}}]})
                status, _content, error = await services.tools.execute(agent, thread, call_id)
                if status != 200:
                    raise RuntimeError(f"execute: {status} {error}")
                cards.append((ident, call_id))
            # every notification delivered first: the withdraws then have something to take back
            await receiver.wait_count(before + answers * DEVICES_PER_USER, timeout_s=120)
            answered: dict[str, float] = {}
            start = time.perf_counter()

            async def answer(i: int, ident: Any, call_id: str) -> None:
                await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
                answered[f"ask:{call_id}:q1"] = time.perf_counter()  # the answer is sent
                await services.components.answer(ident.principal("user"), f"{call_id}:q1",
                                                 ["keep"], None, "card")

            await asyncio.gather(*(answer(i, ident, c) for i, (ident, c) in enumerate(cards)))
            offered_s = time.perf_counter() - start
            await receiver.wait_count(before + 2 * answers * DEVICES_PER_USER, timeout_s=120)
        latencies = [t - answered[cid] for cid, times in receiver.withdraws.items()
                     if cid in answered for t in times]
        unsent = await conn.fetchval(
            """SELECT count(*) FROM push_outbox AS w
               WHERE w.kind = 'withdraw' AND NOT EXISTS (
                   SELECT 1 FROM push_outbox AS n
                   WHERE n.kind = 'notify' AND n.decision_id = w.decision_id
                     AND n.device_id = w.device_id AND n.attempts > 0)""")
    finally:
        await conn.close()
    return {"answers": answers, "devices_per_user": DEVICES_PER_USER,
            "offered_rate_per_s": rate, "achieved_rate_per_s": round(answers / offered_s, 1),
            "withdraws_delivered": len(latencies), "latency": summary_ms(latencies),
            "withdraws_for_unsent_notifies": int(unsent)}


async def run(url: str, log_dir: Path, *, backlog: int = 5000, answers: int = 500,
              rate: float = 100.0) -> dict[str, Any]:
    receiver = await Receiver().start()
    worker = start_worker(url, log_dir / "push-worker.log")
    conn = await connect(url)
    try:
        async with in_process(url, pool_max=2) as services:
            users = [(await services.auth.create_user(f"push-bench-{i}"))[0] for i in range(50)]
        devices = await add_devices(conn, receiver, users)
        # the worker is up and warm (its start, imports and migration check, can take seconds)
        await throughput(conn, receiver, devices, 200, worker.pid)
        out = {"throughput": await throughput(conn, receiver, devices, backlog, worker.pid)}
        out["answer_to_withdraw"] = await answer_to_withdraw(url, receiver, answers, rate)
        return out
    finally:
        await conn.close()
        worker.terminate()
        await asyncio.to_thread(worker.wait, 30)
        await receiver.stop()


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets for this line, as ``bench.targets`` rows."""
    t, a = result["throughput"], result["answer_to_withdraw"]
    p99 = a["latency"].get("p99_ms")
    load = f"load average {t['load_average_1m']} on {os.cpu_count()} cores"
    return [
        {"target": "push dispatcher ≥ 500 deliveries/s to a local webhook",
         "measured": t["deliveries_per_s"], "threshold": "≥ 500",
         "holds": t["deliveries_per_s"] >= 500,
         "note": f"worker CPU {t['worker_cpu_ms_per_delivery']} ms/delivery; {load}"},
        {"target": "answer → withdraw delivered p99 at 100 answers/s, 2 devices/user",
         "measured": p99, "threshold": "≤ 1000 ms",
         "holds": None if p99 is None else p99 <= 1000,
         "note": f"{a['achieved_rate_per_s']} answers/s achieved"},
        {"target": "withdraws queued for notifications never sent",
         "measured": a["withdraws_for_unsent_notifies"], "threshold": "0",
         "holds": a["withdraws_for_unsent_notifies"] == 0, "note": ""},
    ]


async def item(url: str, plan: Any, log_dir: Path) -> dict[str, Any]:
    """``python -m bench``'s push item (``bench.run.ITEMS``)."""
    result = await run(url, log_dir, backlog=plan.push_backlog, answers=plan.push_answers,
                       rate=plan.push_rate)
    return {**result, "verdicts": targets(result)}


def line(result: dict[str, Any]) -> str:
    t, a = result["throughput"], result["answer_to_withdraw"]
    lat = a["latency"]
    return (f"push: {t['deliveries_per_s']:,} deliveries/s ({t['deliveries']:,} to a local "
            f"webhook in {t['seconds']} s; worker CPU {t['worker_cpu_ms_per_delivery']} ms each, "
            f"load average {t['load_average_1m']}); answer → withdraw delivered "
            f"p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms (n={lat['n']}, "
            f"{a['achieved_rate_per_s']} answers/s, "
            f"{a['devices_per_user']} devices each); withdraws for unsent notifies "
            f"{a['withdraws_for_unsent_notifies']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.push", description=__doc__.split(
        "\n")[0])
    parser.add_argument("--database-url")
    parser.add_argument("--backlog", type=int, default=5000)
    parser.add_argument("--answers", type=int, default=500)
    parser.add_argument("--rate", type=float, default=100.0)
    args = parser.parse_args(argv)
    pg = choose_server(args.database_url)
    db = BenchDatabase(pg)
    url = db.create()
    log_dir = Path(tempfile.mkdtemp(prefix="maxclaw-bench-push-"))
    try:
        result = run_async(run(url, log_dir, backlog=args.backlog, answers=args.answers,
                               rate=args.rate))
    finally:
        db.drop()
        pg.stop()
    print(json.dumps({k: v for k, v in result.items()}, indent=1))
    print(line(result))
    for v in targets(result):
        print(f"  [{'HOLDS' if v['holds'] else 'MISSES'}] {v['target']}: {v['measured']} "
              f"(target {v['threshold']}) {v['note']}")


if __name__ == "__main__":
    main()
