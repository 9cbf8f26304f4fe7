"""Upgrades: ``maxclaw migrate --check`` says current / behind / ahead with its exit code, and
every migration is expand-only against the schema before it (docs/operations.md), so replicas
of the previous release keep working while the new one rolls out."""

from __future__ import annotations

from pathlib import Path

import psycopg
from alembic.script import ScriptDirectory

from maxclaw.db import migrate
from maxclaw.db.urls import plain_url
from maxclaw.ops import schema_check
from tests.integration.test_cli import cli

# Migrations that are not expand-only, with exactly what the check finds and what it means for
# operators (docs/operations.md, "Releases that need a stop"). A new entry needs the same.
ACCEPTED: dict[str, set[str]] = {
    # Trust boundary: component ids and carrier dedupe keys scoped by user. The previous
    # release's `INSERT INTO decisions … ON CONFLICT (dedupe_key)` fails once the global
    # unique is gone, so every card a 0004 replica posts fails after this migration: stop the
    # 0004 replicas, migrate, start the new ones. (The CHECK on api_tokens is safe: for_main
    # is new and defaults to false, which old writers never change.)
    "0005_trust": {
        "api_tokens gained a CHECK constraint: CHECK (((NOT for_main) OR "
        "(role = 'agent'::text)))",
        "decisions gained a UNIQUE constraint: UNIQUE (user_id, dedupe_key)",
        "message_components gained a PRIMARY KEY constraint: PRIMARY KEY (user_id, id)",
        "decisions lost a UNIQUE constraint: UNIQUE (dedupe_key) (the previous release's "
        "ON CONFLICT may name it)",
        "message_components lost a PRIMARY KEY constraint: PRIMARY KEY (id) (the previous "
        "release's ON CONFLICT may name it)",
        "decisions gained a unique index: public.decisions USING btree (user_id, dedupe_key)",
        "message_components gained a unique index: public.message_components USING btree "
        "(user_id, id)",
    },
}


# 0006_user_keys: every key of user-owned data gains user_id (docs/scaling.md). Primary keys
# (table: old key column) and foreign keys (table, column, target) as this test expects them.
_0006_PRIMARY_KEYS = {"threads": "id", "api_tokens": "id", "messages": "id", "decisions": "id",
                      "component_audit": "id", "turns": "id", "presence": "connection_id",
                      "push_devices": "id", "push_outbox": "id", "push_action_tokens": "id",
                      "message_secrets": "message_id"}
_0006_FOREIGN_KEYS = [
    ("api_tokens", "thread_id", "threads"), ("messages", "thread_id", "threads"),
    ("decisions", "thread_id", "threads"), ("message_components", "thread_id", "threads"),
    ("message_components", "message_id", "messages"),
    ("message_components", "tool_message_id", "messages"),
    ("message_components", "decision_id", "decisions"), ("turns", "thread_id", "threads"),
    ("presence", "thread_id", "threads"), ("push_outbox", "device_id", "push_devices"),
    ("push_outbox", "decision_id", "decisions"), ("ws_tickets", "token_id", "api_tokens"),
    ("push_action_tokens", "decision_id", "decisions"),
    ("push_action_tokens", "device_id", "push_devices"),
    ("message_secrets", "message_id", "messages"), ("message_secrets", "thread_id", "threads")]


def _user_keys_0006() -> set[str]:
    found: set[str] = set()
    for table, old in _0006_PRIMARY_KEYS.items():
        found |= {f"{table} gained a PRIMARY KEY constraint: PRIMARY KEY (user_id, {old})",
                  f"{table} gained a unique index: public.{table} USING btree (user_id, {old})",
                  f"{table} lost a PRIMARY KEY constraint: PRIMARY KEY ({old}) (the previous "
                  "release's ON CONFLICT may name it)"}
    for table, column, target in _0006_FOREIGN_KEYS:
        action = "SET NULL (decision_id)" if table == "message_components" and \
            column == "decision_id" else "CASCADE"
        found.add(f"{table} gained a FOREIGN KEY constraint: FOREIGN KEY (user_id, {column}) "
                  f"REFERENCES {target}(user_id, id) ON DELETE {action}")
    found.add("messages gained a unique index: public.messages USING btree "
              "(user_id, thread_id, tool_call_id) WHERE (role = 'tool'::text)")
    found.add("turns gained a unique index: public.turns USING btree (user_id, thread_id) "
              "WHERE (status = ANY (ARRAY['queued'::text, 'running'::text]))")
    return found


# Keys scoped by user (distribution by user_id, docs/scaling.md). The previous release's
# `ON CONFLICT (thread_id) WHERE status IN (…)` on turns and `ON CONFLICT (connection_id)` on
# presence fail once the old unique keys are gone, so 0005 replicas cannot queue a turn or
# record presence after it: stop them, migrate, start the new ones. The new foreign keys only
# say what every writer already does (a row's user is its thread's / message's user).
ACCEPTED["0006_user_keys"] = _user_keys_0006()

