"""The API's shapes as pydantic models: every route declares its body's model (its
``response_model``; for the model-facing bodies and ``execute``, in ``responses``), so
``/openapi.json`` describes every body, and ``maxclaw.client`` parses with them, so both
sides agree on one definition.

Response bodies declare the fields of ``docs/api.md`` and keep every other one
(``extra="allow"``): the API may add fields, and a route never drops one. The routes serialise
with ``response_model_exclude_unset`` (``api/responses.py``), so a model's defaults never add
a key the service did not send: the body is the service's, checked and described.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCall(BaseModel):
    name: str
    arguments: str  # a JSON string, as Chat Completions sends it


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """One message in the OpenAI Chat Completions shape."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def wire(self) -> dict[str, Any]:
        """The dict a Chat Completions request carries (keys that do not apply left out)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.model_dump() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


class Thread(_Open):
    """``api.md``: Thread (plus the derived ``state`` and ``open_cards``)."""

    id: str
    kind: str
    category: str | None = None
    title: str = ""
    turn_state: str = "idle"
    created_at: datetime | None = None
    rev: int = 0
    # derived from runtime state: "running" | "waiting for you" | "working in the background"
    # | "idle"; unsettled questions; background jobs running
    state: str = "idle"
    open_cards: int = 0
    background_jobs: int = 0
    # hidden from the list since then (null: listed); any new message clears it
    archived_at: datetime | None = None


class Turn(BaseModel):
    id: int
    thread_id: str
    lease_until: datetime


class Claim(BaseModel):
    """``POST /v1/agent/turns/claim``: the turn, its thread and the model-facing history."""

    turn: Turn
    thread: Thread
    messages: list[ChatMessage]
    # the window is capped: history(before_id=next_before_id) reads the rows before it
    next_before_id: int | None = None
    # the user and event messages this claim delivered for the first time (also in messages)
    input: list[ChatMessage] = []


class Lease(BaseModel):
    lease_until: datetime


class LeaseRequest(BaseModel):
    """``POST /v1/agent/leases``: which runtime takes the lease (a name for logs and the
    ``jobLost`` events)."""

    model_config = ConfigDict(extra="ignore")

    runtime: str = Field(min_length=1, max_length=200)


class RuntimeLease(BaseModel):
    """A runtime lease: ``active`` until ``lease_until`` unless a heartbeat moves it on."""

    id: str
    runtime: str
    status: str  # active | lapsed
    lease_until: datetime
    lease_s: float  # how far each heartbeat moves lease_until from now


class Delivery(BaseModel):
    """``inbox`` and ``history``: model-facing messages."""

    messages: list[ChatMessage]


class History(Delivery):
    """``history``: one model window; ``next_before_id`` reads the one before (null: none)."""

    next_before_id: int | None = None


class Finished(BaseModel):
    open_components: list[str]
    requeued: bool


class StoppedTurn(BaseModel):
    """``POST /v1/threads/{id}/turn/stop``: the turn Max stopped (its writes are now ``409
    turn_stopped``); queued input stays queued and open cards stay open."""

    thread_id: str
    turn_id: int
    status: Literal["stopped"] = "stopped"
    finished_at: datetime


class ClaimRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    wait_s: float = Field(default=0, ge=0, le=30)
    runtime_id: str | None = Field(default=None, max_length=200)
    # only turns of these threads (a bridge that runs hosts for some threads of its user)
    thread_ids: list[str] | None = Field(default=None, max_length=100)


class ToolResult(_Open):
    """One executed call of a row posted with ``"execute": true``."""

    tool_call_id: str
    status: int
    content: Any = None


class Posted(_Open):
    """``POST /v1/agent/threads/{id}/messages`` (``results`` with ``"execute": true``)."""

    id: int
    guard: str | None = None
    results: list[ToolResult] | None = None


class Executed(_Open):
    """``POST /v1/agent/threads/{id}/tool-calls/{call}/execute``."""

    tool_call_id: str
    content: Any = None


class ToolSpec(_Open):
    type: str = "function"
    function: dict[str, Any]


class Message(_Open):
    """``api.md``: Message, a timeline row as user clients see it."""

    id: int
    thread_id: str
    role: str
    body: str | None = None
    content: Any = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    display: Any = None
    source_meta: Any = None
    components: list[dict[str, Any]] | None = None
    created_at: datetime | None = None
    rev: int = 0


class Option(_Open):
    id: str
    label: str = ""
    recommended: bool | None = None


class Action(_Open):
    id: str
    label: str = ""


class Component(_Open):
    """``api.md``: Component, its definition plus its state (never a secret answer)."""

    id: str
    kind: str
    title: str = ""
    question: str = ""
    options: list[Option] = Field(default_factory=list)
    multiple: bool = False
    allow_other: bool = False
    placeholder: str | None = None
    object: Any = None
    actions: list[Action] = Field(default_factory=list)
    stakes: str = "normal"
    status: str = "open"
    answer: Any = None
    answered_by: str | None = None
    answered_via: str | None = None
    main_reason: str | None = None
    due_at: datetime | None = None
    decision_id: int | None = None
    thread_id: str | None = None
    message_id: int | None = None
    tool_message_id: int | None = None
    posted_at: datetime | None = None
    answered_at: datetime | None = None
    seen_at: datetime | None = None
    expires_at: datetime | None = None
    withdrawn_reason: str | None = None
    superseded_by: str | None = None


class TakeBack(_Open):
    """The single-use ``retract`` token of the notification confirming an answer."""

    action_token: str
    action: str = "retract"
    until: datetime  # the retract window closes then
    category: str | None = None  # the APNs category of an app's confirmation (MAXCLAW_TAKE_BACK)


class Decision(_Open):
    """``api.md``: Decision, a card's question in the decisions panel."""

    id: int
    kind: str = "agent-question"
    status: str = "open"
    component_id: str | None = None
    thread_id: str | None = None
    title: str = ""
    body: str = ""
    options: list[dict[str, Any]] = Field(default_factory=list)
    allow_text: bool = False
    sensitive: bool = False
    answer_text: str | None = None
    settled_via: str | None = None
    bar: bool = False
    bar_snoozed_until: datetime | None = None
    created_at: datetime | None = None
    settled_at: datetime | None = None
    rev: int = 0
    # only in the answer to ``POST /v1/push/actions`` with an action token: the confirmation's
    # "Take back" ({"action_token", "action": "retract", "until"})
    take_back: TakeBack | None = None


