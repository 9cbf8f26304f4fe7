"""Max's threads: rename, archive (its open cards withdrawn, reason ``archived``), delete.

Archiving withdraws through the transitions table's ``withdraw`` row and its effects
(``ComponentService.withdraw``: the carrier settled, its pushes withdrawn, Main told if it held
the card), in the archive's transaction, so the consequences are written in one place only. A
delete withdraws each device's notifications through the push outbox's one withdraw
(``push.outbox.enqueue_withdraw``), then removes every row of the thread, in one transaction.
"""

from __future__ import annotations

from maxclaw.auth.service import Principal
from maxclaw.components.machine import UNSETTLED, statuses
from maxclaw.components.service import ComponentService
from maxclaw.db.database import Database
from maxclaw.errors import Conflict, Invalid, NotFound
from maxclaw.housekeeping import store
from maxclaw.push.outbox import enqueue_withdraw
from maxclaw.timeline.projections import thread_projection
from maxclaw.timeline.rows import ThreadRow
from maxclaw.timeline.service import scoped_thread_id
from maxclaw.wire.models import Thread

MAX_TITLE_CHARS = 500
ARCHIVED_REASON = "archived"


def _thread(row: ThreadRow) -> Thread:
    return Thread.model_validate(thread_projection(row))


class ThreadHousekeeping:
    """``PATCH`` and ``DELETE /v1/threads/{id}``."""

    def __init__(self, db: Database, components: ComponentService) -> None:
        self.db = db
        self.components = components

    async def update(self, who: Principal, thread_id: str, *, title: str | None = None,
                     archived: bool | None = None, keep_cards_open: bool = False) -> Thread:
        """Rename and/or archive (or bring back) one of the caller's threads, in one
        transaction: a refusal writes nothing."""
        if title is None and archived is None:
            raise Invalid.at(["body"], "give a title, archived, or both")
        if title is not None:
            title = title.strip()
            if not title:
                raise Invalid.at(["body", "title"], "a title needs some text")
            if len(title) > MAX_TITLE_CHARS:
                raise Invalid.at(["body", "title"],
                                 f"a title is at most {MAX_TITLE_CHARS} characters")
        thread_id = scoped_thread_id(who, thread_id)
        async with self.db.transaction() as conn:
            row = await store.lock_thread(conn, who.user_id, thread_id)
            if row is None:
                raise NotFound("No such thread.")
            if archived and row.kind == "main":
                raise Conflict("Main's thread cannot be archived.")
            if title is not None and title != row.title:
                row = await store.rename(conn, who.user_id, thread_id, title)
            if archived is not None and archived != (row.archived_at is not None):
                if archived and not keep_cards_open:
                    open_ids = await store.unsettled_components(conn, who.user_id, thread_id,
                                                                statuses(UNSETTLED))
                    if open_ids:
                        await self.components.withdraw(conn, who, thread_id, open_ids,
                                                       ARCHIVED_REASON)
                # last: a message the withdrawal wrote must not bring the thread back
                row = await store.set_archived(conn, who.user_id, thread_id, archived)
        # open_cards is counted at commit (a deferred trigger): the thread as committed
        async with self.db.connection() as conn:
            return _thread(await store.get_thread(conn, who.user_id, thread_id) or row)

    @staticmethod
    def check_confirmation(thread_id: str, confirm: str) -> None:
        """A delete names its thread twice: in the path and in ``?confirm=``."""
        if confirm.strip().lower() != thread_id.strip().lower():
            raise Invalid.at(["query", "confirm"],
                             "repeat the thread's id in confirm to delete it")

    async def delete(self, who: Principal, thread_id: str) -> None:
        """Every row of the thread, and each device's notifications of it withdrawn, in one
        transaction; a thread already gone is 404."""
        thread_id = scoped_thread_id(who, thread_id)
        async with self.db.transaction() as conn:
            row = await store.lock_thread(conn, who.user_id, thread_id)
            if row is None:
                raise NotFound("No such thread.")
            if row.kind == "main":
                raise Conflict("Main's thread cannot be deleted.")
            decisions = await store.thread_decisions(conn, who.user_id, thread_id)
            for decision in decisions:
                if decision.component_id is not None:
                    await enqueue_withdraw(conn, user_id=who.user_id, decision={
                        "id": decision.id, "component_id": decision.component_id})
            ids = [d.id for d in decisions]
            await store.detach_withdraws(conn, who.user_id, ids)
            await store.delete_thread(conn, who.user_id, thread_id, ids)
            if any(d.status == "open" for d in decisions):
                await store.refresh_live_activities(conn, who.user_id)
