"""A socket's bounded queue of outgoing frames (bounded by characters, not by count).

Live frames are pushed without waiting: the hub fans out to every socket from one task and must
never block on one client. The bound is checked per batch instead: a socket whose backlog is
already over it when new changes arrive is too slow and gets closed, so a queue holds at most
the bound plus one batch. (Checking each frame would close a fast client too, whenever a single
transaction writes more than the bound.) Catch-up frames and replies wait for room, which is how
a slow reader paces its own snapshot.
"""

from __future__ import annotations

import asyncio
from collections import deque


class SendQueue:
    """FIFO of JSON text frames holding at most ``max_chars`` (one frame always fits)."""

    def __init__(self, max_chars: int) -> None:
        if max_chars < 1:
            raise ValueError("max_chars must be positive")
        self.max_chars = max_chars
        self._items: deque[str] = deque()
        self._chars = 0
        self._readable = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self.closed = False

    def __len__(self) -> int:
        return len(self._items)

    @property
    def chars(self) -> int:
        return self._chars

    def _fits(self, frame: str) -> bool:
        # an empty queue takes any frame, so one record larger than the bound still gets through
        return not self._items or self._chars + len(frame) <= self.max_chars

    def _append(self, frame: str) -> None:
        self._items.append(frame)
        self._chars += len(frame)
        self._readable.set()
        if self._chars >= self.max_chars:
            self._room.clear()

    def close(self) -> None:
        """The socket is gone: drop what is queued and whatever comes; release waiters."""
        self.closed = True
        self._items.clear()
        self._chars = 0
        self._room.set()

    @property
    def over_limit(self) -> bool:
        """More than ``max_chars`` is waiting: the reader is not keeping up."""
        return self._chars > self.max_chars

    def push(self, frame: str) -> None:
        """Queue ``frame`` now, whatever the backlog (the caller checks ``over_limit``)."""
        if not self.closed:  # else dropped: the connection is being torn down anyway
            self._append(frame)

    async def put(self, frame: str) -> None:
        """Queue ``frame``, waiting until the reader has made room."""
        while not self.closed and not self._fits(frame):
            self._room.clear()
            await self._room.wait()
        if not self.closed:
            self._append(frame)

    async def get(self) -> str:
        """The oldest frame, waiting for one."""
        while not self._items:
            self._readable.clear()
            await self._readable.wait()
        frame = self._items.popleft()
        self._chars -= len(frame)
        if not self._items:
            self._readable.clear()
        self._room.set()
        return frame
