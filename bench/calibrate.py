"""The issue's anchor, re-measured here and now: its minimal round-trip SQL under ``pgbench``.

The Performance issue's limit (about 770 / 2,060 / 1,515 round trips/s at 1 / 4 / 16 clients)
was measured on a quiet machine; this machine is shared. Running the same kind of script in
the same run says how far today's machine is from that one, which is how to read absolute
figures (and the LangGraph comparison, measured there too). The script: post (assistant row,
tool row, component row) and answer (CAS, display mirror, user row), two transactions, the
rev trigger with its ``pg_notify`` on every row, as the issue describes.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from maxclaw.db.database import connect

SCRIPT = r"""
\set n random(1, 1000000000000)
BEGIN;
INSERT INTO messages (user_id, thread_id, role, tool_calls)
VALUES (':uid'::uuid, ':tid'::uuid, 'assistant',
        '[{"id": "pgb", "name": "ask_user_question", "arguments": {"title": "t"}}]')
RETURNING id AS aid \gset
INSERT INTO messages (user_id, thread_id, role, tool_call_id, content, display)
VALUES (':uid'::uuid, ':tid'::uuid, 'tool', 'pgb' || :aid, '{"posted": true}',
        '{"v": 1, "kind": "components", "states": {}}')
RETURNING id AS tool \gset
INSERT INTO message_components (id, user_id, thread_id, message_id, tool_message_id, kind)
VALUES ('pgb' || :aid || ':q1', ':uid'::uuid, ':tid'::uuid, :aid, :tool, 'choice');
COMMIT;
BEGIN;
UPDATE message_components
   SET status = 'answered', answer = '{"selected": ["keep"], "text": null}', answered_by = 'max',
       answered_via = 'card', answered_at = now(), due_at = NULL
 WHERE id = 'pgb' || :aid || ':q1' AND status = 'open';
UPDATE messages SET display = jsonb_set(display, ARRAY['states', 'pgb' || :aid || ':q1'],
                                        '{"status": "answered"}')
 WHERE id = :tool;
INSERT INTO messages (user_id, thread_id, role, body)
VALUES (':uid'::uuid, ':tid'::uuid, 'user', 'Answer to the card: Keep one version');
COMMIT;
"""


async def _owner(url: str) -> tuple[str, str]:
    conn: asyncpg.Connection = await connect(url)
    try:
        uid = await conn.fetchval("INSERT INTO users (name) VALUES ('pgbench') RETURNING id::text")
        tid = await conn.fetchval("INSERT INTO threads (user_id, kind, title) VALUES "
                                  "($1::uuid, 'normal', 'pgbench') RETURNING id::text", uid)
    finally:
        await conn.close()
    return str(uid), str(tid)


async def run(url: str, clients: list[int], seconds: float) -> dict[str, Any]:
    """Round trips/s of the anchor's script per client count, or why it could not run."""
    pgbench = shutil.which("pgbench")
    parts = urlsplit(url)
    if pgbench is None or not parts.hostname or parts.hostname.startswith("/"):
        return {"status": "not run: needs pgbench on PATH and a TCP database URL"}
    uid, tid = await _owner(url)
    script = Path(tempfile.mkdtemp(prefix="maxclaw-pgbench-")) / "round_trip.sql"
    script.write_text(SCRIPT)
    out: dict[str, Any] = {"seconds": seconds, "rate_per_s": {}}
    for n in clients:
        cmd = [pgbench, "-n", "-c", str(n), "-j", str(min(n, 4)), "-T", str(int(seconds)),
               "-f", str(script), "-D", f"uid={uid}", "-D", f"tid={tid}",
               "-h", parts.hostname, "-p", str(parts.port or 5432),
               "-U", parts.username or "postgres", parts.path.lstrip("/")]
        env = {**os.environ, "PGPASSWORD": parts.password} if parts.password else None
        proc = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True,
                                       check=False, env=env, timeout=seconds + 60)
        found = re.search(r"tps = ([0-9.]+)", proc.stdout)
        if proc.returncode != 0 or found is None:
            return {"status": f"pgbench failed: {(proc.stderr or proc.stdout)[-500:]}"}
        out["rate_per_s"][str(n)] = round(float(found.group(1)), 1)
    return out
