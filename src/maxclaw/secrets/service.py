"""SecretService: seal on write, open only for the model, expire, and check keys at start.

Where plaintext exists (see docs/security.md, "Secrets"): inside the AES-GCM box of a
``message_secrets`` row, and in the memory of the request that seals or opens it. The message
row keeps a masked copy (``••••[card …]``), which is all a client, a frame, a push or a log
line can ever be built from. ``model_rows`` is the one function that opens boxes; every
model-facing projection (claim, inbox, history, MCP ``get_answers``) passes its rows through it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from maxclaw.clock import Clock
from maxclaw.db.database import Database, JsonText, connect
from maxclaw.errors import Invalid, NotFound
from maxclaw.secrets import store
from maxclaw.secrets.crypto import BoxError, Key, open_box, seal
from maxclaw.secrets.keyring import Keyring, KeyringError, load_keyring
from maxclaw.secrets.mask import (
    MASK,
    MAX_SECRETS,
    Masker,
    json_text,
    mask_token,
    replace_masks,
)
from maxclaw.secrets.rows import SecretRow
from maxclaw.secrets.sealed import Sealed
from maxclaw.timeline.rows import MessageRow

log = logging.getLogger("maxclaw.secrets")
EXPIRED_LINE = "[secret expired]"
UNAVAILABLE_LINE = "[secret unavailable]"
SWEEP_BATCH = 500
SECRET_ANSWER_PREFIX = "Secret answer: "
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_ttl(text: str) -> timedelta:
    """``MAXCLAW_SECRET_TTL``: seconds, or a number with ``s``, ``m``, ``h`` or ``d``."""
    m = _DURATION.match(str(text).lower())
    if not m or float(m.group(1)) <= 0:
        raise KeyringError(f"MAXCLAW_SECRET_TTL {text!r}: give a positive duration like 7d, "
                           "12h, 30m or 3600")
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def _unpaired_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


async def missing_keys(url: str, keyring: Keyring) -> tuple[str | None, bool]:
    """At ``serve``'s start: why it must not start (live secret rows sealed under keys the
    keyring lacks, in one line, else None), and whether secret answers stored in plaintext by
    an older version wait to be sealed. A database that cannot be reached or has no tables
    yet is not this check's to report (the migration that follows says it)."""
    try:
        conn = await asyncio.wait_for(connect(url), 10)
    except Exception:
        return None, False
    try:
        if await conn.fetchval("SELECT to_regclass('messages')") is None:
            return None, False
        if await conn.fetchval("SELECT to_regclass('message_secrets')") is None:
            return None, bool(await conn.fetchval(store.ANY_PLAINTEXT_BEFORE_0005))
        usage = await store.key_usage(conn)
        legacy = bool(await conn.fetchval(store.ANY_PLAINTEXT))
    finally:
        await conn.close()
    missing = {k: n for k, n in usage.items() if keyring.get(k) is None}
    if not missing:
        return None, legacy
    names = ", ".join(f"{k} ({n} rows)" for k, n in missing.items())
    return (f"secret rows are sealed under key(s) {names} that {keyring.source} does not hold "
            f"(it holds {', '.join(keyring.ids)}); give the right key (MAXCLAW_SECRET_KEY or "
            "MAXCLAW_SECRET_KEY_FILE)"), legacy


def _json_texts(*values: Any) -> list[JsonText | None]:
    """Each JSON value as the text the insert sends (None stays None: SQL NULL)."""
    return [None if v is None else JsonText(json_text(v)) for v in values]


def aad(user_id: str, thread_id: str, kind: str) -> bytes:
    return f"maxclaw/secret/v1/{user_id}/{thread_id}/{kind}".encode()


@dataclass
class Guarded:
    """An agent-written row after the echo check: what the message row stores (masked) and,
    when a secret was found, the box that keeps the original for the model. A row that holds
    none keeps its JSON values as the text the check read (``JsonText``), for the insert."""

    body: str | None
    content: Any
    tool_calls: Any
    sealed: Sealed | None = None
    components: tuple[str, ...] = ()