class MeSettings(_Open):
    """What the server does with the caller's data (``GET /v1/me``'s ``settings``)."""

    secret_ttl_s: int  # a secret answer's sealed box is destroyed after this
    presence_ttl_s: float  # a silent client stops counting as watching after this
    search_max_query_chars: int


class Me(_Open):
    """``GET /v1/me``."""

    user_id: str
    name: str
    main_thread_id: str | None = None
    created_at: datetime | None = None
    threads: int | None = None  # listed (not archived)
    archived_threads: int | None = None
    devices: int | None = None
    tokens: int | None = None
    settings: MeSettings | None = None


class ThreadPatch(BaseModel):
    """``PATCH /v1/threads/{id}``: rename, archive (``keep_cards_open``: its open questions
    stay open), or bring back (``archived: false``)."""

    model_config = ConfigDict(extra="forbid")
    title: str | None = Field(default=None, max_length=500)
    archived: bool | None = None
    keep_cards_open: bool = False


class SearchHit(_Open):
    """One result of ``GET /v1/search``: ``highlights`` are ``[start, end)`` character ranges
    of ``snippet`` (plain text; mark it up yourself)."""

    kind: Literal["thread", "message", "card"]
    thread_id: str
    thread_title: str
    message_id: int | None = None
    snippet: str
    highlights: list[list[int]]
    rank: float
    created_at: datetime


class SearchPage(_Open):
    """``GET /v1/search``: best first; ``next_cursor`` (null: the last page) fetches more."""

    results: list[SearchHit]
    next_cursor: str | None = None


class Threads(_Open):
    threads: list[Thread]


class MessagePage(_Open):
    """``GET /v1/threads/{id}/messages``: ``next_after_id`` starts the next page (null: the
    last one); read backwards, ``prev_before_id`` starts the older one."""

    messages: list[Message]
    next_after_id: int | None = None
    # only on a page read backwards (``before_id`` or ``latest``): fetches the older page
    # (null: this page starts the thread)
    prev_before_id: int | None = None


