"""Every key of user-owned data includes ``user_id``, so the schema can be split by user.

A unique index (primary keys included) on a table partitioned or distributed by ``user_id``
must contain ``user_id``, and a foreign key between such tables must include it on both sides.
This migration makes that true for every table but three routing keys:

- primary keys become ``(user_id, id)`` (``presence``: ``(user_id, connection_id)``,
  ``message_secrets``: ``(user_id, message_id)``), keeping their names;
- every foreign key to ``threads``, ``messages``, ``decisions``, ``push_devices`` and
  ``api_tokens`` becomes ``(user_id, x_id) REFERENCES t (user_id, id)``, keeping its name and
  its ON DELETE action (``message_components.decision_id``: ``SET NULL (decision_id)``, so the
  user id stays);
- "one active turn per thread" and "one tool row per call" become unique per
  ``(user_id, thread_id, …)``; the code's ``ON CONFLICT`` clauses name the new columns;
- the triggers: ``maxclaw_stamp_rev`` names its table by argument (on a partitioned table
  ``TG_TABLE_NAME`` is the partition's name, and the hint's ``t`` must stay ``threads`` …),
  and ``maxclaw_turn_changed`` reads and updates by ``(user_id, thread_id)``.

Kept global on purpose (routing keys, looked up before the user is known): ``api_tokens
(token_hash)``, ``ws_tickets (ticket_hash)`` and ``push_action_tokens (token_hash)``. These
tables are not partitioned in the local stand-in (docs/scaling.md).

**Not expand-only: upgrade across it with a stop** (docs/operations.md, "Releases that need a
stop"). The previous release's ``ON CONFLICT (thread_id) WHERE status IN (…)`` on ``turns``
and ``ON CONFLICT (connection_id)`` on ``presence`` fail once the old unique keys are gone;
tests/ops/test_upgrades.py lists exactly what changes. Creating the composite foreign keys
validates them, so a row whose user differs from its thread's (there should be none) stops
the migration rather than being carried into a distributed schema.

Revision ID: 0006_user_keys
Revises: 0005_secrets
Applied as number 10 (this file's prefix); the revision id is what databases record in
``alembic_version``, so it keeps the name it was released with.
Create Date: 2026-12-01
"""

from alembic import op

revision = "0006_user_keys"
down_revision = "0005_secrets"
branch_labels = None
depends_on = None

# (table, constraint, old columns, new columns, referenced table, ON DELETE action)
FOREIGN_KEYS = [
    ("api_tokens", "api_tokens_thread_id_fkey", "thread_id", "threads", "CASCADE"),
    ("messages", "messages_thread_id_fkey", "thread_id", "threads", "CASCADE"),
    ("decisions", "decisions_thread_id_fkey", "thread_id", "threads", "CASCADE"),
    ("message_components", "message_components_thread_id_fkey", "thread_id", "threads",
     "CASCADE"),
    ("message_components", "message_components_message_id_fkey", "message_id", "messages",
     "CASCADE"),
    ("message_components", "message_components_tool_message_id_fkey", "tool_message_id",
     "messages", "CASCADE"),
    ("message_components", "message_components_decision_id_fkey", "decision_id", "decisions",
     "SET NULL"),
    ("turns", "turns_thread_id_fkey", "thread_id", "threads", "CASCADE"),
    ("presence", "presence_thread_id_fkey", "thread_id", "threads", "CASCADE"),
    ("push_outbox", "push_outbox_device_id_fkey", "device_id", "push_devices", "CASCADE"),
    ("push_outbox", "push_outbox_decision_id_fkey", "decision_id", "decisions", "CASCADE"),
    ("ws_tickets", "ws_tickets_token_id_fkey", "token_id", "api_tokens", "CASCADE"),
    ("push_action_tokens", "push_action_tokens_decision_id_fkey", "decision_id", "decisions",
     "CASCADE"),
    ("push_action_tokens", "push_action_tokens_device_id_fkey", "device_id", "push_devices",
     "CASCADE"),
    ("message_secrets", "message_secrets_message_id_fkey", "message_id", "messages", "CASCADE"),
    ("message_secrets", "message_secrets_thread_id_fkey", "thread_id", "threads", "CASCADE"),
]

# table -> (old primary key columns, new primary key columns)
PRIMARY_KEYS = {
    "threads": ("id", "user_id, id"),
    "api_tokens": ("id", "user_id, id"),
    "messages": ("id", "user_id, id"),
    "decisions": ("id", "user_id, id"),
    "component_audit": ("id", "user_id, id"),
    "turns": ("id", "user_id, id"),
    "presence": ("connection_id", "user_id, connection_id"),
    "push_devices": ("id", "user_id, id"),
    "push_outbox": ("id", "user_id, id"),
    "push_action_tokens": ("id", "user_id, id"),
    "message_secrets": ("message_id", "user_id, message_id"),
}