class SecretService:
    def __init__(self, db: Database, clock: Clock, *, secret_key: str | None,
                 key_file: Path | None, data_dir: Path, ttl: timedelta) -> None:
        self.db = db
        self.clock = clock
        self.ttl = ttl
        self._source = (secret_key, key_file, data_dir)
        self._keyring: Keyring | None = None

    # ----- keys -----

    @property
    def keyring(self) -> Keyring:
        """Loaded on first use, so commands that never touch a secret need no key."""
        if self._keyring is None:
            secret_key, key_file, data_dir = self._source
            self._keyring, _ = load_keyring(secret_key, key_file, data_dir)
        return self._keyring

    def use(self, keyring: Keyring) -> None:
        self._keyring = keyring

    def _seal(self, user_id: str, thread_id: str, kind: str, payload: dict[str, Any],
              component_id: str | None, expires_at: datetime) -> Sealed:
        key = self.keyring.primary
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8", "surrogatepass")
        return Sealed(kind, component_id, key.id, seal(key, data, aad(user_id, thread_id, kind)),
                      expires_at)

    def _open(self, row: SecretRow) -> dict[str, Any] | None:
        """A box's payload, or None (logged by id only) when it does not open."""
        key: Key | None = self.keyring.get(row.key_id) if row.key_id else None
        if key is None or row.box is None:
            log.error("secret row sealed under a key this process does not have",
                      extra={"message_id": row.message_id, "key_id": row.key_id})
            return None
        try:
            data = open_box(key, bytes(row.box), aad(row.user_id, row.thread_id, row.kind))
            payload: dict[str, Any] = json.loads(data.decode("utf-8", "surrogatepass"))
            return payload
        except (BoxError, ValueError):
            log.error("secret row does not decrypt (truncated or altered); the model reads "
                      f"{UNAVAILABLE_LINE}",
                      extra={"message_id": row.message_id, "key_id": row.key_id})
            return None

    # ----- write path -----

    def seal_answer(self, user_id: str, thread_id: str, component_id: str, secret: str,
                    body: str) -> Sealed:
        """The box of a secret answer: the model's full body and the secret itself. Text
        PostgreSQL could not store in plain is refused the same way here (the box would hold
        it, but the model's copy must be text like any other answer)."""
        if "\x00" in secret or _unpaired_surrogate(secret):
            raise Invalid.at(["body"], "a value cannot be stored: a number out of range, or "
                                       "text with a NUL character or an unpaired surrogate")
        return self._seal(user_id, thread_id, "answer", {"body": body, "secret": secret},
                          component_id, self.clock.now() + self.ttl)

    def seal_card_answer(self, user_id: str, thread_id: str, secrets: list[tuple[str, str]],
                         body: str) -> Sealed:
        """The box of a whole-card answer with secret answers: the model's full body and each
        ``(secret, component id)``; the box is filed under the first secret's component."""
        for secret, _ in secrets:
            if "\x00" in secret or _unpaired_surrogate(secret):
                raise Invalid.at(["body"], "a value cannot be stored: text with a NUL "
                                           "character or an unpaired surrogate")
        return self._seal(user_id, thread_id, "answer",
                          {"body": body, "secret": secrets[0][0],
                           "secrets": [list(p) for p in secrets]},
                          secrets[0][1], self.clock.now() + self.ttl)

    async def guard(self, conn: asyncpg.Connection, user_id: str, thread_id: str, *,
                    body: str | None, content: Any = None, tool_calls: Any = None,
                    side: dict[str, Any] | None = None) -> Guarded:
        """Check an agent-written row against the thread's live secrets (one indexed query;
        nothing more when the thread has none): ``side`` fields that hold one are refused
        (``refuse_echo``), the rest is masked."""
        live = await store.live_answers(conn, user_id, thread_id, MAX_SECRETS)
        self.refuse_echo(live, side or {})
        if not live:
            return Guarded(body, content, tool_calls)
        texts = _json_texts(content, tool_calls)
        # a large row is two passes of C: other requests run between them, not after both
        await asyncio.sleep(0)
        return self.guard_rows(live, user_id, thread_id, body=body, content=content,
                               tool_calls=tool_calls, texts=texts)

    def guard_rows(self, live: list[SecretRow], user_id: str, thread_id: str, *,
                   body: str | None, content: Any = None, tool_calls: Any = None,
                   texts: list[JsonText | None] | None = None) -> Guarded:
        """``guard`` on the thread's live secret rows read already (as ``store.LIVE_ANSWERS``
        returns them, at most ``MAX_SECRETS``): a post folds that read into its first one.
        ``texts``: ``content`` and ``tool_calls`` as JSON text, when written out already."""
        if not live:
            return Guarded(body, content, tool_calls)
        secrets, expiry = self._plaintexts(live)
        masker = Masker(secrets)
        # one pass over the whole row first: the common row holds no secret and is done here,
        # its JSON values handed on as the text the insert sends (written out once)
        if texts is None:
            texts = _json_texts(content, tool_calls)
        if not masker.found_in(body, *texts):
            return Guarded(body, texts[0], texts[1])
        masked = Guarded(masker.text(body) if body is not None else None,
                         masker.json(content), masker.json(tool_calls))
        if not masker.hits:
            return Guarded(body, content, tool_calls)
        masked.components = tuple(sorted(masker.hits))
        masked.sealed = self._seal(user_id, thread_id, "echo",
                                   {"body": body, "content": content, "tool_calls": tool_calls},
                                   None, min(expiry[c] for c in masker.hits))
        return masked

    def _plaintexts(self, live: list[SecretRow],
                    ) -> tuple[list[tuple[str, str | None]], dict[str, datetime]]:
        """The live rows' ``(secret, component id)`` pairs and each component's expiry."""
        secrets: list[tuple[str, str | None]] = []
        expiry: dict[str, datetime] = {}
        for row in live:
            payload = self._open(row) or {}
            # a whole-card answer's box holds every secret of the card (``secrets``)
            pairs = payload.get("secrets") or [[payload.get("secret"), row.component_id]]
            for secret, component_id in pairs:
                if isinstance(secret, str):
                    secrets.append((secret, component_id))
                    expiry[component_id or ""] = row.expires_at
        return secrets, expiry

    def refuse_echo(self, live: list[SecretRow], fields: dict[str, Any]) -> None:
        """Refuse (422 naming the field) an agent-written side field that holds one of the
        ``live`` secrets. These fields are stored as written and ids, decision keys and the
        display are derived from some of them, so masking cannot keep the plaintext out; the
        agent is told to write the field without it. ``None`` values are not checked."""
        present = {name: value for name, value in fields.items() if value is not None}
        if not live or not present:
            return
        secrets, _ = self._plaintexts(live)
        for name, value in present.items():
            masker = Masker(secrets)
            masker.json(value)
            if masker.hits:
                raise Invalid.at(["body", name], (
                    f"{name} holds one of the user's secret answers; write it without the "
                    "secret (only a message's content and a tool call's arguments may carry "
                    "one, masked for every client)"))

    async def refuse_user_echo(self, conn: asyncpg.Connection, user_id: str,
                               fields: dict[str, Any]) -> None:
        """``refuse_echo`` against the user's newest live secrets in any thread, for fields
        that belong to no thread yet (a new thread's title, a claim's ``runtime_id``)."""
        if any(value is not None for value in fields.values()):
            self.refuse_echo(await store.live_answers_of_user(conn, user_id, MAX_SECRETS), fields)

    @staticmethod
    async def store_sealed(conn: asyncpg.Connection, user_id: str, thread_id: str,
                           message_id: int, sealed: Sealed) -> None:
        await store.insert(conn, message_id=message_id, user_id=user_id, thread_id=thread_id,
                           kind=sealed.kind, component_id=sealed.component_id,
                           key_id=sealed.key_id, box=sealed.box, expires_at=sealed.expires_at)

    # ----- the model-facing projection -----

    async def model_rows(self, conn: asyncpg.Connection, user_id: str,
                         rows: list[MessageRow]) -> list[MessageRow]:
        """``rows`` as the model may read them: sealed rows opened, expired ones reading
        "[secret expired]", unopenable ones "[secret unavailable]". One query, and only when
        a row is sensitive."""
        ids = [r.id for r in rows if r.sensitive]
        if not ids:
            return rows
        boxes = await store.of_messages(conn, user_id, ids)
        return [self._model_row(r, boxes.get(r.id)) if r.sensitive else r for r in rows]

    def _model_row(self, row: MessageRow, secret: SecretRow | None) -> MessageRow:
        if secret is None:
            return row  # a sensitive row with nothing sealed holds no secret
        if secret.state == "sealed":
            payload = self._open(secret)
            if payload is not None:
                if secret.kind == "answer":
                    return replace(row, body=payload.get("body"))
                return replace(row, body=payload.get("body"), content=payload.get("content"),
                               tool_calls=payload.get("tool_calls"))
            line = UNAVAILABLE_LINE
        else:
            line = EXPIRED_LINE
        return replace(row, body=replace_masks(row.body, line),
                       content=replace_masks(row.content, line),
                       tool_calls=replace_masks(row.tool_calls, line))

    # ----- retention -----

    async def sweep(self, batch: int = SWEEP_BATCH) -> int:
        """Destroy every box whose TTL ran out (batches until none is due)."""
        total = 0
        while True:
            async with self.db.transaction() as conn:
                n = await store.expire_due(conn, self.clock.now(), batch)
            total += n
            if n < batch:
                break
        if total:
            log.info("expired secrets destroyed", extra={"count": total})
        return total

    async def purge_thread(self, thread_id: str) -> int:
        """Destroy a thread's boxes now (``maxclaw secrets purge --thread``)."""
        async with self.db.transaction() as conn:
            owner = await store.thread_owner(conn, thread_id)
            if owner is None:
                raise NotFound("No such thread.")
            n = await store.purge_thread(conn, owner, thread_id, self.clock.now())
        log.info("secrets purged", extra={"thread_id": thread_id, "count": n})
        return n

    async def seal_legacy(self, batch: int = SWEEP_BATCH) -> int:
        """Seal sensitive answers written before secrets were encrypted (their plaintext sat
        in ``messages.body``); run by ``serve`` at start. Idempotent."""
        total = 0
        while True:
            async with self.db.transaction() as conn:
                rows = await store.legacy_plaintext(conn, batch)
                for row in rows:
                    body = row.body
                    head, sep, secret = body.rpartition(SECRET_ANSWER_PREFIX)
                    masked = (head + sep + mask_token(row.component_id)) if sep else MASK
                    sealed = self._seal(row.user_id, row.thread_id, "answer",
                                        {"body": body, "secret": secret if sep else body},
                                        row.component_id, row.created_at + self.ttl)
                    await self.store_sealed(conn, row.user_id, row.thread_id, row.id, sealed)
                    await store.set_body(conn, row.user_id, row.id, masked)
            total += len(rows)
            if len(rows) < batch:
                return total
