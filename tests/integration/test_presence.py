"""Presence rows and their TTL, which decide a card's due time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from maxclaw.clock import FixedClock
from maxclaw.presence.service import PresenceService
from tests.cards import new_thread
from tests.conftest import Harness


async def test_focus_lapses_after_its_ttl_and_on_leave(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    other = await new_thread(a.user)
    clock = FixedClock(datetime(2026, 11, 30, 12, 0, tzinfo=UTC))
    presence = PresenceService(harness.services.db, clock, ttl_s=90)
    await presence.focus("conn-a", a.user_id, tid)
    assert await presence.is_watching(a.user_id, tid)
    assert not await presence.is_watching(a.user_id, other)
    clock.at += timedelta(seconds=89)
    assert await presence.is_watching(a.user_id, tid)
    clock.at += timedelta(seconds=2)
    assert not await presence.is_watching(a.user_id, tid)  # the TTL ran out: not refreshed
    await presence.focus("conn-a", a.user_id, tid)  # a refresh extends it
    assert await presence.is_watching(a.user_id, tid)
    await presence.focus("conn-a", a.user_id, other)  # focus moved
    assert not await presence.is_watching(a.user_id, tid)
    await presence.leave("conn-a", a.user_id)
    assert not await presence.is_watching(a.user_id, other)


async def test_presence_is_per_user(harness: Harness) -> None:
    a = await harness.actor("max")
    b = await harness.actor("eve")
    tid = await new_thread(a.user)
    await harness.services.presence.focus("conn-b", a.user_id, tid)
    assert await harness.services.presence.is_watching(a.user_id, tid)
    assert not await harness.services.presence.is_watching(b.user_id, tid)
