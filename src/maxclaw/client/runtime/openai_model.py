"""An OpenAI-compatible Chat Completions adapter over HTTP (streaming or not).

Retries 429 and 5xx answers, and connections that broke, with exponential backoff (honouring
``Retry-After`` when the server sends one): a gateway with a per-token rate limit answers 429
as soon as two or three runs overlap, and a retry a few seconds later is all it takes.
With ``stream=True`` the reply is read as server-sent events and the tool calls, which arrive
in fragments keyed by ``index``, are put back together.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from typing import Any

import httpx
from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from maxclaw.client.runtime.model import Reply

log = logging.getLogger("maxclaw.agent.openai")
RETRY_STATUSES = frozenset({408, 429})  # and every 5xx


class OpenAISettings(BaseSettings):
    """Where the model lives: ``MAXCLAW_OPENAI_BASE_URL``, ``MAXCLAW_OPENAI_API_KEY`` (or
    ``OPENAI_API_KEY``), ``MAXCLAW_OPENAI_MODEL``, ``MAXCLAW_OPENAI_STREAM``."""

    model_config = SettingsConfigDict(env_prefix="MAXCLAW_OPENAI_", extra="ignore",
                                      populate_by_name=True)

    base_url: str = Field(default="https://api.openai.com/v1",
                          validation_alias=AliasChoices("MAXCLAW_OPENAI_BASE_URL",
                                                        "OPENAI_BASE_URL"))
    api_key: str | None = Field(default=None,
                                validation_alias=AliasChoices("MAXCLAW_OPENAI_API_KEY",
                                                              "OPENAI_API_KEY"))
    model: str = "gpt-4o-mini"
    stream: bool = True
    max_retries: int = 6
    backoff_s: float = 1.0
    timeout_s: float = 120.0


class ModelError(Exception):
    """The model endpoint refused the request for good (or kept failing past the retries)."""


class OpenAIChatModel:
    """``POST {base_url}/chat/completions``."""

    def __init__(self, settings: OpenAISettings | None = None, *,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.settings = settings or OpenAISettings()
        headers = {"Content-Type": "application/json"}
        if self.settings.api_key:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        self.http = httpx.AsyncClient(base_url=self.settings.base_url.rstrip("/"),
                                      headers=headers, timeout=self.settings.timeout_s,
                                      transport=transport)
        self.attempts = 0  # HTTP requests sent, retries included (tests and logs read it)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def complete(self, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]]) -> Reply:
        body: dict[str, Any] = {"model": self.settings.model, "messages": messages,
                                "stream": self.settings.stream}
        if tools:
            body["tools"] = tools
        last: str = ""
        for attempt in range(self.settings.max_retries + 1):
            self.attempts += 1
            try:
                if self.settings.stream:
                    return await self._streamed(body)
                return await self._plain(body)
            except _RetryableError as retry:
                last = str(retry)
                delay = retry.after if retry.after is not None else self._backoff(attempt)
            except (httpx.TransportError, _BrokenStreamError) as exc:
                last = f"{type(exc).__name__}: {exc}"
                delay = self._backoff(attempt)
            if attempt < self.settings.max_retries:
                log.warning("model request failed; retrying",
                            extra={"attempts": attempt + 1, "error": last[:200]})
                await asyncio.sleep(delay)
        raise ModelError(f"the model endpoint kept failing ({last}); giving up after "
                         f"{self.settings.max_retries + 1} attempts")

    def _backoff(self, attempt: int) -> float:
        return float(min(30.0, self.settings.backoff_s * 2**attempt * (0.5 + random.random())))

    async def _plain(self, body: dict[str, Any]) -> Reply:
        resp = await self.http.post("/chat/completions", json=body)
        _check(resp)
        try:
            message = resp.json()["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise _BrokenStreamError("the response has no choices[0].message") from None
        return Reply(content=message.get("content"), tool_calls=[
            _call(c.get("id"), (c.get("function") or {}).get("name"),
                  (c.get("function") or {}).get("arguments"))
            for c in message.get("tool_calls") or []])

    async def _streamed(self, body: dict[str, Any]) -> Reply:
        async with self.http.stream("POST", "/chat/completions", json=body) as resp:
            if resp.status_code != 200:
                await resp.aread()
                _check(resp)
            collector = _Collector()
            async for line in resp.aiter_lines():
                if collector.feed(line):
                    return collector.reply()
        if collector.finished:  # some servers close after the finish_reason, without [DONE]
            return collector.reply()
        raise _BrokenStreamError("the stream ended before the reply did")


class _RetryableError(Exception):
    def __init__(self, message: str, after: float | None) -> None:
        super().__init__(message)
        self.after = after


class _BrokenStreamError(Exception):
    pass


def _check(resp: httpx.Response) -> None:
    if resp.status_code == 200:
        return
    text = resp.text[:300]
    if resp.status_code in RETRY_STATUSES or resp.status_code >= 500:
        raise _RetryableError(f"HTTP {resp.status_code}: {text}", _retry_after(resp))
    raise ModelError(f"the model endpoint answered HTTP {resp.status_code}: {text}")


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    try:
        return min(60.0, max(0.0, float(value))) if value is not None else None
    except ValueError:
        return None


def _call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {})
    return {"id": str(call_id or ""), "type": "function",
            "function": {"name": str(name or ""), "arguments": arguments or "{}"}}


class _Collector:
    """Reassembles a streamed reply: text deltas, and tool calls in fragments by index."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finished = False

    def feed(self, line: str) -> bool:
        """Take one SSE line; True at ``data: [DONE]``."""
        if not line.startswith("data:"):
            return False  # comments, event names, keep-alives, blank separators
        data = line[5:].strip()
        if data == "[DONE]":
            return True
        try:
            chunk = json.loads(data)
        except ValueError:
            raise _BrokenStreamError(f"unreadable stream chunk: {data[:100]}") from None
        if isinstance(chunk, dict) and "error" in chunk:
            raise _RetryableError(f"stream error: {str(chunk['error'])[:200]}", None)
        for choice in chunk.get("choices") or []:
            self.finished = self.finished or bool(choice.get("finish_reason"))
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.text.append(delta["content"])
            for frag in delta.get("tool_calls") or []:
                call = self.calls.setdefault(int(frag.get("index", 0)),
                                             {"id": None, "name": "", "arguments": ""})
                call["id"] = frag.get("id") or call["id"]
                fn = frag.get("function") or {}
                call["name"] += fn.get("name") or ""
                call["arguments"] += fn.get("arguments") or ""
        return False

    def reply(self) -> Reply:
        return Reply(content="".join(self.text) or None,
                     tool_calls=[_call(c["id"], c["name"], c["arguments"])
                                 for _, c in sorted(self.calls.items())])
