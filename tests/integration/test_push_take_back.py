"""Take back from the notification that confirms an answer (issue 30, item 1): an answer given
with a notification's action token comes back with a single-use ``retract`` token for the same
user, decision and device, and ``POST /v1/push/actions`` with ``action: "retract"`` and that
token takes the answer back. Refusals — past the window, seen by the model, the wrong scope, a
replay, someone else's decision — are in the contract's shape and write nothing."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tests.conftest import Actor, Harness
from tests.integration.push_fakes import Endpoint
from tests.integration.test_push_action_tokens import act, ask, push, register, snapshot

__all__ = ["push"]  # the fixture, imported for this module's tests


async def _answer_from_notification(h: Harness, a: Actor) -> tuple[str, dict[str, Any], int]:
    """A question pushed to a phone and answered with its button: (component id, the
    answer's response, the phone's device id)."""
    async with Endpoint() as endpoint:
        phone = await register(a, endpoint, "phone")
        _, cid = await ask(h, a)
        [payload] = phone.payloads()
    resp = await act(h, {"action_token": payload["action_token"], "action": "opt:keep",
                         "text": None})
    assert resp.status_code == 200, resp.text
    return cid, resp.json(), phone.device_id


async def _status(a: Actor, cid: str) -> str:
    resp = await a.user.get(f"/v1/components/{cid}")
    assert resp.status_code == 200, resp.text
    return str(resp.json()["status"])


async def _refused(h: Harness, a: Actor, body: dict[str, Any], status: int, code: str,
                   client: Any = None) -> dict[str, Any]:
    before = await snapshot(h, a.user_id)
    resp = await (client.post("/v1/push/actions", json=body) if client is not None
                  else act(h, body))
    assert resp.status_code == status, resp.text
    error: dict[str, Any] = resp.json()
    assert error["code"] == code and error["message"] and "request_id" in error
    assert await snapshot(h, a.user_id) == before, f"a refused retract ({code}) wrote a row"
    return error


async def test_the_answer_carries_a_retract_token_that_takes_it_back_once(
        push: Harness) -> None:
    a = await push.actor("max")
    cid, answered, device_id = await _answer_from_notification(push, a)
    take_back = answered["take_back"]
    assert take_back["action"] == "retract" and take_back["action_token"].startswith("mcpa_")
    assert take_back["category"] == "MAXCLAW_TAKE_BACK"
    window = push.services.components.retractions.window
    until = datetime.fromisoformat(take_back["until"])
    settled_at = datetime.fromisoformat(answered["settled_at"])
    assert abs(until - settled_at - window) < timedelta(seconds=30)  # the window from now
    tokens = (await snapshot(push, a.user_id))["push_action_tokens"]
    [retract_row] = [t for t in tokens if t["scope"] == "retract"]
    assert retract_row["device_id"] == device_id and retract_row["used_at"] is None
    assert retract_row["decision_id"] == answered["id"]
    assert await _status(a, cid) == "answered"
    token = take_back["action_token"]

    # the retract token answers nothing, and an answer token retracts nothing
    error = await _refused(push, a, {"action_token": token, "action": "opt:drop"}, 401,
                           "unauthorized")
    assert error["data"]["reason"] == "action_token_scope"
    # a body naming another decision than the token's
    error = await _refused(push, a, {"action_token": token, "action": "retract",
                                     "decision_id": answered["id"] + 10_000}, 401,
                           "unauthorized")
    assert error["data"]["reason"] == "action_token_other_decision"

    resp = await act(push, {"action_token": token, "action": "retract"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "open" and resp.json()["id"] == answered["id"]
    assert "take_back" not in resp.json()
    assert await _status(a, cid) == "open"
    async with push.services.db.connection() as conn:
        used = await conn.fetchval("SELECT used_at FROM push_action_tokens WHERE id = $1",
                                   retract_row["id"])
    assert used is not None

    # a replay: spent, nothing written
    error = await _refused(push, a, {"action_token": token, "action": "retract"}, 409,
                           "settled")
    assert error["data"]["reason"] == "action_token_used"


async def test_past_the_window_or_seen_it_is_409_and_nothing_changes(push: Harness) -> None:
    a = await push.actor("max")
    cid, answered, _ = await _answer_from_notification(push, a)
    token = answered["take_back"]["action_token"]
    push.services.components.retractions.window = timedelta(0)
    error = await _refused(push, a, {"action_token": token, "action": "retract"}, 409,
                           "too_late")
    assert error["data"]["status"] == "answered"
    assert await _status(a, cid) == "answered"
    # the token was not spent by the refusal, but the model has now seen the answer
    push.services.components.retractions.window = timedelta(minutes=10)
    claim = await a.agent.post("/v1/agent/turns/claim", json={"wait_s": 0, "runtime_id": "rt"})
    assert claim.status_code == 200, claim.text
    await _refused(push, a, {"action_token": token, "action": "retract"}, 409, "seen")
    assert await _status(a, cid) == "answered"


async def test_someone_else_s_decision_is_404_and_a_closed_window_mints_no_token(
        push: Harness) -> None:
    a = await push.actor("max")
    eve = await push.actor("eve")
    cid, answered, _ = await _answer_from_notification(push, a)
    # eve, with her own bearer token, names max's decision: not hers, so not found
    await _refused(push, a, {"decision_id": answered["id"], "action": "retract"}, 404,
                   "not_found", client=eve.user)
    assert await _status(a, cid) == "answered"
    # max himself, with his bearer token, may take it back the same way
    resp = await a.user.post("/v1/push/actions", json={"decision_id": answered["id"],
                                                       "action": "retract"})
    assert resp.status_code == 200, resp.text
    assert await _status(a, cid) == "open"
    # the confirmation's token was revoked when the decision reopened
    error = await _refused(push, a, {"action_token": answered["take_back"]["action_token"],
                                     "action": "retract"}, 401, "unauthorized")
    assert error["data"]["reason"] == "action_token_stale"

    # with no window there is nothing to take back: the answer carries no token
    push.services.components.retractions.window = timedelta(0)
    _, again, _ = await _answer_from_notification(push, a)
    assert "take_back" not in again
