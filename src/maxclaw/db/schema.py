"""The declared schema: tables, keys and indexes here (SQLAlchemy Core), the sequence,
functions and triggers in ``live.sql`` next to this module (see ``live_sql``). Alembic
migrations are written by hand and a test checks that ``alembic upgrade head`` produces exactly
these two together.

Synced tables (threads, messages, decisions) carry ``rev`` (one global sequence) and ``xid``
(the writing transaction's ``xid8``), both set by the ``maxclaw_stamp_rev`` trigger; clients
resume from a cursor over ``(xid, rev)``. Every table carries ``user_id``.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.ddl import BaseDDLElement
from sqlalchemy.sql.schema import SchemaItem

# the search expressions are plain SQL text in a module of their own, so the server's search
# reads them without importing SQLAlchemy (re-exported here for the tables below and the tests)
from maxclaw.db.search_sql import (  # noqa: F401
    HAN_TEXT,
    SEARCH_FTS,
    SEARCH_HAN,
    SEARCH_TEXT,
    SEARCHABLE_MESSAGE,
    SYNCED_TABLES,
)

metadata = sa.MetaData()

# Search (0021_threads_search) is faster with two extensions from PostgreSQL's contrib: pg_trgm
# (trigram GIN indexes: a substring anywhere in a word, Chinese of three characters or more)
# and btree_gin (the owner's ``user_id`` as the first column of a GIN index). Not every server
# ships contrib (the embedded PostgreSQL of ``make run`` and ``make test`` does not), so they
# are optional: created when ``pg_available_extensions`` lists both and the role may create
# them, and the search indexes then take their extended shape; otherwise the indexes are built
# from what every PostgreSQL has (docs/domain.md, "Search"). The migration makes the same
# choice with the same statements; search/store.py reads back which shape it got.
CREATE_SEARCH_EXTENSIONS = """
DO $$
BEGIN
    IF (SELECT count(*) FROM pg_available_extensions
         WHERE name IN ('pg_trgm', 'btree_gin')) = 2
       AND (has_database_privilege(current_database(), 'CREATE')
            OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)) THEN
        CREATE EXTENSION IF NOT EXISTS pg_trgm;
        CREATE EXTENSION IF NOT EXISTS btree_gin;
    END IF;
END $$
"""
HAVE_SEARCH_EXTENSIONS = ("SELECT count(*) = 2 FROM pg_extension"
                          " WHERE extname IN ('pg_trgm', 'btree_gin')")
sa.event.listen(metadata, "before_create",
                sa.DDL(CREATE_SEARCH_EXTENSIONS))  # type: ignore[no-untyped-call]

# The search indexes, by name, in the shape the server's extensions allow: declared twice
# below (``ddl_if``: ``create_all`` builds the one that fits, as the migration does). Alembic's
# comparison skips them (``include_object``); the schema test compares their definitions in the
# catalog instead, migrated against declared, on whichever server it runs.
SEARCH_INDEXES = frozenset({"threads_search_fts", "threads_search_trgm", "messages_search_fts",
                            "messages_search_trgm", "messages_search_han"})


def _extended(ddl: BaseDDLElement, target: SchemaItem | str, bind: sa.Connection | None,
              tables: list[sa.Table] | None = None, state: Any = None, **kw: Any) -> bool:
    """Whether the search extensions are installed (``ddl_if``: build the extended shape)."""
    return bind is not None and bool(bind.execute(sa.text(HAVE_SEARCH_EXTENSIONS)).scalar())


def _builtin(ddl: BaseDDLElement, target: SchemaItem | str, bind: sa.Connection | None,
             tables: list[sa.Table] | None = None, state: Any = None, **kw: Any) -> bool:
    """Whether they are not (``ddl_if``: build the shape without them)."""
    return bind is not None and not _extended(ddl, target, bind)


def include_object(obj: object, name: str | None, type_: str, reflected: bool,
                   compare_to: object) -> bool:
    """Alembic's filter: everything but the search indexes, whose shape depends on the server
    (``SEARCH_INDEXES``)."""
    return not (type_ == "index" and name in SEARCH_INDEXES)


TS = sa.DateTime(timezone=True)
NOW = sa.text("now()")


class XID8(sa.types.UserDefinedType[int]):
    """PostgreSQL's 64-bit transaction id type (``pg_current_xact_id()``)."""

    cache_ok = True

    def get_col_spec(self, **kw: object) -> str:
        return "XID8"