# The check bounds a column the same migration adds (nullable): a previous-release writer never
# names the column, so its rows hold null, which the check passes.
ACCEPTED["0022_main_timeout"] = {
    "user_settings gained a CHECK constraint: CHECK (((main_timeout_minutes >= 1) AND "
    "(main_timeout_minutes <= 10080)))"}


def revisions() -> list[str]:
    script = ScriptDirectory.from_config(migrate.alembic_config("postgresql://unused/x"))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


async def test_check_says_current_behind_and_ahead(empty_database: str, tmp_path: Path) -> None:
    url = empty_database
    empty = await cli("migrate", "--check", "--database-url", url, data_dir=tmp_path)
    assert empty.code == 2 and '"state": "behind"' in empty.out, empty.err
    assert "run `maxclaw migrate`" in empty.err
    with psycopg.connect(plain_url(url), autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('public.alembic_version')").fetchone() == (None,)

    (await cli("migrate", "--database-url", url, data_dir=tmp_path)).assert_ok()
    current = await cli("migrate", "--check", "--database-url", url, data_dir=tmp_path)
    assert current.code == 0 and '"state": "current"' in current.out, current.err

    migrate.downgrade(url, revisions()[-2])
    behind = await cli("migrate", "--check", "--database-url", url, data_dir=tmp_path)
    assert behind.code == 2 and f'"database": "{revisions()[-2]}"' in behind.out

    with psycopg.connect(plain_url(url), autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    ahead = await cli("migrate", "--check", "--database-url", url, data_dir=tmp_path)
    assert ahead.code == 3 and '"state": "ahead"' in ahead.out
    assert "a newer release migrated it" in ahead.err


def test_each_migration_is_expand_only(empty_database: str) -> None:
    """The schema after each migration still serves code written for the schema before it:
    nothing dropped, retyped or tightened; no new NOT NULL column without a default; no new
    constraint an old writer could trip on. Walks the whole chain on one database."""
    chain = revisions()
    migrate.upgrade(empty_database, chain[0])
    before = schema_check.snapshot(empty_database)
    found: dict[str, set[str]] = {}
    for rev in chain[1:]:
        migrate.upgrade(empty_database, rev)
        after = schema_check.snapshot(empty_database)
        problems = set(schema_check.expand_violations(before, after))
        if problems != ACCEPTED.get(rev, set()):  # an accepted list that goes stale fails too
            found[rev] = problems
        before = after
    assert found == {}


def test_the_check_catches_what_breaks_old_replicas(empty_database: str) -> None:
    """The checker itself: each kind of contract change in one made-up migration is named."""
    migrate.upgrade(empty_database)
    before = schema_check.snapshot(empty_database)
    with psycopg.connect(plain_url(empty_database), autocommit=True) as conn:
        conn.execute("ALTER TABLE presence DROP COLUMN thread_id")
        conn.execute("ALTER TABLE turns ALTER COLUMN runtime_id SET NOT NULL")
        conn.execute("ALTER TABLE users ADD COLUMN email text NOT NULL")
        conn.execute("ALTER TABLE push_devices ADD CONSTRAINT short CHECK (length(secret) < 9)")
        conn.execute("CREATE UNIQUE INDEX one_device ON push_devices (user_id, platform)")
        conn.execute("ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_token_hash_key")
        conn.execute("ALTER TABLE users ADD COLUMN note text")  # expand: fine
        conn.execute("CREATE TABLE brand_new (id int PRIMARY KEY)")  # expand: fine
        conn.execute("ALTER TABLE push_outbox DROP CONSTRAINT push_outbox_kind_check,"
                     " ADD CONSTRAINT push_outbox_kind_check"
                     " CHECK (kind IN ('notify', 'withdraw', 'activity', 'digest'))")  # widened
        conn.execute("ALTER TABLE push_devices DROP CONSTRAINT push_devices_platform_check,"
                     " ADD CONSTRAINT push_devices_platform_check"
                     " CHECK (platform IN ('webpush', 'apns'))")  # narrowed: not fine
    problems = schema_check.expand_violations(before, schema_check.snapshot(empty_database))
    joined = "\n".join(problems)
    assert len(problems) == 7, joined
    for needle in ("presence.thread_id was dropped", "turns.runtime_id became NOT NULL",
                   "api_tokens lost a UNIQUE constraint: UNIQUE (token_hash)",
                   "push_devices gained a CHECK constraint: CHECK ((platform = ANY",
                   "users.email is new, NOT NULL", "push_devices gained a CHECK",
                   "push_devices gained a unique index"):
        assert needle in joined
