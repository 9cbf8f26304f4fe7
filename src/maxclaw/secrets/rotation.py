"""``maxclaw secrets rotate``: re-seal every live secret under the keyring's sealing key.

With a key file, ``rotate`` first writes a new key at the top of the file (the old ones stay
below it, still opening old boxes); servers re-read the file within a second and seal new
secrets under it. Then rows still under another key are re-sealed in batches of ``batch``,
each batch one transaction (``FOR UPDATE SKIP LOCKED``: a row a request holds is taken on the
next pass), so the pass runs while the service does and can be stopped and run again
(``--resume``) at any point. Passes repeat until no live row uses another key, and at least
two re-read intervals after the start — rows a server sealed under the old key just before it
re-read the file are taken by a later pass. A row
whose box does not open is left as it is and counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from maxclaw.db.database import Database
from maxclaw.secrets import store
from maxclaw.secrets.crypto import BoxError, Key, open_box, seal
from maxclaw.secrets.keyring import RELOAD_S, Keyring
from maxclaw.secrets.service import aad

MAX_PASSES = 50


@dataclass
class RotationReport:
    key_id: str
    resealed: int = 0
    batches: int = 0
    passes: int = 0
    unreadable: list[int] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)


async def rotate(db: Database, keyring: Keyring, *, batch: int = 200,
                 progress: Callable[[RotationReport], None] | None = None) -> RotationReport:
    """Re-seal every live row under ``keyring.primary`` (see the module docstring)."""
    target: Key = keyring.primary
    report = RotationReport(target.id)
    loop = asyncio.get_running_loop()
    # a clean count is believed only once every server has had time to re-read the key file
    settled_at = loop.time() + 2 * RELOAD_S
    skip: set[int] = set()
    while report.passes < MAX_PASSES:
        report.passes += 1
        after = 0
        while True:
            async with db.transaction() as conn:
                rows = await store.rotate_pick(conn, target.id, after, batch)
                ids: list[tuple[str, int]] = []
                boxes: list[bytes] = []
                for row in rows:
                    after = max(after, row.message_id)
                    if row.message_id in skip:
                        continue
                    old = keyring.get(row.key_id) if row.key_id else None
                    row_aad = aad(row.user_id, row.thread_id, row.kind)
                    try:
                        if old is None or row.box is None:
                            raise BoxError("no such key")
                        plain = open_box(old, bytes(row.box), row_aad)
                    except BoxError:
                        skip.add(row.message_id)
                        report.unreadable.append(row.message_id)
                        continue
                    ids.append((row.user_id, row.message_id))
                    boxes.append(seal(target, plain, row_aad))
                if ids:
                    await store.rotate_write(conn, target.id, ids, boxes)
            report.resealed += len(ids)
            report.batches += 1 if rows else 0
            if progress and rows:
                progress(report)
            if len(rows) < batch:
                break
        async with db.connection() as conn:
            usage = await store.key_usage(conn)
        left = sum(n for k, n in usage.items() if k != target.id) - len(skip)
        report.usage = usage
        if left <= 0 and loop.time() >= settled_at:
            return report
        # rows sealed under an old key by a server that has not re-read the file yet
        await asyncio.sleep(RELOAD_S)
    return report