# Every column a client's page carries, in bytes as text; tool calls twice (a page adds the
# cards' definitions, ``components``, built from them). alembic/versions/0015_row_size.py
# added the column with this expression; the trigger maxclaw_messages_derived (live.sql)
# computes it since 0027 (tests/integration/test_messages_derived.py holds them equal).
MESSAGE_SIZE = (
    "octet_length(coalesce(body, '')) + octet_length(coalesce(content::text, ''))"
    " + 2 * octet_length(coalesce(tool_calls::text, ''))"
    " + octet_length(coalesce(display::text, ''))"
    " + octet_length(coalesce(source_meta::text, ''))"
    " + octet_length(coalesce(tool_call_id, ''))"
)


def _rev_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("rev", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("xid", XID8(), nullable=False, server_default=sa.text("'0'::xid8")),
    ]


class _SetNullColumnFK(sa.ForeignKeyConstraint):
    """``ON DELETE SET NULL (column)`` (PostgreSQL 15): a composite key ``(user_id, x_id)`` whose
    target goes away nulls only ``x_id``; plain SET NULL would null ``user_id`` too (NOT NULL).
    ``ondelete`` holds the phrase as reflection reads it back (so alembic's compare matches);
    SQLAlchemy's DDL accepts only bare keywords there, so the compiler below adds the list."""

    inherit_cache = True


@compiles(_SetNullColumnFK)
def _compile_set_null_fk(element: _SetNullColumnFK, compiler: Any, **kw: Any) -> str:
    phrase = element.ondelete
    element.ondelete = "SET NULL"
    try:
        sql: str = compiler.visit_foreign_key_constraint(element, **kw)
    finally:
        element.ondelete = phrase
    return sql.replace("ON DELETE SET NULL", f"ON DELETE {phrase}")


def _user_pk(table: str, column: str = "id") -> sa.PrimaryKeyConstraint:
    """Keys lead with the owner (0006_user_keys): a table partitioned or distributed by
    ``user_id`` can only have unique keys that contain it."""
    return sa.PrimaryKeyConstraint("user_id", column, name=f"{table}_pkey")


def _user_fk(table: str, column: str, target: str,
             set_null: bool = False) -> sa.ForeignKeyConstraint:
    """``(user_id, column) REFERENCES target (user_id, id)``: a row and what it points at
    belong to one user, so they live on one partition (or shard)."""
    name = f"{table}_{column}_fkey"
    refcolumns = [f"{target}.user_id", f"{target}.id"]
    if set_null:
        return _SetNullColumnFK(["user_id", column], refcolumns, name=name,
                                ondelete=f"SET NULL ({column})")
    return sa.ForeignKeyConstraint(["user_id", column], refcolumns, name=name,
                                   ondelete="CASCADE")


users = sa.Table(
    "users",
    metadata,
    sa.Column("id", pg.UUID(as_uuid=False), primary_key=True,
              server_default=sa.text("gen_random_uuid()")),
    sa.Column("name", sa.Text, nullable=False, unique=True),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
)

