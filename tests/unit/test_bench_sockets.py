"""``python -m bench.sockets`` (issue 33, item 3): its defaults, its refusals (a socket count
beyond the file-descriptor limit of the client or the server processes, named with how to raise
it), and how a socket's frames are counted (every socket of the owner, duplicates, stale)."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from bench.live_load import Socket, _write_all
from bench.sockets import (
    CLIENT_FDS,
    SERVER_FDS,
    Plan,
    Refused,
    Run,
    Worker,
    check_limits,
    main,
    make_plan,
    parser,
    summarise_stacks,
)

ROOT = Path(__file__).resolve().parents[2]
PORTS = 28232


def plan(*argv: str) -> Plan:
    return make_plan(parser().parse_args(list(argv)))


def test_defaults_follow_the_socket_count() -> None:
    assert plan("--sockets", "1000") == Plan(sockets=1000, users=100, rate=50.0, answers=1000,
                                             replicas=1, reconnect=1000, workers=1)
    ten = plan("--sockets", "10000")
    assert (ten.users, ten.reconnect, ten.workers, ten.per_worker) == (1000, 1000, 2, 5000)
    assert plan("--sockets", "5").users == 1  # never zero users
    assert plan("--sockets", "5").reconnect == 5
    two = plan("--sockets", "20000", "--replicas", "2", "--users", "2000", "--reconnect", "0")
    assert (two.per_replica, two.workers, two.reconnect, two.reserve) == (10000, 4, 0, 0)
    # a user's sockets are spread over the replicas: 10 per user over 2 is 5 on each
    assert two.per_user_per_replica == 5


@pytest.mark.parametrize(("argv", "says"), [
    (["--sockets", "0"], "--sockets must be at least 1"),
    (["--sockets", "10", "--users", "11"], "--users must be between 1 and --sockets"),
    (["--sockets", "10", "--reconnect", "11"], "--reconnect must be between 0"),
    (["--sockets", "10", "--rate", "0"], "--rate must be positive"),
    (["--sockets", "10", "--answers", "0"], "--answers must be at least 1"),
    (["--sockets", "10", "--workers", "0"], "--workers must be between 1"),
])
def test_nonsense_is_refused_with_the_reason(argv: list[str], says: str) -> None:
    with pytest.raises(Refused, match=says):
        plan(*argv)


def test_replicas_are_one_or_two() -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["--sockets", "10", "--replicas", "3"])


def test_the_server_limit_refuses_and_says_which_limit_and_how_to_raise_it() -> None:
    check_limits(plan("--sockets", "10000"), (20000, 20000), PORTS)  # fits
    with pytest.raises(Refused) as refused:
        check_limits(plan("--sockets", "20000"), (20000, 20000), PORTS)
    message = str(refused.value)
    assert "each server process" in message and "RLIMIT_NOFILE is 20000" in message
    assert f"at most {20000 - SERVER_FDS:,} sockets fit" in message
    assert "ulimit -Hn" in message and "--replicas 2" in message
    # over two replicas each holds half, and four client processes a quarter
    check_limits(plan("--sockets", "20000", "--replicas", "2"), (20000, 20000), PORTS)


def test_no_descriptor_limit_refuses_nothing_for_descriptors() -> None:
    unlimited = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    check_limits(plan("--sockets", "20000", "--workers", "1"), unlimited, PORTS)


def test_the_client_limit_refuses_and_names_the_split_that_fits() -> None:
    one_client = plan("--sockets", "20000", "--replicas", "2", "--workers", "1")
    with pytest.raises(Refused) as refused:
        check_limits(one_client, (20000, 20000), PORTS)
    message = str(refused.value)
    assert "client process" in message and "RLIMIT_NOFILE is 20000" in message
    assert f"{20000 + CLIENT_FDS:,} file descriptors" in message
    assert "--workers 2" in message


def test_the_local_ports_to_one_replica_are_a_limit_too() -> None:
    with pytest.raises(Refused, match="ip_local_port_range"):
        check_limits(plan("--sockets", "30000", "--workers", "8"), (65536, 65536), PORTS)


def test_main_refuses_before_touching_anything(capsys: pytest.CaptureFixture[str]) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    too_many = 10**7 if hard == resource.RLIM_INFINITY or hard < 10**7 else hard * 4
    with pytest.raises(SystemExit) as exited:
        main(["--sockets", str(too_many), "--replicas", "2"])
    assert exited.value.code == 2
    assert "refused" in capsys.readouterr().err


def test_the_soft_limit_is_raised_to_the_hard_one_and_a_low_hard_limit_refuses() -> None:
    """A process started with soft 256 / hard 3000: the soft limit is raised to 3000 (so 2,000
    sockets fit), and 5,000 sockets are refused naming the hard limit, exit status 2."""
    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 3000))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    raised = subprocess.run(
        [sys.executable, "-c", "from bench.sockets import raise_nofile; print(raise_nofile())"],
        env=env, cwd=ROOT, preexec_fn=low, capture_output=True, text=True, check=True)
    assert raised.stdout.strip() == "(3000, 3000)"
    refused = subprocess.run([sys.executable, "-m", "bench.sockets", "--sockets", "5000"],
                             env=env, cwd=ROOT, preexec_fn=low, capture_output=True,
                             text=True, check=False)
    assert refused.returncode == 2, refused.stderr
    assert "RLIMIT_NOFILE is 3000 (soft; hard 3000)" in refused.stderr
    assert "bench.sockets: refused" in refused.stderr


def _frame(table: str, rid: int, rev: int, answered: str | None = None) -> str:
    record: dict[str, object] = {"id": rid}
    if answered:
        record["display"] = {"states": {answered: {"status": "answered"}}}
    return json.dumps({"type": "record.upsert", "table": table, "rev": rev,
                       "cursor": f"c{rev}", "record": record})


def test_a_socket_counts_duplicates_and_stale_frames_and_keeps_the_cursor() -> None:
    s = Socket(0, "u", "t", "ws://x")
    s.on_text(_frame("messages", 1, 5), 1.0)
    s.on_text(_frame("messages", 1, 7, answered="c:q1"), 2.0)
    s.on_text(_frame("messages", 1, 7, answered="c:q1"), 3.0)  # the same rev again
    s.on_text(_frame("messages", 1, 6), 4.0)  # an older one
    s.on_text(_frame("threads", 1, 6), 5.0)  # another table, another record
    assert (s.frames, s.duplicates, s.stale) == (5, 1, 1)
    assert s.answered == {"c:q1": 2.0} and s.cursor == "c6"
    assert s.lost({"messages:1": 7, "threads:1": 6}) == []
    assert s.lost({"messages:1": 8, "decisions:3": 1}) == ["messages:1", "decisions:3"]


def test_every_socket_of_the_owner_must_get_the_frame(tmp_path: Path) -> None:
    run = Run(plan("--sockets", "4", "--users", "2"), "", tmp_path, None)
    run.sockets = [{"sid": i, "user": i % 2, "replica": 0} for i in range(4)]
    run.answered = {"a:q1": {"sent": 0.0, "done": 1.0, "status": 200, "owner": 0,
                             "step": "steady"},
                    "b:q1": {"sent": 0.0, "done": 1.0, "status": 500, "owner": 1,
                             "step": "steady"}}
    results = {i: {"answered": {}, "frames": 1, "duplicates": 0, "stale": 0, "lost": [],
                   "lost_count": 0, "errors": [], "error_count": 0} for i in range(4)}
    results[0]["answered"] = {"a:q1": 1.010}  # socket 2, user 0's other socket, never got it
    tally = run._tally(results)
    assert tally["missing_frames"] == 1 and tally["non_200_answers"] == 1
    assert tally["latency_steady"]["n"] == 1
    assert tally["latency_steady"]["p50_ms"] == pytest.approx(10.0, abs=0.01)


def test_profile_summary_shares(tmp_path: Path) -> None:
    raw = tmp_path / "raw.txt"
    raw.write_text("main (a/x.py:1);send (b/ws.py:9) 3\nmain (a/x.py:1);dumps (c/json.py:2) 1\n")
    got = summarise_stacks(raw)
    assert got["samples"] == 4
    assert got["self_pct"][0] == ["send (b/ws.py)", 75.0]
    # the chain every sample shares is left out of the inclusive list
    assert got["inclusive_pct"] == [["send (b/ws.py)", 75.0], ["dumps (c/json.py)", 25.0]]


def test_a_client_process_returns_its_results_through_a_file(tmp_path: Path) -> None:
    """The per-socket results (hundreds of KB at 1,000 sockets) come back through a file beside
    the client's log; the pipe carries only the short line that names it (a CI run once read
    219,264 bytes of that line inline and failed to parse it)."""
    async def exchange() -> tuple[dict[str, Any], dict[str, Any]]:
        worker = await Worker.start({"kind": "sockets", "host": "127.0.0.1", "sockets": []},
                                    tmp_path / "client-0.log")
        try:
            ready = await worker.event(60)
            await worker.send({"cmd": "finish", "expected": {}})
            return ready, await worker.event(60)
        finally:
            worker.stop()
            assert worker.proc.stdin is not None
            worker.proc.stdin.close()
            await worker.proc.wait()

    ready, finished = asyncio.run(exchange())
    assert ready["event"] == "ready" and ready["synced"] == 0
    assert finished["event"] == "finished" and finished["sockets"] == []
    assert json.loads((tmp_path / "client-0.result.json").read_text()) == finished


def test_a_cut_line_says_how_the_client_process_ended(tmp_path: Path) -> None:
    log = tmp_path / "client-0.log"
    log.write_text("Traceback: the reason\n")

    async def read() -> None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; sys.stdout.write('{\"a\": 1'); sys.exit(3)",
            stdout=subprocess.PIPE)
        try:
            await Worker(proc, [], log).event(60)
        finally:
            await proc.wait()

    with pytest.raises(RuntimeError, match=r"after 7 bytes of a line; exit status 3") as err:
        asyncio.run(read())
    assert "Traceback: the reason" in str(err.value)


def test_a_long_line_is_written_whole_to_a_non_blocking_pipe() -> None:
    """``_emit``'s writer: a pipe left non-blocking takes a 1 MB line in pieces, none lost
    (the line is sixteen times a pipe's 64 KiB buffer, so the writer meets a full pipe and
    short writes whatever the reader's pace)."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    data = b"x" * 1_000_000 + b"\n"
    got = bytearray()

    def drain() -> None:
        while chunk := os.read(r, 65536):
            got.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    _write_all(w, data)
    os.close(w)
    reader.join(10)
    os.close(r)
    assert bytes(got) == data
