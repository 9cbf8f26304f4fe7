"""``maxclaw.client``: a small async client for agent runtimes and user clients.

    async with AgentClient("http://127.0.0.1:8765", token) as agent:
        claim = await agent.claim(wait_s=25, runtime_id="laptop-1")
        if claim is not None:
            ...
            await agent.finish(claim.turn.id)

Responses are parsed into the pydantic models of ``maxclaw.wire.models`` (the routes are
documented with the same models). A ``503 unavailable`` (the database is away) and a dropped
connection *before the request was sent* are retried with exponential backoff; every other
error raises ``ApiError`` carrying the body's ``code``, ``message`` and ``data``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx

from maxclaw.wire.models import (
    ChatMessage,
    Claim,
    Component,
    Decision,
    Delivery,
    Executed,
    Finished,
    History,
    Lease,
    Message,
    Posted,
    RuntimeLease,
    Thread,
    ToolSpec,
)


class ApiError(Exception):
    """An error answer of the MaxClaw API (``{"code", "message", "data"}``)."""

    def __init__(self, status: int, code: str, message: str, data: dict[str, Any],
                 body: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.data = data
        self.body = body or {}


def _error(resp: httpx.Response) -> ApiError:
    try:
        body = resp.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    return ApiError(resp.status_code, str(body.get("code", "http_error")),
                    str(body.get("message", resp.reason_phrase)), dict(body.get("data") or {}),
                    body)


class _Base:
    def __init__(self, base_url: str, token: str, *, transport: httpx.AsyncBaseTransport | None
                 = None, retries: int = 5, backoff_s: float = 0.2, timeout_s: float = 30.0,
                 ) -> None:
        self.http = httpx.AsyncClient(base_url=base_url.rstrip("/"), transport=transport,
                                      headers={"Authorization": f"Bearer {token}"},
                                      timeout=timeout_s)
        self.retries = retries
        self.backoff_s = backoff_s

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _request(self, method: str, path: str, *, json: Any = None,
                       params: dict[str, Any] | None = None, read_timeout_s: float | None = None,
                       ok: tuple[int, ...] = (200, 201)) -> httpx.Response:
        """One call, retried on 503 and on connections that failed before sending."""
        for attempt in range(self.retries + 1):
            try:
                resp = await self.http.request(method, path, json=json, params=params,
                                               timeout=read_timeout_s or httpx.USE_CLIENT_DEFAULT)
            except (httpx.ConnectError, httpx.ConnectTimeout):
                if attempt == self.retries:
                    raise
            else:
                if resp.status_code in ok:
                    return resp
                if resp.status_code != 503 or attempt == self.retries:
                    raise _error(resp)
            await asyncio.sleep(self.backoff_s * 2**attempt * (0.5 + random.random()))
        raise AssertionError("unreachable")


class AgentClient(_Base):
    """The agent side: turns, the inbox, rows and service tools."""

    async def claim(self, wait_s: float = 0, runtime_id: str | None = None,
                    thread_ids: list[str] | None = None) -> Claim | None:
        """A queued turn with its history (of ``thread_ids`` only, when given), or None after
        ``wait_s`` seconds."""
        body: dict[str, Any] = {"wait_s": wait_s, "runtime_id": runtime_id}
        if thread_ids is not None:
            body["thread_ids"] = thread_ids
        resp = await self._request("POST", "/v1/agent/turns/claim", json=body,
                                   read_timeout_s=wait_s + 30, ok=(200, 204))
        return None if resp.status_code == 204 else Claim.model_validate(resp.json())

    async def claim_unless_stopped(self, stop: asyncio.Event, wait_s: float,
                                   runtime_id: str | None = None,
                                   thread_ids: list[str] | None = None) -> Claim | None:
        """``claim``, given up at once when ``stop`` is set (None then). A claim the server
        commits just as we leave is not lost: its lease lapses and the turn is queued again."""
        claiming = asyncio.create_task(self.claim(wait_s, runtime_id, thread_ids))
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({claiming, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not claiming.done():
            claiming.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await claiming
            return None
        return claiming.result()

    async def heartbeat(self, turn_id: int) -> Lease:
        resp = await self._request("POST", f"/v1/agent/turns/{turn_id}/heartbeat")
        return Lease.model_validate(resp.json())

    async def take_lease(self, runtime: str) -> RuntimeLease:
        """A runtime lease: the background jobs reported under it end as lost if it lapses."""
        resp = await self._request("POST", "/v1/agent/leases", json={"runtime": runtime})
        return RuntimeLease.model_validate(resp.json())

    async def heartbeat_lease(self, lease_id: str) -> RuntimeLease:
        """Move the lease on (``409`` once it lapsed, ``404`` when unknown)."""
        resp = await self._request("POST", f"/v1/agent/leases/{quote(lease_id, safe='')}"
                                   "/heartbeat")
        return RuntimeLease.model_validate(resp.json())

    async def inbox(self, turn_id: int) -> list[ChatMessage]:
        """The step boundary: what arrived since the last delivery."""
        resp = await self._request("POST", f"/v1/agent/turns/{turn_id}/inbox")
        return Delivery.model_validate(resp.json()).messages

    async def finish(self, turn_id: int) -> Finished:
        resp = await self._request("POST", f"/v1/agent/turns/{turn_id}/finish")
        return Finished.model_validate(resp.json())

    async def history(self, thread_id: str) -> list[ChatMessage]:
        """The newest model window of what the thread's model has been handed."""
        return (await self.history_page(thread_id)).messages

    async def history_page(self, thread_id: str, before_id: int | None = None) -> History:
        """One model window; its ``next_before_id`` reads the one before (None: the oldest)."""
        params = {"before_id": before_id} if before_id is not None else None
        resp = await self._request("GET", f"/v1/agent/threads/{thread_id}/history",
                                   params=params)
        return History.model_validate(resp.json())

    async def tools(self, thread_id: str | None = None) -> list[ToolSpec]:
        params = {"thread_id": thread_id} if thread_id else None
        resp = await self._request("GET", "/v1/agent/tools", params=params)
        return [ToolSpec.model_validate(t) for t in resp.json()["tools"]]

    async def post_assistant(self, thread_id: str, content: str | None,
                             tool_calls: list[dict[str, Any]] | None,
                             turn_id: int | None, *, execute: bool = False) -> Posted:
        """Write the model's reply (tool calls in the Chat Completions shape). With
        ``execute``, the service runs its own tools among the calls in the same request and
        ``Posted.results`` carries their results (the round trip is this request alone)."""
        row: dict[str, Any] = {"role": "assistant", "content": content,
                               "tool_calls": tool_calls or [], "turn_id": turn_id}
        if execute:
            row["execute"] = True
        return await self._post_row(thread_id, row)

    async def post_tool_result(self, thread_id: str, tool_call_id: str, content: Any,
                               turn_id: int | None) -> Posted:
        """Write a local tool's result."""
        return await self._post_row(thread_id, {"role": "tool", "tool_call_id": tool_call_id,
                                                "content": content, "turn_id": turn_id})

    async def post_event(self, thread_id: str, body: str,
                         source_meta: dict[str, Any] | None = None) -> Posted:
        """An event (e.g. a background job finished): it enters the inbox and wakes the thread."""
        return await self._post_row(thread_id, {"role": "event", "body": body,
                                                "source_meta": source_meta})

    async def _post_row(self, thread_id: str, body: dict[str, Any]) -> Posted:
        resp = await self._request("POST", f"/v1/agent/threads/{thread_id}/messages", json=body)
        return Posted.model_validate(resp.json())

    async def execute(self, thread_id: str, tool_call_id: str) -> tuple[int, Executed]:
        """Run a service tool; a refusal is not an exception (its content is for the model)."""
        path = f"/v1/agent/threads/{thread_id}/tool-calls/{quote(tool_call_id, safe='')}/execute"
        try:
            resp = await self._request("POST", path)
        except ApiError as exc:
            if "content" not in exc.body:
                raise  # not a refusal the model should read (no such call, wrong token, …)
            return exc.status, Executed(tool_call_id=tool_call_id, content=exc.body["content"])
        return resp.status_code, Executed.model_validate(resp.json())