threads = sa.Table(
    "threads",
    metadata,
    sa.Column("id", pg.UUID(as_uuid=False), nullable=False,
              server_default=sa.text("gen_random_uuid()")),
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("category", sa.Text),
    sa.Column("title", sa.Text, nullable=False, server_default=""),
    sa.Column("turn_state", sa.Text, nullable=False, server_default="idle"),
    # unsettled questions of the thread, kept by triggers on message_components (0006_life_b)
    sa.Column("open_cards", sa.Integer, nullable=False, server_default="0"),
    # ids of the background jobs an agent reported started and not yet finished (0017)
    sa.Column("background_jobs", pg.ARRAY(sa.Text), nullable=False,
              server_default=sa.text("'{}'::text[]")),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.Column("updated_at", TS, nullable=False, server_default=NOW),
    *_rev_columns(),
    # hidden from the thread list since then; any new message of the thread clears it (the
    # messages_unarchive trigger, 0021_threads_search)
    sa.Column("archived_at", TS),
    sa.CheckConstraint("kind IN ('normal', 'main', 'isolated', 'background')",
                       name="threads_kind_check"),
    sa.CheckConstraint("turn_state IN ('idle', 'queued', 'running')",
                       name="threads_turn_state_check"),
    sa.Index("threads_one_main_per_user", "user_id", unique=True,
             postgresql_where=sa.text("kind = 'main'")),
    sa.Index("threads_user_sync", "user_id", "xid", "rev"),
    # search (0021_threads_search): English full text, and trigrams, the owner first; or, with
    # no extensions, full text alone (SEARCH_INDEXES says which is built)
    sa.Index("threads_search_fts", "user_id",
             sa.text("to_tsvector('english'::regconfig, title)"),
             postgresql_using="gin").ddl_if(callable_=_extended),
    sa.Index("threads_search_trgm", "user_id", "title", postgresql_using="gin",
             postgresql_ops={"title": "gin_trgm_ops"}).ddl_if(callable_=_extended),
    sa.Index("threads_search_fts", sa.text("to_tsvector('english'::regconfig, title)"),
             postgresql_using="gin").ddl_if(callable_=_builtin),
    _user_pk("threads"),
)

api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("role", sa.Text, nullable=False),
    sa.Column("thread_id", pg.UUID(as_uuid=False)),
    sa.Column("token_hash", sa.Text, nullable=False, unique=True),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    # null: never expires; past: refused like a deleted token
    sa.Column("expires_at", TS),
    sa.Column("last_used_at", TS),
    # an unbound agent token allowed to write in Main's thread (one bound to Main's thread is)
    sa.Column("for_main", sa.Boolean, nullable=False, server_default=sa.false()),
    # what the person called it when minting it in the WebUI (null: the CLI's, or older)
    sa.Column("name", sa.Text),
    sa.CheckConstraint("role IN ('user', 'agent')", name="api_tokens_role_check"),
    sa.CheckConstraint("thread_id IS NULL OR role = 'agent'", name="api_tokens_thread_agent_check"),
    sa.CheckConstraint("NOT for_main OR role = 'agent'", name="api_tokens_for_main_check"),
    _user_pk("api_tokens"),
    _user_fk("api_tokens", "thread_id", "threads"),
)

# single-use, short-lived WebSocket tickets (POST /v1/ws-ticket), stored by hash
ws_tickets = sa.Table(
    "ws_tickets",
    metadata,
    sa.Column("ticket_hash", sa.Text, primary_key=True),
    sa.Column("token_id", sa.BigInteger,
              nullable=False),
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("expires_at", TS, nullable=False),
    sa.Index("ws_tickets_expires", "expires_at"),
    _user_fk("ws_tickets", "token_id", "api_tokens"),
)

# one-time sign-in codes ("Sign in on your phone"), stored by hash; used_at: redeemed
signin_codes = sa.Table(
    "signin_codes",
    metadata,
    sa.Column("code_hash", sa.Text, primary_key=True),
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.Column("expires_at", TS, nullable=False),
    sa.Column("used_at", TS),
    sa.Index("signin_codes_expires", "expires_at"),
)