UNIQUE_INDEXES = {
    "turns_one_active_per_thread": (
        "turns (thread_id) WHERE status IN ('queued', 'running')",
        "turns (user_id, thread_id) WHERE status IN ('queued', 'running')"),
    "messages_tool_result": (
        "messages (thread_id, tool_call_id) WHERE role = 'tool'",
        "messages (user_id, thread_id, tool_call_id) WHERE role = 'tool'"),
}

STAMP_REV = r"""
CREATE OR REPLACE FUNCTION maxclaw_stamp_rev() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.rev := nextval('maxclaw_rev_seq');
    NEW.xid := pg_current_xact_id();
    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
    END IF;
    IF coalesce(current_setting('maxclaw.notify', true), '') <> 'off' THEN
        PERFORM pg_notify('maxclaw_rev', json_build_object(
            't', {table}, 'id', NEW.id, 'rev', NEW.rev, 'u', NEW.user_id,
            'x', NEW.xid::text)::text);
    END IF;
    RETURN NEW;
END $$;
"""

TURN_CHANGED = r"""
CREATE OR REPLACE FUNCTION maxclaw_turn_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    state text;
BEGIN
    SELECT CASE WHEN bool_or(status = 'running') THEN 'running'
                WHEN bool_or(status = 'queued') THEN 'queued'
                ELSE 'idle' END
      INTO state
      FROM turns WHERE user_id = NEW.user_id AND thread_id = NEW.thread_id
                   AND status IN ('queued', 'running');
    UPDATE threads SET turn_state = state
     WHERE user_id = NEW.user_id AND id = NEW.thread_id AND turn_state IS DISTINCT FROM state;
    IF NEW.status = 'queued' THEN
        PERFORM pg_notify('maxclaw_turn', NEW.user_id::text);
    END IF;
    RETURN NULL;
END $$;
"""

TURN_CHANGED_0001 = TURN_CHANGED.replace(
    "user_id = NEW.user_id AND thread_id = NEW.thread_id\n                   AND ",
    "thread_id = NEW.thread_id AND ").replace(
    "user_id = NEW.user_id AND id = NEW.thread_id", "id = NEW.thread_id")

SYNCED = ("threads", "messages", "decisions")


def _triggers(with_argument: bool) -> str:
    return "\n".join(
        f"DROP TRIGGER {t}_stamp_rev ON {t};\n"
        f"CREATE TRIGGER {t}_stamp_rev BEFORE INSERT OR UPDATE ON {t}\n"
        f"    FOR EACH ROW EXECUTE FUNCTION maxclaw_stamp_rev({repr(t) if with_argument else ''});"
        for t in SYNCED)


def _keys(new: bool) -> str:
    """The DDL that moves every key to its new (``new``) or old shape."""
    steps = [f"ALTER TABLE {table} DROP CONSTRAINT {name};"
             for table, name, *_ in FOREIGN_KEYS]
    for table, (old, fresh) in PRIMARY_KEYS.items():
        steps.append(f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey, "
                     f"ADD CONSTRAINT {table}_pkey PRIMARY KEY ({fresh if new else old});")
    for index, (old, fresh) in UNIQUE_INDEXES.items():
        steps.append(f"DROP INDEX {index};")
        steps.append(f"CREATE UNIQUE INDEX {index} ON {fresh if new else old};")
    for table, name, column, target, action in FOREIGN_KEYS:
        if new:
            # SET NULL names its column: nulling user_id too would break NOT NULL
            on_delete = f"SET NULL ({column})" if action == "SET NULL" else action
            steps.append(f"ALTER TABLE {table} ADD CONSTRAINT {name} FOREIGN KEY "
                         f"(user_id, {column}) REFERENCES {target} (user_id, id) "
                         f"ON DELETE {on_delete};")
        else:
            steps.append(f"ALTER TABLE {table} ADD CONSTRAINT {name} FOREIGN KEY ({column}) "
                         f"REFERENCES {target} (id) ON DELETE {action};")
    return "\n".join(steps)


def upgrade() -> None:
    op.execute(_keys(new=True))
    op.execute(STAMP_REV.format(table="coalesce(TG_ARGV[0], TG_TABLE_NAME)"))
    op.execute(_triggers(with_argument=True))
    op.execute(TURN_CHANGED)


def downgrade() -> None:
    op.execute(TURN_CHANGED_0001)
    op.execute(_triggers(with_argument=False))
    op.execute(STAMP_REV.format(table="TG_TABLE_NAME"))
    op.execute(_keys(new=False))
