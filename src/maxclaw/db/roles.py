"""The service's database role: data rights only, no DDL (issue 14).

``serve`` needs to read and write rows; it never needs to create, alter or drop anything, so a
stolen connection string (or an injected statement) cannot change or destroy the schema.
``maxclaw migrate`` runs as the schema's owner (``MAXCLAW_MIGRATE_DATABASE_URL``) and, with
``MAXCLAW_APP_ROLE`` set, grants that role afterwards; ``maxclaw db grant-app-role`` does the
grant alone. The statements are the ones docs/operations.md ("Database roles") lists for
operators who would rather run them by hand.

The role gets: ``CONNECT`` on the database, ``USAGE`` on ``public``; ``SELECT, INSERT,
UPDATE, DELETE`` on every table (``SELECT`` only on ``alembic_version``, which ``serve``
reads to check the schema); ``USAGE, SELECT`` on every sequence (identity columns, the realtime
``rev``); the same by default on whatever the owner creates in ``public`` later; and, where the
owner may give it, ``pg_read_all_stats`` (the realtime horizon reads other databases'
transactions in ``pg_stat_activity``; without it a long transaction elsewhere in the cluster
holds live updates back, which is safe, only slower). Not ``TRUNCATE``, ``REFERENCES`` or
``TRIGGER``, and not ``CREATE`` on the schema or the database: PostgreSQL 15 already withholds
``CREATE`` on ``public`` from ``PUBLIC``; older databases get it revoked here.

Role names and passwords cannot be bound as parameters in these statements, so they are
quoted by psycopg (``sql.Identifier``/``sql.Literal``), never formatted into the text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from maxclaw.db.database import fetch_once
from maxclaw.db.urls import plain_url

if TYPE_CHECKING:
    import psycopg

ROLE_FACTS = """
SELECT r.rolsuper, r.rolname = current_user AS is_me,
       (SELECT count(*) FROM pg_class c WHERE c.relowner = r.oid) AS owns
  FROM pg_roles r WHERE r.rolname = %s
"""
CREATE_ROLE = ("CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION "
               "NOBYPASSRLS")
GRANTS = (
    "REVOKE CREATE ON SCHEMA public FROM PUBLIC",  # a no-op from PostgreSQL 15 on
    "GRANT CONNECT ON DATABASE {database} TO {role}",
    "GRANT USAGE ON SCHEMA public TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
    "REVOKE INSERT, UPDATE, DELETE ON TABLE public.alembic_version FROM {role}",
    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}",
    "ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public "
    "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role}",
    "ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public "
    "GRANT USAGE, SELECT ON SEQUENCES TO {role}",
)
READ_ALL_STATS = "GRANT pg_read_all_stats TO {role}"


class RoleError(Exception):
    """The role cannot be the service's DDL-less role (one line why)."""


@dataclass(frozen=True, slots=True)
class Granted:
    role: str
    created: bool
    read_all_stats: bool  # False: the owner may not grant it (see the module docstring)


def grant_app_role(owner_url: str, role: str, password: str | None = None) -> Granted:
    """Create ``role`` if it does not exist (LOGIN, no other attribute; ``password`` when
    given), then grant it data rights only on this database, in one transaction. Run as the
    schema's owner; idempotent."""
    import psycopg  # here, not at the top: serve's start checks its role without psycopg
    from psycopg import sql

    if not role or role.startswith("pg_"):
        raise RoleError(f"{role!r} cannot be the service's role")
    with psycopg.connect(plain_url(owner_url)) as conn, conn.transaction():
        names = {"role": sql.Identifier(role),
                 "database": sql.Identifier(_one(conn, "SELECT current_database()")),
                 "owner": sql.Identifier(_one(conn, "SELECT current_user"))}
        facts = conn.execute(ROLE_FACTS, (role,)).fetchone()
        if facts is not None:
            superuser, is_me, owns = facts
            if superuser or is_me or owns:
                raise RoleError(
                    f"role {role!r} is {'a superuser' if superuser else 'the owner'}"
                    f"{f' of {owns} relations' if owns and not is_me else ''}: the service's "
                    "role must own nothing and have no DDL rights; name another role")
        else:
            conn.execute(sql.SQL(CREATE_ROLE).format(**names))
        if password is not None:
            conn.execute(sql.SQL("ALTER ROLE {role} PASSWORD {password}").format(
                password=sql.Literal(password), **names))
        for statement in GRANTS:
            conn.execute(sql.SQL(statement).format(**names))
        try:
            with conn.transaction():  # a savepoint: the rest stands if the owner may not
                conn.execute(sql.SQL(READ_ALL_STATS).format(**names))
            stats = True
        except psycopg.errors.InsufficientPrivilege:
            stats = False
    return Granted(role, facts is None, stats)


SERVING_ROLE = """
SELECT current_user, r.rolsuper,
       (SELECT count(*) FROM pg_class c WHERE c.relowner = r.oid
           AND c.relnamespace = 'public'::regnamespace) AS owns
  FROM pg_roles r WHERE r.rolname = current_user
"""


def privileged_role(url: str) -> str | None:
    """Why the role ``url`` connects as is more than ``serve`` needs (a superuser, or the
    owner of the schema's tables: it may alter or drop them), in one line; None when it holds
    data rights only."""
    rows = fetch_once(url, SERVING_ROLE)
    if not rows:
        return None
    user, superuser, owns = rows[0]
    if not superuser and not owns:
        return None
    what = "a superuser" if superuser else f"the owner of {owns} tables"
    return (f"serve connects as {user!r}, {what}: a stolen connection string or an injected "
            "statement could change or drop the schema. Serve as a role with data rights "
            "only (MAXCLAW_APP_ROLE, docs/operations.md \"Database roles\")")


def _one(conn: psycopg.Connection[Any], query: str) -> str:
    row = conn.execute(query).fetchone()
    assert row is not None
    return str(row[0])
