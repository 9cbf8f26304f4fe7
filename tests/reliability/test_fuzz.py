"""Fuzzing the API with schemathesis against the served OpenAPI document of a real server,
authenticated as a user and, separately, as an agent: no 5xx, and every error is api.md's body
``{"code", "message", "data"}`` with the code its status allows.

Every operation is fuzzed with schema-valid and schema-violating inputs, once with random path
ids and once bound to real objects of the caller (a thread, a card, its decision, a device), so
the bodies reach validation and the state machine instead of stopping at 404."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.cards import CHOICE, SECRET, TEXT
from tests.conftest import ServerProcess, start_server
from tests.reliability.figures import record, scale
from tests.reliability.support import Party, client, error_shape_problem, provision

API_MD = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def documented_codes(text: str) -> dict[int, set[str]]:
    """The error codes each status may carry, read from api.md's status table (its rows
    ``| 409 | `settled` (…), …; Additions: `withdrawn`, … |``): the contract is the one list,
    so a code the contract adds is allowed here the day it is written there."""
    codes: dict[int, set[str]] = {}
    for line in text.splitlines():
        match = re.fullmatch(r"\|\s*(\d{3})\s*\|(.*)\|\s*", line)
        if match:
            codes[int(match[1])] = set(re.findall(r"`([a-z_]+)`", match[2]))
    return codes


CODES = documented_codes(API_MD.read_text(encoding="utf-8"))


def test_the_status_table_is_read_from_the_contract() -> None:
    """The parse finds every status api.md's table lists, the Additions included (an empty or
    missing set would make every error of that status a problem, or none at all)."""
    assert set(CODES) == {400, 401, 403, 404, 409, 413, 422, 429, 503}
    assert CODES[409] >= {"settled", "locked", "not_transferable", "irreversible", "conflict",
                          "withdrawn", "expired", "seen", "too_late", "turn_stopped"}
    assert CODES[422] == {"invalid"} and CODES[429] == {"rate_limited"}


def problem_of(status: int, resp: Any) -> str | None:
    """What is wrong with a response by api.md's rules (None: nothing)."""
    if status >= 500:
        return f"{status}: {resp.text[:300]}"
    if status < 400:
        return None
    shape = error_shape_problem(resp)
    if shape:
        return shape
    body = resp.json()
    if body["code"] not in CODES.get(status, set()):
        return f"{status} with code {body['code']!r}"
    if status == 422 and not (isinstance(body["data"].get("errors"), list) and all(
            isinstance(e, dict) and isinstance(e.get("loc"), list) and isinstance(e.get("msg"), str)
            for e in body["data"]["errors"])):
        return f"422 without data.errors as [{{loc, msg}}]: {body!r:.300}"
    return None


async def _objects(server: ServerProcess, party: Party) -> dict[str, str]:
    """Real ids of the caller's objects, for binding path parameters."""
    async with client(server.base_url, party.user_token) as user, \
            client(server.base_url, party.agent_token) as agent:
        thread = (await user.post("/v1/threads", json={"title": "fuzz"})).json()["id"]
        call = {"id": "fuzzcall", "type": "function", "function": {
            "name": "ask_user_question",
            "arguments": {"title": "Fuzz", "questions": [CHOICE, TEXT, SECRET]}}}
        resp = await agent.post(f"/v1/agent/threads/{thread}/messages",
                                json={"role": "assistant", "content": None, "tool_calls": [call]})
        assert resp.status_code == 201, resp.text
        resp = await agent.post(f"/v1/agent/threads/{thread}/tool-calls/fuzzcall/execute")
        assert resp.status_code == 200, resp.text
        component = "fuzzcall:q1"
        decision = (await user.get(f"/v1/components/{component}")).json()["decision_id"]
        device = (await user.post("/v1/push/devices", json={"platform": "log"})).json()["id"]
        await user.post(f"/v1/threads/{thread}/messages", json={"body": "wake up"})
        turn = await agent.post("/v1/agent/turns/claim", json={"wait_s": 0})
    ids = {"thread_id": thread, "component_id": component, "decision_id": str(decision),
           "device_id": str(device), "tool_call_id": "fuzzcall"}
    if turn.status_code == 200:
        ids["turn_id"] = str(turn.json()["turn"]["id"])
    return ids


def _fuzz(schema: Any, base_url: str, token: str, ids: dict[str, str],
          examples: int) -> tuple[Counter[str], list[str]]:
    statuses: Counter[str] = Counter()
    problems: list[str] = []
    headers = {"Authorization": f"Bearer {token}"}
    for result in schema.get_all_operations():
        operation = result.ok()
        names = {p.name for p in operation.iter_parameters() if p.location == "path"}
        bindings: list[dict[str, str] | None] = [None]
        if names and names <= ids.keys():
            bindings.append({n: ids[n] for n in names})
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            for binding in bindings:
                strategy = operation.as_strategy(generation_mode=mode, path_parameters=binding)

                @settings(max_examples=examples, deadline=None, database=None,
                          suppress_health_check=list(HealthCheck))
                @given(case=strategy)
                def run(case: Any) -> None:
                    resp = case.call(base_url=base_url, headers=headers, timeout=30)
                    statuses[f"{case.method} {case.path} {resp.status_code}"] += 1
                    problem = problem_of(resp.status_code, resp)
                    if problem:
                        problems.append(f"{case.method} {case.formatted_path}: {problem}\n"
                                        f"    {case.as_curl_command()[:600]}")

                # an operation without inputs has no negative case: nothing to break
                with contextlib.suppress(Unsatisfiable):
                    run()
    return statuses, problems


@pytest.mark.slow
@pytest.mark.timeout(600 * scale())
@pytest.mark.parametrize("role", ["user", "agent"])
def test_fuzzing_the_served_openapi_document(database_url: str, tmp_path: Path,
                                             role: str) -> None:
    (party,) = asyncio.run(provision(database_url, "max"))
    server = start_server(database_url, tmp_path / "serve.log")
    try:
        ids = asyncio.run(_objects(server, party))
        schema = schemathesis.openapi.from_url(f"{server.base_url}/openapi.json")
        token = party.user_token if role == "user" else party.agent_token
        statuses, problems = _fuzz(schema, server.base_url, token, ids, 6 * scale())
        alive = httpx.get(f"{server.base_url}/healthz", timeout=5).status_code
    finally:
        server.stop()
    cases = sum(statuses.values())
    record("fuzz", **{f"cases_{role}_token": cases, f"problems_{role}_token": len(problems),
                      f"operations_{role}_token": len({k.rsplit(' ', 1)[0] for k in statuses})})
    print(f"fuzz ({role}): {cases} cases; statuses {dict(sorted(statuses.items()))}")
    assert alive == 200
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:30])
