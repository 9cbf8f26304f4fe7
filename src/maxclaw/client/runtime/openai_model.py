"""The model adapter, on the official ``openai`` SDK (Chat Completions, streaming or not).

``base_url`` points it at any OpenAI-compatible server (a gateway, vLLM, Ollama, …). The SDK
brings the typed messages and tools, the timeouts, and the retries: 408, 409, 429 and 5xx
answers and broken connections are retried with exponential backoff, honouring
``Retry-After`` (a gateway with a per-token rate limit answers 429 as soon as two or three runs
overlap, and a retry a few seconds later is all it takes). What the SDK does not retry is a
stream that ends before the reply did (no ``finish_reason``): that is retried here, with the
same backoff. With ``stream=True`` the tool calls, which arrive in fragments keyed by
``index``, are put back together.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from typing import Any, cast

import httpx2
from openai import APIConnectionError, APIError, APIStatusError, AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from maxclaw.client.runtime.model import Reply

log = logging.getLogger("maxclaw.agent.openai")
NO_KEY = "no-key"  # OpenAI-compatible servers that take no key still get a bearer header


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
    backoff_s: float = 1.0  # the first wait before a cut stream is requested again
    timeout_s: float = 120.0


class ModelError(Exception):
    """The model endpoint refused the request for good (or kept failing past the retries)."""


class _BrokenStreamError(Exception):
    pass


class OpenAIChatModel:
    """``client.chat.completions.create`` on an ``AsyncOpenAI`` client."""

    def __init__(self, settings: OpenAISettings | None = None) -> None:
        self.settings = settings or OpenAISettings()
        self.attempts = 0  # HTTP requests sent, retries included (tests and logs read it)

        async def count(_request: httpx2.Request) -> None:
            self.attempts += 1

        self._http = httpx2.AsyncClient(timeout=self.settings.timeout_s,
                                        event_hooks={"request": [count]})
        self.client = AsyncOpenAI(base_url=self.settings.base_url.rstrip("/"),
                                  api_key=self.settings.api_key or NO_KEY,
                                  max_retries=self.settings.max_retries,
                                  timeout=self.settings.timeout_s, http_client=self._http)

    async def aclose(self) -> None:
        await self.client.close()

    async def complete(self, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]]) -> Reply:
        typed_messages = cast(list[ChatCompletionMessageParam], messages)
        typed_tools = cast(list[ChatCompletionToolParam], tools)
        last = ""
        for attempt in range(self.settings.max_retries + 1):
            try:
                if self.settings.stream:
                    return await self._streamed(typed_messages, typed_tools)
                return await self._plain(typed_messages, typed_tools)
            except APIStatusError as exc:  # the SDK retried what is worth retrying
                raise ModelError(f"the model endpoint answered HTTP {exc.status_code}: "
                                 f"{str(exc.body or exc.message)[:300]}; giving up after "
                                 f"{self.attempts} attempts") from None
            except APIConnectionError as exc:
                raise ModelError(f"the model endpoint cannot be reached ({exc}); giving up "
                                 f"after {self.attempts} attempts") from None
            except (_BrokenStreamError, APIError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if attempt < self.settings.max_retries:
                log.warning("model stream broke off; retrying",
                            extra={"attempts": attempt + 1, "error": last[:200]})
                await asyncio.sleep(self._backoff(attempt))
        raise ModelError(f"the model endpoint kept failing ({last}); giving up after "
                         f"{self.attempts} attempts")

    def _backoff(self, attempt: int) -> float:
        return float(min(30.0, self.settings.backoff_s * 2**attempt * (0.5 + random.random())))

    def _tools(self, tools: list[ChatCompletionToolParam]) -> dict[str, Any]:
        return {"tools": tools} if tools else {}

    async def _plain(self, messages: list[ChatCompletionMessageParam],
                     tools: list[ChatCompletionToolParam]) -> Reply:
        completion = await self.client.chat.completions.create(
            model=self.settings.model, messages=messages, stream=False, **self._tools(tools))
        if not completion.choices:
            raise _BrokenStreamError("the response has no choices[0].message")
        message = completion.choices[0].message
        calls = []
        for call in message.tool_calls or []:
            function = getattr(call, "function", None)  # custom tools have none
            calls.append(_call(call.id, getattr(function, "name", ""),
                               getattr(function, "arguments", "")))
        return Reply(content=message.content, tool_calls=calls)

    async def _streamed(self, messages: list[ChatCompletionMessageParam],
                        tools: list[ChatCompletionToolParam]) -> Reply:
        stream = await self.client.chat.completions.create(
            model=self.settings.model, messages=messages, stream=True, **self._tools(tools))
        collector = _Collector()
        async with stream:
            async for chunk in stream:
                collector.feed(chunk.model_dump(exclude_none=True))
        if not collector.finished:
            raise _BrokenStreamError("the stream ended before the reply did")
        return collector.reply()


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

    def feed(self, chunk: dict[str, Any]) -> None:
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

    def reply(self) -> Reply:
        return Reply(content="".join(self.text) or None,
                     tool_calls=[_call(c["id"], c["name"], c["arguments"])
                                 for _, c in sorted(self.calls.items())])