messages = sa.Table(
    "messages",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("thread_id", pg.UUID(as_uuid=False),
              nullable=False),
    sa.Column("role", sa.Text, nullable=False),
    sa.Column("body", sa.Text),
    sa.Column("content", pg.JSONB),
    sa.Column("tool_calls", pg.JSONB),
    sa.Column("tool_call_id", sa.Text),
    sa.Column("display", pg.JSONB),
    sa.Column("source_meta", pg.JSONB),
    # the body holds a sensitive answer: projections for clients never carry it
    sa.Column("sensitive", sa.Boolean, nullable=False, server_default=sa.false()),
    # the turn that wrote an assistant/tool row (null outside a turn)
    sa.Column("turn_id", sa.BigInteger),
    # input rows (user, event) wait in the thread's inbox until a model is handed them
    sa.Column("delivered_at", TS),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.Column("updated_at", TS, nullable=False, server_default=NOW),
    *_rev_columns(),
    # what a page of rows spends on this one (history, the model window, realtime catch-up),
    # kept with the row so a page is cut from the index without reading the rows' text
    # (MESSAGE_SIZE), and what search matches and ranks (SEARCH_FTS, SEARCH_HAN; NULL on a row
    # that may hold a secret), stored so no search computes them again: all three written by
    # the trigger maxclaw_messages_derived (live.sql, 0027_messages_derived), never by a writer
    sa.Column("size", sa.BigInteger),
    sa.Column("search_fts", pg.TSVECTOR),
    sa.Column("search_han", pg.TSVECTOR),
    sa.CheckConstraint("role IN ('user', 'assistant', 'tool', 'event')",
                       name="messages_role_check"),
    sa.CheckConstraint("(role = 'tool') = (tool_call_id IS NOT NULL)",
                       name="messages_tool_call_id_check"),
    sa.Index("messages_thread_id", "thread_id", "id"),
    sa.Index("messages_user_sync", "user_id", "xid", "rev", postgresql_include=["size"]),
    sa.Index("messages_tool_result", "user_id", "thread_id", "tool_call_id", unique=True,
             postgresql_where=sa.text("role = 'tool'")),
    sa.Index("messages_undelivered", "thread_id", "id",
             postgresql_where=sa.text("delivered_at IS NULL AND role IN ('user', 'event')")),
    # search (0021_threads_search, 0024_search_stored): the rows that can hold no secret; full
    # text and Han phrases (the stored documents) and trigrams of SEARCH_TEXT, the owner first;
    # or, with no extensions, full text and Han phrases alone (SEARCH_INDEXES)
    sa.Index("messages_search_fts", "user_id", "search_fts",
             postgresql_using="gin", postgresql_where=sa.text(SEARCHABLE_MESSAGE),
             ).ddl_if(callable_=_extended),
    sa.Index("messages_search_trgm", "user_id",
             sa.literal_column(SEARCH_TEXT).label("search_text"),
             postgresql_using="gin", postgresql_ops={"search_text": "gin_trgm_ops"},
             postgresql_where=sa.text(SEARCHABLE_MESSAGE)).ddl_if(callable_=_extended),
    sa.Index("messages_search_han", "user_id", "search_han",
             postgresql_using="gin", postgresql_where=sa.text(SEARCHABLE_MESSAGE),
             ).ddl_if(callable_=_extended),
    sa.Index("messages_search_fts", "search_fts",
             postgresql_using="gin", postgresql_where=sa.text(SEARCHABLE_MESSAGE),
             ).ddl_if(callable_=_builtin),
    sa.Index("messages_search_han", "search_han",
             postgresql_using="gin", postgresql_where=sa.text(SEARCHABLE_MESSAGE),
             ).ddl_if(callable_=_builtin),
    _user_pk("messages"),
    _user_fk("messages", "thread_id", "threads"),
)

