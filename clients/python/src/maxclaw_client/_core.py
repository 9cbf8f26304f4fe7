"""What the sync and async clients share: the requests they build and how answers are read."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from maxclaw_client.errors import MaxClawError, TransportError, error_for

ASK = "ask_user_question"
WITHDRAW = "withdraw_question"
DEFAULT_URL = "http://127.0.0.1:8765"


@dataclass(frozen=True)
class Asked:
    """What ``ask`` returns at once: the card is posted, the answer arrives later."""

    call_id: str
    components: list[dict[str, Any]]  # [{"id", "kind", "answer_due_at"}]
    note: str = ""
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def component_ids(self) -> list[str]:
        return [str(c["id"]) for c in self.components]


@dataclass(frozen=True)
class Settings:
    url: str
    token: str
    thread_id: str


def settings(url: str | None, token: str | None, thread_id: str | None) -> Settings:
    """Arguments, else MAXCLAW_URL / MAXCLAW_TOKEN / MAXCLAW_THREAD."""
    token = token or os.environ.get("MAXCLAW_TOKEN")
    thread_id = thread_id or os.environ.get("MAXCLAW_THREAD")
    if not token:
        raise MaxClawError("no agent token: pass token= or set MAXCLAW_TOKEN "
                           "(maxclaw token create --role agent)")
    if not thread_id:
        raise MaxClawError("no thread: pass thread_id= or set MAXCLAW_THREAD")
    return Settings((url or os.environ.get("MAXCLAW_URL") or DEFAULT_URL).rstrip("/"), token,
                    thread_id)


def card(question: str | None, options: list[str] | None, *, title: str | None,
         questions: list[dict[str, Any]] | None, allow_other: bool,
         extra: dict[str, Any]) -> dict[str, Any]:
    """``ask_user_question``'s arguments: one question (a choice when ``options`` are given,
    else a text question) or the full ``questions`` list of docs/api.md."""
    if questions is None:
        if not question:
            raise ValueError("ask needs a question (or questions=[…])")
        if options:
            opts = [{"id": f"o{i + 1}", "label": label} for i, label in enumerate(options)]
            questions = [{"id": "q1", "kind": "choice", "question": question, "options": opts,
                          "allow_other": allow_other}]
        else:
            questions = [{"id": "q1", "kind": "text", "question": question}]
    return {"title": title or (question or "A question")[:200], "questions": questions,
            **extra}


def call_row(name: str, arguments: dict[str, Any], call_id: str | None) -> dict[str, Any]:
    """An assistant row carrying one service tool call, executed in the same request."""
    call_id = call_id or f"mc_{uuid.uuid4().hex[:24]}"
    return {"role": "assistant", "content": None, "turn_id": None, "execute": True,
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def messages_path(thread_id: str) -> str:
    return f"/v1/agent/threads/{quote(thread_id, safe='')}/messages"


def inbox_path(thread_id: str) -> str:
    return f"/v1/agent/threads/{quote(thread_id, safe='')}/inbox"


def components_path(thread_id: str) -> str:
    return f"/v1/agent/threads/{quote(thread_id, safe='')}/components"


def checked(resp: httpx.Response) -> Any:
    """The JSON of a success, or the typed error."""
    if resp.status_code < 400:
        return resp.json() if resp.content else None
    try:
        body = resp.json()
    except ValueError:
        body = {}
    raise error_for(resp.status_code, body, resp.reason_phrase, resp.headers.get("retry-after"))


def executed(answer: Any) -> tuple[str, dict[str, Any]]:
    """The one result of an executed row: a refusal (its status >= 400) raises the typed
    error, with the content the model would have read in ``body``."""
    [result] = answer["results"]
    content = result.get("content")
    content = content if isinstance(content, dict) else {"value": content}
    status = int(result.get("status") or 200)
    if status >= 400:
        error = result.get("error") if isinstance(result.get("error"), dict) else {}
        message = str(error.get("message") or content.get("error") or "refused")
        raise error_for(status, {"code": error.get("code", "refused"), "message": message,
                                 "data": error.get("data") or {}, "content": content}, message)
    return str(result["tool_call_id"]), content


def asked(answer: Any) -> Asked:
    call_id, content = executed(answer)
    return Asked(call_id, list(content.get("components") or []), str(content.get("note", "")),
                 content)


def wrap_transport(exc: httpx.HTTPError, url: str) -> TransportError:
    return TransportError(f"MaxClaw at {url} cannot be reached ({type(exc).__name__}: {exc})")
