"""The push claim's round-robin cursor (``store.next_cursor``): where the next round starts."""

from __future__ import annotations

import uuid

from maxclaw.push import store


def user(n: int) -> str:
    return str(uuid.UUID(int=n))


def test_a_round_from_the_start_ends_at_its_largest_user() -> None:
    assert store.next_cursor(store.FIRST_USER, [user(3), user(9), user(5)]) == user(9)


def test_a_round_that_wrapped_ends_at_the_largest_user_before_the_cursor() -> None:
    # claimed after user 6: 7 and 9 first, then round again to 2 and 4
    assert store.next_cursor(user(6), [user(9), user(2), user(7), user(4)]) == user(4)
    assert store.next_cursor(user(6), [user(6), user(8)]) == user(6)  # 8, then 6 again


def test_a_round_that_did_not_wrap_ends_at_its_largest_user() -> None:
    assert store.next_cursor(user(6), [user(7), user(8)]) == user(8)


def test_an_empty_claim_keeps_the_cursor() -> None:
    assert store.next_cursor(user(6), []) == user(6)