decisions = sa.Table(
    "decisions",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default="open"),
    # unique per user (decisions_user_dedupe_key): one tenant cannot pre-claim another's keys
    sa.Column("dedupe_key", sa.Text, nullable=False),
    sa.Column("component_id", sa.Text),
    sa.Column("thread_id", pg.UUID(as_uuid=False)),
    sa.Column("title", sa.Text, nullable=False, server_default=""),
    sa.Column("body", sa.Text, nullable=False, server_default=""),
    sa.Column("options", pg.JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
    sa.Column("allow_text", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("sensitive", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("answer_text", sa.Text),
    sa.Column("settled_via", sa.Text),
    sa.Column("bar", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("bar_snoozed_until", TS),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.Column("settled_at", TS),
    sa.Column("updated_at", TS, nullable=False, server_default=NOW),
    *_rev_columns(),
    # when Max dismissed an item the panel keeps after settling ("answered by Main")
    sa.Column("dismissed_at", TS),
    sa.CheckConstraint("status IN ('open', 'settled')", name="decisions_status_check"),
    sa.CheckConstraint(
        "settled_via IS NULL OR settled_via IN ('card', 'decision', 'push', 'main', 'withdrawn',"
        " 'expired')",
        name="decisions_settled_via_check"),
    sa.UniqueConstraint("user_id", "dedupe_key", name="decisions_user_dedupe_key"),
    sa.Index("decisions_user_status", "user_id", "status", "id"),
    sa.Index("decisions_user_sync", "user_id", "xid", "rev"),
    _user_pk("decisions"),
    _user_fk("decisions", "thread_id", "threads"),
)

message_components = sa.Table(
    "message_components",
    metadata,
    # ids are chosen by the caller ("<tool_call_id>:<question id>"): keyed by owner and id
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("id", sa.Text, nullable=False),
    sa.Column("thread_id", pg.UUID(as_uuid=False),
              nullable=False),
    sa.Column("message_id", sa.BigInteger,
              nullable=False),
    sa.Column("tool_message_id", sa.BigInteger,
              nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("stakes", sa.Text, nullable=False, server_default="normal"),
    sa.Column("sensitive", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("status", sa.Text, nullable=False, server_default="open"),
    sa.Column("answer", pg.JSONB),
    sa.Column("answered_by", sa.Text),
    sa.Column("answered_via", sa.Text),
    sa.Column("main_reason", sa.Text),
    sa.Column("due_at", TS),
    sa.Column("decision_id", sa.BigInteger),
    sa.Column("posted_at", TS, nullable=False, server_default=NOW),
    sa.Column("answered_at", TS),
    sa.Column("seen_at", TS),
    sa.Column("updated_at", TS, nullable=False, server_default=NOW),
    # the lifecycle (0005_lifecycle): when it expires unanswered, why the agent withdrew it
    sa.Column("expires_at", TS),
    sa.Column("withdrawn_reason", sa.Text),
    sa.Column("superseded_by", sa.Text),
    # where the due clock started (0020_user_prefs): null means posted_at; the re-judging
    # sweep restarts it. A settings change recomputes due_at from it (quiet hours).
    sa.Column("due_from", TS),
    # when a card with Main goes back to Max if Main has not decided (0022_main_timeout): set
    # by every move to with-main, cleared by every other move
    sa.Column("main_due_at", TS),
    sa.CheckConstraint("kind IN ('choice', 'text', 'secret', 'object')",
                       name="message_components_kind_check"),
    sa.CheckConstraint("stakes IN ('normal', 'irreversible')",
                       name="message_components_stakes_check"),
    sa.CheckConstraint(
        "status IN ('open', 'answered', 'with-main', 'main-answered', 'revoked', 'handed-back',"
        " 'withdrawn', 'expired')",
        name="message_components_status_check"),
    sa.CheckConstraint("answered_by IS NULL OR answered_by IN ('max', 'main')",
                       name="message_components_answered_by_check"),
    sa.CheckConstraint(
        "answered_via IS NULL OR answered_via IN ('card', 'decision', 'push', 'main')",
        name="message_components_answered_via_check"),
    sa.Index("message_components_due", "due_at",
             postgresql_where=sa.text("status = 'open' AND due_at IS NOT NULL")),
    sa.Index("message_components_thread", "thread_id", "status"),
    sa.Index("message_components_expiry", "expires_at",
             postgresql_where=sa.text("status IN ('open', 'with-main', 'handed-back', 'revoked')"
                                      " AND expires_at IS NOT NULL")),
    sa.Index("message_components_tool_message", "tool_message_id"),
    _user_pk("message_components"),
    _user_fk("message_components", "thread_id", "threads"),
    # no keys to message_id and tool_message_id (0025_component_message_keys): both messages
    # are written by the statement that writes the components, and go only with the thread
    _user_fk("message_components", "decision_id", "decisions", set_null=True),
    # open cards without a carrier (posted while Max watched): the re-judging sweep (0006_life_a)
    sa.Index("message_components_unwatched", "posted_at",
             postgresql_where=sa.text("status = 'open' AND decision_id IS NULL")),
    # a user's open cards, whose due times a settings change recomputes (0020_user_prefs)
    sa.Index("message_components_user_open", "user_id", "posted_at",
             postgresql_where=sa.text("status = 'open'")),
    # the cards with Main whose time to decide is up: the timeout sweep (0022_main_timeout)
    sa.Index("message_components_main_due", "main_due_at",
             postgresql_where=sa.text("status = 'with-main'")),
)

# A person's own settings (0020_user_prefs; docs/domain.md "Quiet hours"): one row per user,
# written on the first read or change. quiet_hours: {"start": "HH:MM", "end": "HH:MM",
# "days": [ISO weekdays] or null}, or null for none.
user_settings = sa.Table(
    "user_settings",
    metadata,
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("locale", sa.Text, nullable=False, server_default="en"),
    sa.Column("time_zone", sa.Text, nullable=False, server_default="UTC"),
    sa.Column("quiet_hours", pg.JSONB),
    sa.Column("main_may_answer_during_quiet_hours", sa.Boolean, nullable=False,
              server_default=sa.false()),
    sa.Column("quiet_push", sa.Text, nullable=False, server_default="passive"),
    sa.Column("main_after_minutes", sa.Integer, nullable=False, server_default=sa.text("30")),
    sa.Column("main_may_take_cards", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("updated_at", TS, nullable=False, server_default=NOW),
    # Main's time to decide a card, in minutes; null: the server's default (0022_main_timeout)
    sa.Column("main_timeout_minutes", sa.Integer),
    sa.CheckConstraint("locale IN ('en', 'zh-CN')", name="user_settings_locale_check"),
    sa.CheckConstraint("quiet_push IN ('passive', 'hold')",
                       name="user_settings_quiet_push_check"),
    sa.CheckConstraint("main_after_minutes BETWEEN 0 AND 10080",
                       name="user_settings_main_after_minutes_check"),
    sa.CheckConstraint("main_timeout_minutes BETWEEN 1 AND 10080",
                       name="user_settings_main_timeout_minutes_check"),
)

component_audit = sa.Table(
    "component_audit",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("component_id", sa.Text, nullable=False),
    sa.Column("from_status", sa.Text),
    sa.Column("to_status", sa.Text, nullable=False),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("via", sa.Text),
    sa.Column("at", TS, nullable=False, server_default=NOW),
    # the API token that acted (null: Max's browser session predates it, or the sweeper)
    sa.Column("token_id", sa.BigInteger),
    sa.Index("component_audit_component", "user_id", "component_id", "id"),
    sa.Index("component_audit_at", "at"),  # retention (0005_ops)
    _user_pk("component_audit"),
)

turns = sa.Table(
    "turns",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("thread_id", pg.UUID(as_uuid=False),
              nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default="queued"),
    sa.Column("runtime_id", sa.Text),
    sa.Column("lease_until", TS),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.Column("claimed_at", TS),
    sa.Column("finished_at", TS),
    # the highest message id this turn has handed to its model (claim history, inbox)
    sa.Column("delivered_through", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    # queued only to tell the model about its forged notice (finish does that once in a row)
    sa.Column("forged_requeue", sa.Boolean, nullable=False, server_default=sa.text("false")),
    # 'lapsed': the lease ran out; a fresh turn replaced it, so the old id fences stale writers;
    # 'stopped': Max pressed Stop (0019_retract_stop); its id fences the runtime, none replaces it
    sa.CheckConstraint("status IN ('queued', 'running', 'done', 'lapsed', 'stopped')",
                       name="turns_status_check"),
    sa.Index("turns_one_active_per_thread", "user_id", "thread_id", unique=True,
             postgresql_where=sa.text("status IN ('queued', 'running')")),
    sa.Index("turns_queued", "id", postgresql_where=sa.text("status = 'queued'")),
    sa.Index("turns_running_lease", "lease_until",
             postgresql_where=sa.text("status = 'running'")),
    # retention and the recent-lapses gauge (0005_ops)
    sa.Index("turns_finished", "finished_at",
             postgresql_where=sa.text("status IN ('done', 'lapsed', 'stopped')")),
    sa.Index("turns_thread", "thread_id", "id"),
    _user_pk("turns"),
    _user_fk("turns", "thread_id", "threads"),
)

presence = sa.Table(
    "presence",
    metadata,
    sa.Column("connection_id", sa.Text, nullable=False),
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("thread_id", pg.UUID(as_uuid=False)),
    sa.Column("expires_at", TS, nullable=False),
    sa.Index("presence_user_thread", "user_id", "thread_id"),
    _user_pk("presence", "connection_id"),
    _user_fk("presence", "thread_id", "threads"),
)

push_devices = sa.Table(
    "push_devices",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("platform", sa.Text, nullable=False),
    # platform-specific address: endpoint+keys (webpush), token/topic/environment (apns),
    # url (webhook)
    sa.Column("config", pg.JSONB, nullable=False),
    sa.Column("secret", sa.Text),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.CheckConstraint("platform IN ('webpush', 'apns', 'webhook', 'log')",
                       name="push_devices_platform_check"),
    sa.Index("push_devices_user", "user_id"),
    _user_pk("push_devices"),
)

push_outbox = sa.Table(
    "push_outbox",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("device_id", sa.BigInteger,
              nullable=False),
    sa.Column("decision_id", sa.BigInteger),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("collapse_id", sa.Text),
    sa.Column("payload", pg.JSONB, nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default="pending"),
    sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("next_attempt_at", TS, nullable=False, server_default=NOW),
    sa.Column("lease_until", TS),
    sa.Column("last_error", sa.Text),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.Column("sent_at", TS),
    # activity: a Live Activity's whole state for one APNs device (0018_live_activity)
    sa.CheckConstraint("kind IN ('notify', 'withdraw', 'activity')",
                       name="push_outbox_kind_check"),
    sa.CheckConstraint("status IN ('pending', 'sending', 'sent', 'dead')",
                       name="push_outbox_status_check"),
    sa.Index("push_outbox_ready", "next_attempt_at",
             postgresql_where=sa.text("status IN ('pending', 'sending')")),
    # the claim: the next user with a due row, then that user's oldest due rows (0006_push)
    sa.Index("push_outbox_user_ready", "user_id", "next_attempt_at", "id",
             postgresql_where=sa.text("status IN ('pending', 'sending')")),
    # a decision's pushes (an answer's withdraw, the decision's cascade), by the whole key the
    # foreign key names, each device's newest first for the withdraw (0007_open_cards_key;
    # was decision_id alone)
    sa.Index("push_outbox_user_decision", "user_id", "decision_id", "device_id", "id"),
    # retention and the dead-row gauge (0005_ops)
    sa.Index("push_outbox_finished", "status", "created_at",
             postgresql_where=sa.text("status IN ('sent', 'dead')")),
    _user_pk("push_outbox"),
    _user_fk("push_outbox", "device_id", "push_devices"),
    _user_fk("push_outbox", "decision_id", "decisions"),
)

# A secret's plaintext, sealed (maxclaw.secrets): one AES-GCM box per sensitive message. The
# message row holds only a masked copy; ``expired`` rows had their box destroyed (TTL, purge).
message_secrets = sa.Table(
    "message_secrets",
    metadata,
    sa.Column("message_id", sa.BigInteger, nullable=False),
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("thread_id", pg.UUID(as_uuid=False),
              nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("component_id", sa.Text),
    sa.Column("key_id", sa.Text),
    sa.Column("box", sa.LargeBinary),
    sa.Column("state", sa.Text, nullable=False, server_default="sealed"),
    sa.Column("expires_at", TS, nullable=False),
    sa.Column("expired_at", TS),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.CheckConstraint("kind IN ('answer', 'echo')", name="message_secrets_kind_check"),
    sa.CheckConstraint("state IN ('sealed', 'expired')", name="message_secrets_state_check"),
    sa.CheckConstraint("(state = 'sealed') = (key_id IS NOT NULL AND box IS NOT NULL)",
                       name="message_secrets_sealed_check"),
    sa.Index("message_secrets_thread_answers", "thread_id", "message_id",
             postgresql_where=sa.text("kind = 'answer' AND state = 'sealed'")),
    sa.Index("message_secrets_due", "expires_at", postgresql_where=sa.text("state = 'sealed'")),
    sa.Index("message_secrets_key", "key_id", "message_id",
             postgresql_where=sa.text("state = 'sealed'")),
    _user_pk("message_secrets", "message_id"),
    _user_fk("message_secrets", "message_id", "messages"),
    _user_fk("message_secrets", "thread_id", "threads"),
)

push_action_tokens = sa.Table(
    "push_action_tokens",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("decision_id", sa.BigInteger,
              nullable=False),
    sa.Column("device_id", sa.BigInteger,
              nullable=False),
    # SHA-256 of the token; the token itself only travels in the push
    sa.Column("token_hash", sa.LargeBinary, nullable=False),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.Column("expires_at", TS, nullable=False),
    sa.Column("used_at", TS),
    sa.Column("revoked_at", TS),
    # what the token may do: 'answer' (a question's buttons) or 'revoke' (the Revoke button of
    # "Main answered … for you"); checked by the service (0006_life_a)
    sa.Column("scope", sa.Text, nullable=False, server_default="answer"),
    sa.UniqueConstraint("token_hash", name="push_action_tokens_hash"),
    sa.Index("push_action_tokens_decision", "decision_id"),
    sa.Index("push_action_tokens_device", "device_id"),
    _user_pk("push_action_tokens"),
    _user_fk("push_action_tokens", "decision_id", "decisions"),
    _user_fk("push_action_tokens", "device_id", "push_devices"),
)

# a runtime's lease (0023_runtime_leases): active while heartbeats keep lease_until ahead
runtime_leases = sa.Table(
    "runtime_leases",
    metadata,
    sa.Column("id", pg.UUID(as_uuid=False), nullable=False,
              server_default=sa.text("gen_random_uuid()")),
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("runtime", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default="active"),
    sa.Column("lease_until", TS, nullable=False),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.Column("lapsed_at", TS),
    sa.CheckConstraint("status IN ('active', 'lapsed')", name="runtime_leases_status_check"),
    sa.Index("runtime_leases_due", "lease_until",
             postgresql_where=sa.text("status = 'active'")),
    # retention (ops/retention.py): lapsed leases go after MAXCLAW_RETENTION_RUNTIME_LEASES_DAYS
    sa.Index("runtime_leases_lapsed", "lapsed_at",
             postgresql_where=sa.text("status = 'lapsed'")),
    _user_pk("runtime_leases"),
)

# the background jobs reported started under a lease and not yet finished (0023_runtime_leases)
leased_jobs = sa.Table(
    "leased_jobs",
    metadata,
    sa.Column("user_id", pg.UUID(as_uuid=False),
              sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
    sa.Column("thread_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("job_id", sa.Text, nullable=False),
    sa.Column("lease_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.PrimaryKeyConstraint("user_id", "thread_id", "job_id", name="leased_jobs_pkey"),
    sa.Index("leased_jobs_lease", "user_id", "lease_id"),
    _user_fk("leased_jobs", "thread_id", "threads"),
    _user_fk("leased_jobs", "lease_id", "runtime_leases"),
)


def live_sql() -> str:
    """The programmable part of the schema at head (sequence, functions, triggers), whole."""
    return resources.files("maxclaw.db").joinpath("live.sql").read_text(encoding="utf-8")