class CardError(_Open):
    """One question of a whole-card answer that did not settle: ``{"error": {code, message}}``."""

    error: dict[str, Any]


class CardAnswers(_Open):
    """``POST /v1/cards/{tool_call_id}/answer``: each component, or why it did not settle."""

    components: dict[str, Component | CardError]


class Components(_Open):
    """``GET /v1/agent/threads/{id}/components``."""

    components: list[Component]


class Decisions(_Open):
    decisions: list[Decision]


class Device(_Open):
    """A push device: ``{"id", "platform"}`` when registered; the list adds where and when."""

    id: int
    platform: str
    created_at: datetime | None = None
    address: str | None = None


class Devices(_Open):
    devices: list[Device]


class PushQueued(_Open):
    """``POST /v1/push/test``: how many test notifications were queued."""

    queued: int


class PushConfig(_Open):
    """``GET /v1/push/config``: what a browser needs to subscribe."""

    vapid_public_key: str | None = None


class Token(_Open):
    """``GET /v1/tokens``: a token's facts, never the token or its hash."""

    id: int
    role: str
    thread_id: str | None = None
    created_at: datetime | None = None
    last_used_at: datetime | None = None
    expires_at: datetime | None = None
    current: bool = False
    for_main: bool = False
    name: str | None = None  # what the person called it when minting it in the WebUI
    thread_title: str | None = None  # the bound thread's title


class Tokens(_Open):
    tokens: list[Token]


class MintedToken(_Open):
    """``POST /v1/tokens`` and ``POST /v1/signin/redeem``: the token, shown this once."""

    token: str
    id: int
    role: str
    thread_id: str | None = None
    name: str | None = None
    expires_at: datetime | None = None
    user: str | None = None  # the account a sign-in code signed into


class SigninCode(_Open):
    """``POST /v1/signin/codes``: a one-time code for ``POST /v1/signin/redeem``."""

    code: str
    expires_at: datetime
    url: str | None = None  # the sign-in link (the page's origin + ``#signin=CODE``)
    qr_svg: str | None = None  # the link as a QR code, an SVG document


class Ticket(_Open):
    """``POST /v1/ws-ticket``: single use, for ``GET /v1/ws?ticket=``."""

    ticket: str
    expires_at: datetime


class Tools(_Open):
    """``GET /v1/agent/tools``."""

    tools: list[ToolSpec]


class ErrorBody(_Open):
    """Every refusal: a status code and this body (``api.md``: Errors)."""

    code: str
    message: str
    data: dict[str, Any] = Field(default_factory=dict)


class ExecuteRefused(ErrorBody):
    """A refused ``execute``: the error body plus what was written as the tool row."""

    tool_call_id: str
    content: Any = None


class QuietHours(_Open):
    """A nightly window in his time zone: ``start``/``end`` as ``HH:MM`` (``end`` not after
    ``start`` crosses midnight); ``days``: the ISO weekdays (1 = Monday) it starts on, or null
    for every day."""

    start: str
    end: str
    days: list[int] | None = None


class UserSettings(_Open):
    """``GET``/``PATCH /v1/settings``: a person's own settings (issue 29)."""

    locale: str  # en | zh-CN
    time_zone: str  # an IANA name
    quiet_hours: QuietHours | None = None
    main_may_answer_during_quiet_hours: bool
    quiet_push: str  # passive | hold
    main_after_minutes: int  # his default for cards whose agent gave none
    main_may_take_cards: bool
    # Main's time to decide a card handed to it, then it goes back to him; null: the server's
    # default (MAXCLAW_MAIN_TIMEOUT_MINUTES, 30)
    main_timeout_minutes: int | None = None
    quiet_now: bool  # whether quiet hours hold now
    quiet_until: datetime | None = None  # when the current window ends


class SettingsPatch(BaseModel):
    """``PATCH /v1/settings``: any of the settings; the service checks each and names the
    field it refuses (an unknown locale is ``en``, not an error)."""

    model_config = ConfigDict(extra="allow")

    locale: Any = None
    time_zone: Any = None
    quiet_hours: Any = None
    main_may_answer_during_quiet_hours: Any = None
    quiet_push: Any = None
    main_after_minutes: Any = None
    main_may_take_cards: Any = None
    main_timeout_minutes: Any = None
