"""Every replica hears a revoke at once: the ``maxclaw_token_revoked`` channel.

A revoke deletes the token row and NOTIFYs its id in the same transaction. Each process's
listener drops the token from its auth cache and closes the WebSockets it authenticated. The
cache is only used while the process's LISTEN connection (``db.listen.Listener``) is up: a
process that cannot hear revokes reads every token from the database, and a lost connection
clears the cache, as does every reconnect (revokes sent meanwhile were unheard). The
connection opens lazily, with the first authentication.
"""

from __future__ import annotations

from collections.abc import Callable

from maxclaw.db.listen import Listener

CHANNEL = "maxclaw_token_revoked"


def _ignore_revoked(_token_id: int) -> None:
    return None


def _ignore_lost() -> None:
    return None


class RevocationListener:
    """Token revocations heard on the process's shared LISTEN connection.

    ``on_revoked`` and ``on_lost`` are whom to tell (the auth service's cache); they may be
    given later with ``deliver_to``, since the cache's owner is built with this listener."""

    name = "token-revocations"

    def __init__(self, listener: Listener,
                 on_revoked: Callable[[int], None] = _ignore_revoked,
                 on_lost: Callable[[], None] = _ignore_lost) -> None:
        self.listener = listener
        self.on_revoked = on_revoked
        self.on_lost = on_lost
        listener.subscribe(CHANNEL, self._on_notify, on_reconnect=self._forget_all,
                           on_lost=self._forget_all)

    def deliver_to(self, on_revoked: Callable[[int], None], on_lost: Callable[[], None]) -> None:
        """Tell ``on_revoked`` each revoked token id, and ``on_lost`` whenever a revoke may
        have gone unheard."""
        self.on_revoked = on_revoked
        self.on_lost = on_lost

    @property
    def listening(self) -> bool:
        return self.listener.listening

    async def ensure_listening(self) -> bool:
        """Open the LISTEN connection unless it is open (or is being retried)."""
        return await self.listener.ensure_listening()

    def _on_notify(self, payload: str) -> None:
        try:
            token_id = int(payload)
        except ValueError:
            return
        self.on_revoked(token_id)

    def _forget_all(self) -> None:
        self.on_lost()

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        """The shared connection is closed by the listener's own ``stop``."""
