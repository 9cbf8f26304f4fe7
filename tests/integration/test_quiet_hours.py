"""Quiet hours with a moved clock (issue 29, item 2): his settings over HTTP, pushes over real
HTTP to a local webhook, and the due sweep, across a window's edges and across a DST change
in his time zone. Inside the window: no push above passive and no hand-off to Main."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from maxclaw.app import create_app
from maxclaw.settings import Settings
from tests.cards import CHOICE, TEXT, ask_args, new_thread, post_card
from tests.conftest import Actor, Harness
from tests.integration.push_fakes import Endpoint

NIGHT = {"start": "22:30", "end": "07:30", "days": None}


class Moved:
    """The one clock every service reads, set by hand."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


@pytest.fixture
async def quiet(database_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    settings = Settings(database_url=database_url, run_sweeper=False, run_listener=False,
                        run_push_dispatcher=False, db_pool_min=1, db_pool_max=10,
                        push_allow_private_urls=True, push_backoff_base_s=0.05,
                        push_backoff_max_s=0.2, push_max_attempts=3)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield Harness(app=app, services=app.state.services, client=None)  # type: ignore[arg-type]
        await app.state.services.push.dispatcher.close()


def move(h: Harness, monkeypatch: pytest.MonkeyPatch, at: datetime) -> Moved:
    clock = Moved(at)
    monkeypatch.setattr(h.services.clock, "now", clock.now)  # shared by every service
    return clock


def local(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


async def settings(a: Actor, **fields: Any) -> dict[str, Any]:
    resp = await a.user.patch("/v1/settings", json=fields)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


async def webhook(a: Actor, endpoint: Endpoint) -> None:
    resp = await a.user.post("/v1/push/devices", json={
        "platform": "webhook", "url": f"{endpoint.url}/hook", "secret": "whsec_quiet_0123456789"})
    assert resp.status_code == 201, resp.text


def pushed(endpoint: Endpoint) -> list[dict[str, Any]]:
    return [json.loads(hit.body) for hit in endpoint.hits]


async def component(a: Actor, cid: str) -> dict[str, Any]:
    resp = await a.user.get(f"/v1/components/{cid}")
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def steps(start: datetime, end: datetime, every: timedelta) -> Iterator[datetime]:
    t = start
    while t < end:
        yield t
        t += every


async def test_settings_are_read_changed_and_refused_by_field(quiet: Harness) -> None:
    a = await quiet.actor("max")
    first = await a.user.get("/v1/settings", headers={"Accept-Language": "zh-CN,zh;q=0.9"})
    assert first.status_code == 200, first.text
    assert first.json() | {"quiet_until": None} == {
        "locale": "zh-CN", "time_zone": "UTC", "quiet_hours": None,
        "main_may_answer_during_quiet_hours": False, "quiet_push": "passive",
        "main_after_minutes": 30, "main_may_take_cards": True, "main_timeout_minutes": None,
        "quiet_now": False, "quiet_until": None}
    # the first read stored it: another language later changes nothing
    again = await a.user.get("/v1/settings", headers={"Accept-Language": "en"})
    assert again.json()["locale"] == "zh-CN"
    assert (await settings(a, locale="tlh-KL"))["locale"] == "en"  # unknown: English, no error
    assert (await settings(a, locale="zh-Hans"))["locale"] == "zh-CN"
    refused = {
        "time_zone": ({"time_zone": "Mars/Olympus"}, ["body", "time_zone"]),
        "start": ({"quiet_hours": {"start": "25:00", "end": "07:00"}},
                  ["body", "quiet_hours", "start"]),
        "end": ({"quiet_hours": {"start": "22:00", "end": "7"}}, ["body", "quiet_hours", "end"]),
        "empty": ({"quiet_hours": {"start": "22:00", "end": "22:00"}},
                  ["body", "quiet_hours", "end"]),
        "days": ({"quiet_hours": {**NIGHT, "days": [0, 8]}}, ["body", "quiet_hours", "days"]),
        "push": ({"quiet_push": "loud"}, ["body", "quiet_push"]),
        "minutes": ({"main_after_minutes": 10081}, ["body", "main_after_minutes"]),
        "timeout": ({"main_timeout_minutes": 0}, ["body", "main_timeout_minutes"]),
        "flag": ({"main_may_take_cards": "yes"}, ["body", "main_may_take_cards"]),
        "unknown": ({"volume": 11}, ["body", "volume"]),
    }
    for name, (body, loc) in refused.items():
        resp = await a.user.patch("/v1/settings", json=body)
        assert resp.status_code == 422, (name, resp.text)
        assert resp.json()["code"] == "invalid"
        assert resp.json()["data"]["errors"][0]["loc"] == loc, name
    changed = await settings(a, time_zone="Asia/Shanghai",
                             quiet_hours={**NIGHT, "days": [5, 1, 5]}, quiet_push="hold",
                             main_after_minutes=45, main_may_answer_during_quiet_hours=True)
    assert changed["quiet_hours"] == {**NIGHT, "days": [1, 5]}
    assert changed["time_zone"] == "Asia/Shanghai" and changed["quiet_push"] == "hold"
    assert (await a.user.get("/v1/settings")).json() == changed
    assert (await a.agent.get("/v1/settings")).status_code == 403  # a user endpoint


async def test_across_the_window_edges_no_push_above_passive_and_no_hand_off(
        quiet: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    a = await quiet.actor("max")
    clock = move(quiet, monkeypatch, local("2027-06-01T22:15+02:00"))
    await settings(a, time_zone="Europe/Berlin", quiet_hours=NIGHT)
    async with Endpoint() as endpoint:
        await webhook(a, endpoint)
        tid = await new_thread(a.user)
        _, before = await post_card(a.agent, tid, TEXT, main_after_minutes=30)
        early = before["components"][0]["id"]
        # 15 minutes run before 22:30, the other 15 after 07:30 ("Main decides at 07:45")
        assert (await component(a, early))["due_at"] == "2027-06-02T05:45:00Z"
        assert before["components"][0]["answer_due_at"] == "2027-06-02T05:45:00Z"
        await quiet.services.push.dispatcher.run_until_idle()  # sent at 22:15: not quiet
        assert pushed(endpoint)[0]["interruption_level"] == "active"

        clock.at = local("2027-06-01T23:00+02:00")
        tid2 = await new_thread(a.user)
        _, inside = await post_card(a.agent, tid2, CHOICE, main_after_minutes=30,
                                    urgency="time-sensitive")
        late = inside["components"][0]["id"]
        assert (await component(a, late))["due_at"] == "2027-06-02T06:00:00Z"  # 08:00 local
        for t in steps(local("2027-06-01T22:30+02:00"), local("2027-06-02T07:45+02:00"),
                       timedelta(minutes=5)):
            clock.at = t
            assert await quiet.services.components.sweep_due_all() == \
                {"handed_to_main": 0, "kept_open": 0}, t
            await quiet.services.push.dispatcher.run_until_idle()
        [_, night] = pushed(endpoint)
        # asked as time-sensitive, sent inside the window: passive, silent
        assert night["interruption_level"] == "passive" and night["silent"] is True
        assert night["urgency"] == "time-sensitive"
        clock.at = local("2027-06-02T07:45+02:00")
        assert (await quiet.services.components.sweep_due_all())["handed_to_main"] == 1
        assert (await component(a, early))["status"] == "with-main"
        assert (await component(a, late))["status"] == "open"
        clock.at = local("2027-06-02T08:00+02:00")
        assert (await quiet.services.components.sweep_due_all())["handed_to_main"] == 1
        assert (await component(a, late))["status"] == "with-main"


async def test_across_a_dst_change_in_his_time_zone(
        quiet: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    # Berlin springs forward at 02:00 on 2027-03-28: the window is 21:30Z to 05:30Z
    a = await quiet.actor("max")
    clock = move(quiet, monkeypatch, local("2027-03-27T23:00+01:00"))
    await settings(a, time_zone="Europe/Berlin", quiet_hours=NIGHT, locale="zh-CN")
    async with Endpoint() as endpoint:
        await webhook(a, endpoint)
        tid = await new_thread(a.user)
        _, content = await post_card(a.agent, tid, CHOICE, main_after_minutes=30)
        cid = content["components"][0]["id"]
        assert (await component(a, cid))["due_at"] == "2027-03-28T06:00:00Z"  # 08:00 CEST
        for t in steps(local("2027-03-27T23:00+01:00"), local("2027-03-28T08:00+02:00"),
                       timedelta(minutes=10)):
            clock.at = t
            assert (await quiet.services.components.sweep_due_all())["handed_to_main"] == 0, t
            await quiet.services.push.dispatcher.run_until_idle()
        [sent] = pushed(endpoint)
        assert sent["interruption_level"] == "passive"
        # his locale's words on the fixed buttons, the agent's as written
        assert sent["locale"] == "zh-CN"
        assert [x["title"] for x in sent["actions"]] == ["Keep one version", "Remove it now",
                                                         "其他…"]
        assert sent["reply"] == {"placeholder": "回复…"}
        clock.at = local("2027-03-28T08:00+02:00")
        assert (await quiet.services.components.sweep_due_all())["handed_to_main"] == 1


async def test_held_pushes_go_out_when_the_window_ends(
        quiet: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    a = await quiet.actor("max")
    clock = move(quiet, monkeypatch, local("2027-06-01T23:00+00:00"))
    await settings(a, quiet_hours=NIGHT, quiet_push="hold")
    async with Endpoint() as endpoint:
        await webhook(a, endpoint)
        tid = await new_thread(a.user)
        await post_card(a.agent, tid, TEXT, urgency="time-sensitive")
        for t in steps(clock.at, local("2027-06-02T07:30+00:00"), timedelta(minutes=30)):
            clock.at = t
            await quiet.services.push.dispatcher.run_until_idle()
        assert endpoint.hits == []
        async with quiet.services.db.connection() as conn:
            row = await conn.fetchrow("SELECT status, attempts, next_attempt_at FROM push_outbox")
        assert (row["status"], row["attempts"]) == ("pending", 0)  # held, no attempt spent
        assert row["next_attempt_at"] == local("2027-06-02T07:30+00:00")
        clock.at = local("2027-06-02T07:30+00:00")
        await quiet.services.push.dispatcher.run_until_idle()
        [sent] = pushed(endpoint)
        assert sent["interruption_level"] == "time-sensitive"  # the window is over
        # held again the next night; ending his quiet hours releases it at once
        clock.at = local("2027-06-02T23:00+00:00")
        await post_card(a.agent, tid, TEXT)
        await quiet.services.push.dispatcher.run_until_idle()
        assert len(endpoint.hits) == 1
        await settings(a, quiet_hours=None)
        await quiet.services.push.dispatcher.run_until_idle()
        assert [p["interruption_level"] for p in pushed(endpoint)] == ["time-sensitive", "active"]


async def test_a_settings_change_recomputes_his_open_cards(
        quiet: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    a = await quiet.actor("max")
    other = await quiet.actor("other")
    move(quiet, monkeypatch, local("2027-06-01T23:00+00:00"))
    tid = await new_thread(a.user)
    _, given = await post_card(a.agent, tid, TEXT, main_after_minutes=30)
    _, default = await post_card(a.agent, tid, CHOICE)  # no minutes: his default
    _, never = await post_card(a.agent, tid, TEXT, main_after_minutes=None)
    otid = await new_thread(other.user)
    _, others = await post_card(other.agent, otid, TEXT, main_after_minutes=30)
    ids = [c["components"][0]["id"] for c in (given, default, never)]

    async def dues() -> list[str | None]:
        return [(await component(a, cid))["due_at"] for cid in ids]

    assert await dues() == ["2027-06-01T23:30:00Z", "2027-06-01T23:30:00Z", None]
    await settings(a, quiet_hours=NIGHT, main_after_minutes=60)
    assert await dues() == ["2027-06-02T08:00:00Z", "2027-06-02T08:30:00Z", None]
    # the card in the timeline says the same (display.states)
    page = (await a.user.get(f"/v1/threads/{tid}/messages")).json()["messages"]
    states = {k: v for m in page if m["role"] == "tool" and m["display"]
              for k, v in m["display"]["states"].items()}
    assert states[ids[0]]["due_at"] == "2027-06-02T08:00:00Z"
    await settings(a, main_may_answer_during_quiet_hours=True)
    assert await dues() == ["2027-06-01T23:30:00Z", "2027-06-02T00:00:00Z", None]
    await settings(a, main_may_take_cards=False)
    assert await dues() == [None, None, None]
    # another user's cards are his own business
    assert (await component(other, others["components"][0]["id"]))["due_at"] == \
        "2027-06-01T23:30:00Z"


async def test_the_one_statement_post_follows_his_settings(
        quiet: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    a = await quiet.actor("max")
    move(quiet, monkeypatch, local("2027-06-01T23:00+00:00"))
    await settings(a, quiet_hours=NIGHT)
    tid = await new_thread(a.user)
    resp = await a.agent.post(f"/v1/agent/threads/{tid}/messages", json={
        "role": "assistant", "content": None, "execute": True,
        "tool_calls": [{"id": "call_q1", "type": "function", "function": {
            "name": "ask_user_question", "arguments": json.dumps(ask_args(TEXT))}}]})
    assert resp.status_code == 201, resp.text
    [result] = resp.json()["results"]
    assert result["content"]["components"][0]["answer_due_at"] == "2027-06-02T08:00:00Z"


async def test_a_card_he_stopped_watching_in_the_night_waits_for_the_morning(
        quiet: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    a = await quiet.actor("max")
    clock = move(quiet, monkeypatch, local("2027-06-01T22:00+00:00"))
    await settings(a, quiet_hours=NIGHT, main_after_minutes=20)
    tid = await new_thread(a.user)
    await quiet.services.presence.focus("tab", a.user_id, tid)
    _, content = await post_card(a.agent, tid, TEXT)  # watched: due in an hour, no carrier
    cid = content["components"][0]["id"]
    # an hour of clock: 30 minutes before the window, 30 after it
    assert (await component(a, cid))["due_at"] == "2027-06-02T08:00:00Z"
    await quiet.services.presence.leave("tab", a.user_id)
    clock.at = local("2027-06-01T23:00+00:00")
    assert await quiet.services.components.sweep_unwatched(now=clock.at) == 1
    # his default 20 minutes, from 23:00: all of them after the window
    assert (await component(a, cid))["due_at"] == "2027-06-02T07:50:00Z"
    # a later settings change restarts from the same moment (due_from), not from posting
    await settings(a, main_after_minutes=40)
    assert (await component(a, cid))["due_at"] == "2027-06-02T08:10:00Z"
