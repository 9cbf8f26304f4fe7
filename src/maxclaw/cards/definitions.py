"""``components_of_tool_call``: the one pure function from a tool call to card definitions.

The definition of a card is never stored twice: it is the ``arguments`` of the
``ask_user_question`` call on the assistant row. Server, WebUI, push and Main's hand-off all
read it through this function, so they cannot disagree about what a card is.
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from maxclaw.errors import Invalid
from maxclaw.jsonlimits import check_depth

ASK_TOOL = "ask_user_question"
LOCAL_ID = r"^[A-Za-z0-9_-]{1,64}$"
MAX_OBJECT_BYTES = 256 * 1024
MAX_TOOL_CALL_ID = 200
MAX_EXPIRY_MINUTES = 43_200  # 30 days

LocalId = Annotated[str, StringConstraints(pattern=LOCAL_ID)]
Label = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Kind = Literal["choice", "text", "secret", "object"]
Stakes = Literal["normal", "irreversible"]
Urgency = Literal["normal", "time-sensitive"]


class _Arg(BaseModel):
    # strict: a model that sends "true" or 30.5 is told so instead of being silently coerced
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class Option(_Arg):
    id: LocalId
    label: Label
    recommended: bool = False


class Action(_Arg):
    id: LocalId
    label: Label


def _unique_ids(items: list[Option] | list[Action] | None, what: str) -> None:
    if items is None:
        return
    ids = [item.id for item in items]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{what} ids must be unique")


class QuestionArg(_Arg):
    id: LocalId
    kind: Kind
    question: Annotated[str, StringConstraints(min_length=1, max_length=2000)]
    options: list[Option] | None = None
    multiple: bool = False
    allow_other: bool = False
    placeholder: Annotated[str, StringConstraints(max_length=200)] | None = None
    object: Any = Field(default=None, description=(
        "what an object question acts on, e.g. {type: diff, content}"))
    actions: list[Action] | None = None

    @field_validator("object")
    @classmethod
    def _object_size(cls, value: Any) -> Any:
        if value is not None and len(json.dumps(value, separators=(",", ":"))) > MAX_OBJECT_BYTES:
            raise ValueError("object is larger than 256 KiB")
        return value

    @field_validator("options")
    @classmethod
    def _options(cls, value: list[Option] | None, info: ValidationInfo) -> list[Option] | None:
        kind = info.data.get("kind")
        if kind == "choice":
            if value is None or not 2 <= len(value) <= 12:
                raise ValueError("a choice question needs 2 to 12 options")
            _unique_ids(value, "option")
        elif value:
            raise ValueError(f"options are only for choice questions, not {kind}")
        return value

    @field_validator("actions")
    @classmethod
    def _actions(cls, value: list[Action] | None, info: ValidationInfo) -> list[Action] | None:
        kind = info.data.get("kind")
        if kind == "object":
            if not value or len(value) > 12:
                raise ValueError("an object question needs 1 to 12 actions")
            _unique_ids(value, "action")
        elif value:
            raise ValueError(f"actions are only for object questions, not {kind}")
        return value

    @model_validator(mode="after")
    def _required_by_kind(self) -> QuestionArg:
        # a missing field never reaches the field validators above, so check presence here
        if self.kind == "choice" and self.options is None:
            raise ValueError("options: a choice question needs 2 to 12 options")
        if self.kind == "object":
            if self.object is None:
                raise ValueError("object: an object question needs the object to act on")
            if not self.actions:
                raise ValueError("actions: an object question needs 1 to 12 actions")
        return self


class CardArgs(_Arg):
    """``ask_user_question``'s arguments: the one parser, and (``card_args_schema``) the JSON
    Schema every outlet shows a model (REST's tool list, the MCP servers)."""

    title: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    questions: Annotated[list[QuestionArg], Field(min_length=1, max_length=8)]
    stakes: Stakes = "normal"
    # how the push interrupts him outside quiet hours (issue 29): nothing is time-sensitive
    # unless the agent says so; inside quiet hours every push is passive or held
    urgency: Urgency = Field("normal", description=(
        "normal (default) or time-sensitive: whether the notification may break through "
        "Focus modes; quiet hours always make it passive"))
    # null: never to Main by time (Max can still let Main decide)
    main_after_minutes: Annotated[int, Field(ge=0, le=10080, description=(
        "minutes until Main (his coordinating agent) may answer instead; null: never by time "
        "(use null for questions only Max can answer)"))] | None = 30
    # the card expires unanswered after this long (the agent is told; nothing is invented)
    expires_after_minutes: Annotated[int, Field(ge=1, le=MAX_EXPIRY_MINUTES, description=(
        "minutes after which the question expires unanswered; you are told in a new message, "
        "no answer is invented. Below main_after_minutes, it expires before Main may answer"))] \
        | None = None
    # component or tool-call ids of this conversation's earlier questions this card replaces
    supersedes: Annotated[list[Annotated[str, StringConstraints(min_length=1,
                                                                max_length=MAX_TOOL_CALL_ID + 70)]],
                          Field(max_length=16)] = Field(default_factory=list)

    @field_validator("questions")
    @classmethod
    def _unique_questions(cls, value: list[QuestionArg]) -> list[QuestionArg]:
        ids = [q.id for q in value]
        if len(ids) != len(set(ids)):
            raise ValueError("question ids must be unique")
        return value


class ComponentDefinition(BaseModel):
    """One interactive element as clients see it (``api.md``: Component definition)."""

    model_config = ConfigDict(frozen=True)

    id: str
    kind: Kind
    title: str
    question: str
    options: list[Option] = Field(default_factory=list)
    multiple: bool = False
    allow_other: bool = False
    placeholder: str | None = None
    object: Any = None
    actions: list[Action] = Field(default_factory=list)
    stakes: Stakes = "normal"
    urgency: Urgency = "normal"

    @property
    def local_id(self) -> str:
        return self.id.rsplit(":", 1)[1]

    @property
    def sensitive(self) -> bool:
        return self.kind == "secret"

    def option_label(self, option_id: str) -> str:
        labels = {o.id: o.label for o in self.options} | {a.id: a.label for a in self.actions}
        return labels.get(option_id, option_id)


class Card(BaseModel):
    """A validated ``ask_user_question`` call: card-level settings plus its components."""

    model_config = ConfigDict(frozen=True)

    tool_call_id: str
    title: str
    stakes: Stakes
    main_after_minutes: int | None
    components: list[ComponentDefinition]
    expires_after_minutes: int | None = None
    supersedes: list[str] = Field(default_factory=list)
    # whether the agent gave main_after_minutes (else his own default applies; issue 29)
    main_after_given: bool = True
    urgency: Urgency = "normal"

    def component(self, component_id: str) -> ComponentDefinition:
        for c in self.components:
            if c.id == component_id:
                return c
        raise KeyError(component_id)


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(defs[ref.removeprefix("#/$defs/")], defs)
        return {k: _inline(v, defs) for k, v in node.items() if k not in ("$defs", "title")}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def card_args_schema() -> dict[str, Any]:
    """``CardArgs`` as a JSON Schema with its ``$ref``s inlined (some agent hosts do not
    resolve them) and pydantic's titles dropped: the schema of ``ask_user_question``."""
    schema = CardArgs.model_json_schema()
    inlined: dict[str, Any] = _inline(schema, schema.get("$defs", {}))
    return inlined


def _errors(exc: ValidationError) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for err in exc.errors(include_url=False):
        loc = ["arguments", *err["loc"]]
        out.append({"loc": loc, "msg": str(err["msg"]).removeprefix("Value error, ")})
    return out


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise Invalid.at(["arguments"], "arguments are not valid JSON") from None
    return raw


def components_of_tool_call(call: Any) -> Card:
    """Validate one ``ask_user_question`` tool call (``{"id", "name", "arguments"}``).

    Raises ``Invalid`` (and nothing else) naming the field path of every problem.
    """
    if not isinstance(call, dict):
        raise Invalid.at([], "a tool call must be an object with id, name and arguments")
    call_id, name = call.get("id"), call.get("name")
    if not isinstance(call_id, str) or not 1 <= len(call_id) <= MAX_TOOL_CALL_ID:
        raise Invalid.at(["id"],
                         f"a tool call id is a string of 1 to {MAX_TOOL_CALL_ID} characters")
    if name != ASK_TOOL:
        raise Invalid.at(["name"], f"not an {ASK_TOOL} call")
    args = _arguments(call.get("arguments"))
    if not isinstance(args, dict):
        raise Invalid.at(["arguments"], "arguments must be a JSON object")
    check_depth(args, ["arguments"])
    try:
        parsed = CardArgs.model_validate(args)
    except ValidationError as exc:
        errors = _errors(exc)
        first = errors[0]
        path = ".".join(str(p) for p in first["loc"])
        raise Invalid(f"{path}: {first['msg']}", errors) from None
    except (RecursionError, ValueError, TypeError) as exc:  # pathological input
        raise Invalid.at(["arguments"], f"arguments could not be read: {type(exc).__name__}") \
            from None
    return _card(call_id, parsed)


def _card(call_id: str, args: CardArgs) -> Card:
    components = [
        ComponentDefinition(
            id=f"{call_id}:{q.id}", kind=q.kind, title=args.title, question=q.question,
            options=list(q.options or []),
            multiple=q.multiple if q.kind == "choice"
            else False, allow_other=q.allow_other if q.kind == "choice" else False,
            placeholder=q.placeholder, object=q.object, actions=list(q.actions or []),
            stakes=args.stakes, urgency=args.urgency,
        )
        for q in args.questions
    ]
    return Card(tool_call_id=call_id, title=args.title, stakes=args.stakes,
                main_after_minutes=args.main_after_minutes, components=components,
                expires_after_minutes=args.expires_after_minutes,
                supersedes=list(args.supersedes),
                main_after_given="main_after_minutes" in args.model_fields_set,
                urgency=args.urgency)


def normalize_tool_call(call: Any) -> dict[str, Any]:
    """Accept OpenAI's ``{"id", "type", "function": {"name", "arguments": str}}`` or our
    ``{"id", "name", "arguments"}`` and return ours (arguments parsed when they are JSON)."""
    if not isinstance(call, dict):
        raise Invalid.at(["tool_calls"], "each tool call must be an object")
    fn: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else call
    call_id, name, raw = call.get("id"), fn.get("name"), fn.get("arguments", {})
    if not isinstance(call_id, str) or not 1 <= len(call_id) <= MAX_TOOL_CALL_ID:
        raise Invalid.at(["tool_calls", "id"], "each tool call needs a string id")
    if not isinstance(name, str) or not name:
        raise Invalid.at(["tool_calls", "name"], "each tool call needs a function name")
    if isinstance(raw, str):
        # unreadable arguments are kept as the string; components_of_tool_call reports them
        with contextlib.suppress(ValueError, RecursionError):
            raw = json.loads(raw) if raw.strip() else {}
    check_depth(raw, ["tool_calls", "arguments"])
    return {"id": call_id, "name": name, "arguments": raw}


class _DefinitionCache:
    """Definitions by assistant message id, least recently used out first, bounded in bytes.

    An assistant row's calls never change once written, so its cards are validated once per
    replica rather than on every read (a 30-row page of ~1 MiB rows held the event loop for
    1.1 s re-validating them)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[tuple[int, tuple[str, ...]], tuple[list[dict[str, Any]], int]] \
            = OrderedDict()

    def get(self, message_id: int, tool_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # keyed by the row's id *and* its call ids: one process serving several databases (the
        # in-process test harness, a database per test) must not hand one row's cards to
        # another row that happens to have the same id
        key = (message_id, tuple(str(c.get("id")) for c in tool_calls if isinstance(c, dict)))
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            return hit[0]
        value = definitions_for_assistant_row(tool_calls)
        size = len(json.dumps(value, separators=(",", ":"))) if value else 16
        if size <= self.max_bytes // 4:
            self._entries[key] = (value, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.bytes -= dropped
        return value


DEFINITION_CACHE = _DefinitionCache(64 * 1024 * 1024)


def cached_definitions(message_id: int, tool_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``definitions_for_assistant_row`` for a stored row, validated once per replica."""
    return DEFINITION_CACHE.get(message_id, tool_calls)


def definitions_for_assistant_row(tool_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The definitions of every valid card an assistant row's calls posted (for projections)."""
    out: list[dict[str, Any]] = []
    for call in tool_calls:
        if call.get("name") != ASK_TOOL:
            continue
        try:
            card = components_of_tool_call(call)
        except Invalid:
            continue
        out.extend(c.model_dump(mode="json") for c in card.components)
    return out
