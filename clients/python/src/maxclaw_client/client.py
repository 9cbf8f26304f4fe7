"""``Client`` (sync) and ``AsyncClient``: ask, answers, questions, withdraw for one thread."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self

import httpx

from maxclaw_client import _core
from maxclaw_client._core import Asked


class Client:
    """A thread's agent end, synchronous. Settings from the arguments or MAXCLAW_URL,
    MAXCLAW_TOKEN (an agent token) and MAXCLAW_THREAD."""

    def __init__(self, url: str | None = None, token: str | None = None,
                 thread_id: str | None = None, *, timeout_s: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.settings = _core.settings(url, token, thread_id)
        self.thread_id = self.settings.thread_id
        self._http = httpx.Client(base_url=self.settings.url, timeout=timeout_s,
                                  transport=transport,
                                  headers={"Authorization": f"Bearer {self.settings.token}"})

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            resp = self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise _core.wrap_transport(exc, self.settings.url) from exc
        return _core.checked(resp)

    def ask(self, question: str | None = None, options: list[str] | None = None, *,
            title: str | None = None, questions: list[dict[str, Any]] | None = None,
            allow_other: bool = True, call_id: str | None = None, **extra: Any) -> Asked:
        """Post a card and return at once; the answer arrives through ``answers()``. A
        repeated ``call_id`` returns the same card instead of a second one."""
        arguments = _core.card(question, options, title=title, questions=questions,
                               allow_other=allow_other, extra=extra)
        return _core.asked(self._call("POST", _core.messages_path(self.thread_id),
                                      _core.call_row(_core.ASK, arguments, call_id)))

    def answers(self) -> list[dict[str, Any]]:
        """What arrived since the last delivery (each message once); [] when nothing did."""
        messages: list[dict[str, Any]] = self._call(
            "POST", _core.inbox_path(self.thread_id))["messages"]
        return messages

    def questions(self) -> list[dict[str, Any]]:
        """The thread's cards and their states (secret answers never shown)."""
        components: list[dict[str, Any]] = self._call(
            "GET", _core.components_path(self.thread_id))["components"]
        return components

    def withdraw(self, component_id: str | None = None, *, tool_call_id: str | None = None,
                 reason: str = "no longer needed") -> dict[str, Any]:
        """Withdraw an unanswered card (``withdraw_question``); a settled one raises
        ``ConflictError``."""
        arguments = {"component_id": component_id, "tool_call_id": tool_call_id,
                     "reason": reason}
        return _core.executed(self._call(
            "POST", _core.messages_path(self.thread_id),
            _core.call_row(_core.WITHDRAW, {k: v for k, v in arguments.items()
                                            if v is not None}, None)))[1]

    def tools(self) -> list[dict[str, Any]]:
        """The thread's service tools in the Chat Completions shape (``GET /v1/agent/tools``)."""
        offered: list[dict[str, Any]] = self._call(
            "GET", f"/v1/agent/tools?thread_id={self.thread_id}")["tools"]
        return offered


class AsyncClient:
    """``Client``'s methods as coroutines."""

    def __init__(self, url: str | None = None, token: str | None = None,
                 thread_id: str | None = None, *, timeout_s: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.settings = _core.settings(url, token, thread_id)
        self.thread_id = self.settings.thread_id
        self._http = httpx.AsyncClient(base_url=self.settings.url, timeout=timeout_s,
                                       transport=transport,
                                       headers={"Authorization": f"Bearer {self.settings.token}"})

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            resp = await self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise _core.wrap_transport(exc, self.settings.url) from exc
        return _core.checked(resp)

    async def ask(self, question: str | None = None, options: list[str] | None = None, *,
                  title: str | None = None, questions: list[dict[str, Any]] | None = None,
                  allow_other: bool = True, call_id: str | None = None,
                  **extra: Any) -> Asked:
        arguments = _core.card(question, options, title=title, questions=questions,
                               allow_other=allow_other, extra=extra)
        return _core.asked(await self._call("POST", _core.messages_path(self.thread_id),
                                            _core.call_row(_core.ASK, arguments, call_id)))

    async def answers(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = (await self._call(
            "POST", _core.inbox_path(self.thread_id)))["messages"]
        return messages

    async def questions(self) -> list[dict[str, Any]]:
        components: list[dict[str, Any]] = (await self._call(
            "GET", _core.components_path(self.thread_id)))["components"]
        return components

    async def withdraw(self, component_id: str | None = None, *,
                       tool_call_id: str | None = None,
                       reason: str = "no longer needed") -> dict[str, Any]:
        arguments = {"component_id": component_id, "tool_call_id": tool_call_id,
                     "reason": reason}
        return _core.executed(await self._call(
            "POST", _core.messages_path(self.thread_id),
            _core.call_row(_core.WITHDRAW, {k: v for k, v in arguments.items()
                                            if v is not None}, None)))[1]

    async def tools(self) -> list[dict[str, Any]]:
        offered: list[dict[str, Any]] = (await self._call(
            "GET", f"/v1/agent/tools?thread_id={self.thread_id}"))["tools"]
        return offered
