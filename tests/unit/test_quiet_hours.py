"""Quiet hours (``prefs/quiet.py``), the due clock (``prefs/due.py``), the push catalogue and
the push shaping: pure functions with pinned instants, DST changes included."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from maxclaw.cards.definitions import components_of_tool_call
from maxclaw.prefs import quiet as q
from maxclaw.prefs.catalogue import count_text, from_accept_language, locale_of, text
from maxclaw.prefs.due import card_due
from maxclaw.prefs.rows import PrefsRow, of_json
from maxclaw.push.shaping import shape

NIGHT = q.QuietHours(start=q.parse_hhmm("22:30"), end=q.parse_hhmm("07:30"))
UTCZ = q.zone("UTC")
BERLIN = q.zone("Europe/Berlin")


def at(text_: str) -> datetime:
    return datetime.fromisoformat(text_).astimezone(UTC)


def test_a_window_that_crosses_midnight() -> None:
    for inside in ("2026-06-01T22:30+00:00", "2026-06-01T23:59+00:00",
                   "2026-06-02T00:10+00:00", "2026-06-02T07:29+00:00"):
        assert q.quiet_until(NIGHT, UTCZ, at(inside)) == at("2026-06-02T07:30+00:00"), inside
    for outside in ("2026-06-01T22:29+00:00", "2026-06-02T07:30+00:00",
                    "2026-06-02T12:00+00:00"):
        assert q.quiet_until(NIGHT, UTCZ, at(outside)) is None, outside


def test_a_window_within_one_day() -> None:
    nap = q.QuietHours(start=q.parse_hhmm("13:00"), end=q.parse_hhmm("14:00"))
    assert q.quiet_until(nap, UTCZ, at("2026-06-01T13:30+00:00")) == at("2026-06-01T14:00+00:00")
    assert q.quiet_until(nap, UTCZ, at("2026-06-01T14:00+00:00")) is None


def test_days_name_the_evening_the_window_starts() -> None:
    fridays = q.QuietHours(NIGHT.start, NIGHT.end, frozenset({5}))  # 2026-06-05 is a Friday
    assert q.quiet_until(fridays, UTCZ, at("2026-06-05T23:00+00:00")) is not None
    assert q.quiet_until(fridays, UTCZ, at("2026-06-06T01:00+00:00")) is not None  # Sat early
    assert q.quiet_until(fridays, UTCZ, at("2026-06-06T23:00+00:00")) is None  # Saturday night
    assert q.quiet_until(fridays, UTCZ, at("2026-06-04T23:00+00:00")) is None  # Thursday


def test_the_due_clock_pauses_in_the_window() -> None:
    # posted inside: the whole 30 minutes after the window ("Main decides at 08:00")
    assert q.due_after(at("2026-06-01T23:00+00:00"), 30, NIGHT, UTCZ) == \
        at("2026-06-02T08:00+00:00")
    # posted before: 15 minutes run before 22:30, the other 15 after 07:30
    assert q.due_after(at("2026-06-01T22:15+00:00"), 30, NIGHT, UTCZ) == \
        at("2026-06-02T07:45+00:00")
    # a clock that runs out exactly when the window opens waits for its end
    assert q.due_after(at("2026-06-01T22:00+00:00"), 30, NIGHT, UTCZ) == \
        at("2026-06-02T07:30+00:00")
    # 0 minutes: at once outside, at the window's end inside
    assert q.due_after(at("2026-06-01T12:00+00:00"), 0, NIGHT, UTCZ) == \
        at("2026-06-01T12:00+00:00")
    assert q.due_after(at("2026-06-02T03:00+00:00"), 0, NIGHT, UTCZ) == \
        at("2026-06-02T07:30+00:00")
    # outside, and done before the window: untouched
    assert q.due_after(at("2026-06-01T12:00+00:00"), 30, NIGHT, UTCZ) == \
        at("2026-06-01T12:30+00:00")


def test_a_long_clock_skips_every_night() -> None:
    # 15 waking hours a day: 2 days of 15 hours plus 1 hour, from 07:30 on the 1st
    minutes = 31 * 60
    assert q.due_after(at("2026-06-01T07:30+00:00"), minutes, NIGHT, UTCZ) == \
        at("2026-06-03T08:30+00:00")
    week = q.due_after(at("2026-06-01T12:00+00:00"), 10080, NIGHT, UTCZ)
    assert q.quiet_until(NIGHT, UTCZ, week) is None


def test_a_dst_change_inside_the_window() -> None:
    # Europe/Berlin springs forward on 2026-03-29 at 02:00: the night of the 28th is 8 h long
    start = at("2026-03-28T22:30+01:00")
    end = at("2026-03-29T07:30+02:00")
    assert q.quiet_until(NIGHT, BERLIN, start) == end
    assert (end - start).total_seconds() == 8 * 3600
    assert q.quiet_until(NIGHT, BERLIN, at("2026-03-29T07:29+02:00")) == end
    assert q.quiet_until(NIGHT, BERLIN, end) is None
    # posted at 23:00 local with 30 minutes: 08:00 summer time
    assert q.due_after(at("2026-03-28T23:00+01:00"), 30, NIGHT, BERLIN) == \
        at("2026-03-29T08:00+02:00")
    # falling back on 2026-10-25 at 03:00: that night is 10 h long, and 08:00 is still 08:00
    assert q.due_after(at("2026-10-24T23:00+02:00"), 30, NIGHT, BERLIN) == \
        at("2026-10-25T08:00+01:00")
    assert q.quiet_until(NIGHT, BERLIN, at("2026-10-25T07:00+01:00")) == \
        at("2026-10-25T07:30+01:00")


def test_window_edges_in_a_dst_gap_and_overlap() -> None:
    gap = q.QuietHours(start=q.parse_hhmm("02:30"), end=q.parse_hhmm("06:00"))
    # 02:30 does not exist on 2026-03-29 in Berlin: read with the offset before (03:30 CEST)
    assert q.window_at(gap, BERLIN, at("2026-03-29T04:00+02:00")) == (
        at("2026-03-29T03:30+02:00"), at("2026-03-29T06:00+02:00"))
    assert q.quiet_until(gap, BERLIN, at("2026-03-29T03:15+02:00")) is None
    # 02:30 happens twice on 2026-10-25: the first one (summer time)
    assert q.window_at(gap, BERLIN, at("2026-10-25T02:40+02:00")) == (
        at("2026-10-25T02:30+02:00"), at("2026-10-25T06:00+01:00"))


def test_bad_windows_and_zones() -> None:
    for bad in ("7:30", "24:00", "22:60", "", "22:30:00"):
        with pytest.raises(ValueError, match="HH:MM"):
            q.parse_hhmm(bad)
    with pytest.raises(ValueError, match="differ"):
        q.QuietHours(start=600, end=600)
    with pytest.raises(ValueError, match="ISO weekdays"):
        q.QuietHours(start=600, end=700, days=frozenset({0}))
    for name in ("Mars/Olympus_Mons", "../etc/passwd", ""):
        with pytest.raises(ValueError, match="IANA"):
            q.zone(name)


def _card(**args: object) -> object:
    return components_of_tool_call({"id": "c1", "name": "ask_user_question", "arguments": {
        "title": "T", "questions": [{"id": "q1", "kind": "text", "question": "?"}], **args}})


def test_card_due_follows_his_settings() -> None:
    start = at("2026-06-01T23:00+00:00")
    quiet = {"start": "22:30", "end": "07:30", "days": None}
    prefs = PrefsRow(user_id="u", quiet_hours=quiet, main_after_minutes=45)
    card = _card()
    assert card_due(prefs, card, start=start, watched=False) == at("2026-06-02T08:15+00:00")
    assert card_due(prefs, _card(main_after_minutes=30), start=start, watched=False) == \
        at("2026-06-02T08:00+00:00")
    assert card_due(prefs, _card(main_after_minutes=None), start=start, watched=False) is None
    assert card_due(prefs, card, start=start, watched=True) == at("2026-06-02T08:30+00:00")
    allowed = PrefsRow(user_id="u", quiet_hours=quiet, main_may_answer_during_quiet_hours=True)
    assert card_due(allowed, card, start=start, watched=False) == at("2026-06-01T23:30+00:00")
    never = PrefsRow(user_id="u", main_may_take_cards=False)
    assert card_due(never, card, start=start, watched=False) is None


def test_locales_fall_back_to_english() -> None:
    assert from_accept_language("zh-CN,zh;q=0.9,en;q=0.8") == "zh-CN"
    assert from_accept_language("en-GB,en;q=0.9") == "en"
    assert from_accept_language("fr-FR,zh;q=0.5") == "zh-CN"
    assert from_accept_language("de-DE") == "en"
    assert from_accept_language(None) == "en"
    assert from_accept_language("zh;q=0,en;q=0.1") == "en"
    assert locale_of("zh-Hans-CN") == "zh-CN"
    assert locale_of("klingon") == "en"
    assert text("zh-CN", "push.other") == "其他…"
    assert text("xx", "push.other") == "Other…"
    assert count_text("en", "activity.open", 1) == "1 open question"
    assert count_text("en", "activity.open", 2) == "2 open questions"
    assert count_text("zh-CN", "activity.open", 2) == "2 个待回答的问题"


def test_every_locale_has_every_message() -> None:
    from maxclaw.prefs.catalogue import MESSAGES
    assert all(set(table) == set(MESSAGES["en"]) for table in MESSAGES.values())


QUESTION = {"v": 1, "kind": "agent-question", "decision_id": 1, "title": "T", "body": "?",
            "actions": [{"id": "opt:a", "title": "A"},
                        {"id": "other", "title": "Other…", "input": True}],
            "reply": {"placeholder": "Reply…"}, "secret": False, "urgency": "normal"}


def test_pushes_are_passive_or_held_inside_and_never_time_sensitive_by_default() -> None:
    night = {"start": "22:30", "end": "07:30", "days": None}
    passive = PrefsRow(user_id="u", locale="zh-CN", quiet_hours=night)
    inside, outside = at("2026-06-01T23:00+00:00"), at("2026-06-01T12:00+00:00")
    shaped = shape("notify", QUESTION, passive, inside)
    assert shaped.hold_until is None
    assert shaped.payload["interruption_level"] == "passive" and shaped.payload["silent"]
    assert shaped.payload["actions"][1]["title"] == "其他…"
    assert shaped.payload["actions"][0]["title"] == "A"  # the agent's words, as written
    assert shaped.payload["reply"]["placeholder"] == "回复…"
    assert shaped.payload["labels"] == {"open": "打开", "other": "其他…", "reply": "回复…"}
    urgent = {**QUESTION, "urgency": "time-sensitive"}
    assert shape("notify", urgent, passive, inside).payload["interruption_level"] == "passive"
    assert shape("notify", urgent, passive, outside).payload["interruption_level"] == \
        "time-sensitive"
    assert shape("notify", QUESTION, passive, outside).payload["interruption_level"] == "active"
    held = shape("notify", QUESTION, PrefsRow(user_id="u", quiet_hours=night,
                                              quiet_push="hold"), inside)
    assert held.hold_until == at("2026-06-02T07:30+00:00")
    withdraw = {"v": 1, "kind": "withdraw", "collapse_id": "ask:c1:q1"}
    assert shape("withdraw", withdraw, passive, inside).payload == withdraw


def test_settings_read_inside_another_statement() -> None:
    assert of_json("u", None) == PrefsRow(user_id="u")
    assert of_json("u", '{"locale": "zh-CN", "user_id": "u", "updated_at": "x"}').locale == \
        "zh-CN"


def test_apns_renders_the_level_and_his_locale() -> None:
    from maxclaw.push.adapters.apns import alert_message, live_activity_message
    passive = alert_message({**QUESTION, "interruption_level": "passive"}, None)["aps"]
    assert passive["interruption-level"] == "passive" and "sound" not in passive
    urgent = alert_message({**QUESTION, "interruption_level": "time-sensitive"}, None)["aps"]
    assert urgent["interruption-level"] == "time-sensitive" and urgent["sound"] == "default"
    assert alert_message(QUESTION, None)["aps"]["interruption-level"] == "active"
    start = {"event": "start", "timestamp": 1, "open_count": 2, "cards": []}
    assert live_activity_message({**start, "locale": "zh-CN"})["aps"]["alert"]["body"] == \
        "2 个待回答的问题"
    assert live_activity_message(start)["aps"]["alert"]["body"] == "2 open questions"