class UserClient(_Base):
    """The user side: threads, messages, cards and decisions."""

    async def me(self) -> dict[str, Any]:
        resp = await self._request("GET", "/v1/me")
        result: dict[str, Any] = resp.json()
        return result

    async def threads(self) -> list[Thread]:
        resp = await self._request("GET", "/v1/threads")
        return [Thread.model_validate(t) for t in resp.json()["threads"]]

    async def create_thread(self, title: str, kind: str = "normal",
                            category: str | None = None) -> Thread:
        resp = await self._request("POST", "/v1/threads",
                                   json={"title": title, "kind": kind, "category": category})
        return Thread.model_validate(resp.json())

    async def thread(self, thread_id: str) -> Thread:
        return Thread.model_validate((await self._request("GET", f"/v1/threads/{thread_id}"))
                                     .json())

    async def messages(self, thread_id: str, after_id: int = 0, limit: int = 100) -> list[Message]:
        resp = await self._request("GET", f"/v1/threads/{thread_id}/messages",
                                   params={"after_id": after_id, "limit": limit})
        return [Message.model_validate(m) for m in resp.json()["messages"]]

    async def post_message(self, thread_id: str, body: str) -> Message:
        resp = await self._request("POST", f"/v1/threads/{thread_id}/messages",
                                   json={"body": body})
        return Message.model_validate(resp.json())

    async def component(self, component_id: str) -> Component:
        resp = await self._request("GET", f"/v1/components/{quote(component_id, safe=':')}")
        return Component.model_validate(resp.json())

    async def answer(self, component_id: str, selected: list[str] | None = None,
                     text: str | None = None) -> Component:
        """Answer a card (via ``card``)."""
        resp = await self._request("POST",
                                   f"/v1/components/{quote(component_id, safe=':')}/answer",
                                   json={"selected": selected or [], "text": text})
        return Component.model_validate(resp.json())

    async def decisions(self, status: str = "open") -> list[Decision]:
        resp = await self._request("GET", "/v1/decisions", params={"status": status})
        return [Decision.model_validate(d) for d in resp.json()["decisions"]]

    async def settle(self, decision_id: int, selected: list[str] | None = None,
                     text: str | None = None) -> Decision:
        """Answer a card from the decisions panel (via ``decision``)."""
        resp = await self._request("POST", f"/v1/decisions/{decision_id}/settle",
                                   json={"selected": selected or [], "text": text})
        return Decision.model_validate(resp.json())
