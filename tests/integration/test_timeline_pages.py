"""Reading a thread backwards (issue 29, item 4): ``GET /v1/threads/{id}/messages?latest=true``
is the newest page and ``?before_id=`` the one before a message, each in id order, with
``prev_before_id`` to go further back (null at the thread's first message). The WebUI opens a
thread this way and loads older pages as Max scrolls up."""

from __future__ import annotations

from typing import Any

from tests.conftest import Harness

MESSAGES = 25


def _ids(page: dict[str, Any]) -> list[int]:
    return [int(m["id"]) for m in page["messages"]]


async def test_pages_backwards_from_the_newest_to_the_first(harness: Harness) -> None:
    a = await harness.actor("max")
    tid = (await a.user.post("/v1/threads", json={"title": "Long"})).json()["id"]
    posted = []
    for n in range(MESSAGES):
        resp = await a.user.post(f"/v1/threads/{tid}/messages", json={"body": f"m{n}"})
        assert resp.status_code == 201, resp.text
        posted.append(int(resp.json()["id"]))
    path = f"/v1/threads/{tid}/messages"

    newest = (await a.user.get(f"{path}?latest=true&limit=10")).json()
    assert _ids(newest) == posted[-10:]
    assert newest["prev_before_id"] == posted[-10] and newest["next_after_id"] is None
    seen = _ids(newest)
    page = newest
    while page["prev_before_id"] is not None:
        resp = await a.user.get(f"{path}?before_id={page['prev_before_id']}&limit=10")
        assert resp.status_code == 200, resp.text
        page = resp.json()
        assert page["next_after_id"] == _ids(page)[-1]  # newer messages follow it
        assert _ids(page) == sorted(_ids(page)) and _ids(page)[-1] < seen[0]
        seen = _ids(page) + seen
    assert seen == posted  # every message once, in order, down to the first
    assert page["messages"][0]["body"] == "m0"
    # before the first message: an empty page that goes nowhere
    empty = (await a.user.get(f"{path}?before_id={posted[0]}")).json()
    assert empty["messages"] == [] and empty["prev_before_id"] is None
    # the forward reading is unchanged (no prev_before_id on it)
    forward = (await a.user.get(f"{path}?after_id=0&limit=5")).json()
    assert _ids(forward) == posted[:5] and "prev_before_id" not in forward


async def test_backward_bad_input_is_422_and_another_s_thread_404(harness: Harness) -> None:
    a = await harness.actor("max")
    eve = await harness.actor("eve")
    tid = (await a.user.post("/v1/threads", json={"title": "Long"})).json()["id"]
    path = f"/v1/threads/{tid}/messages"
    for query, field in (("before_id=0", "before_id"), ("before_id=-4", "before_id"),
                         ("latest=true&before_id=5", "before_id"),
                         ("latest=true&after_id=3", "after_id"),
                         ("before_id=9&after_id=3", "after_id"),
                         ("latest=true&limit=0", "limit"), ("before_id=x", "before_id"),
                         (f"before_id={2**63}", "before_id")):
        resp = await a.user.get(f"{path}?{query}")
        assert resp.status_code == 422, (query, resp.text)
        body = resp.json()
        assert body["code"] == "invalid" and field in str(body["data"]), (query, body)
    resp = await eve.user.get(f"{path}?latest=true")
    assert resp.status_code == 404 and resp.json()["code"] == "not_found"
    empty = (await a.user.get(f"{path}?latest=true")).json()
    assert empty == {"messages": [], "next_after_id": None, "prev_before_id": None}
