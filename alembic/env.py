"""Alembic environment. Migrations run synchronously through psycopg (plain SQL scripts with
several statements need the simple query protocol, which asyncpg's SQLAlchemy dialect lacks)."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine, pool

from maxclaw.db.schema import include_object, metadata
from maxclaw.db.urls import sqlalchemy_url

config = context.config
target_metadata = metadata


def _url() -> str:
    url = config.attributes.get("database_url") or os.environ.get("MAXCLAW_DATABASE_URL")
    if not url:
        raise SystemExit("no database URL: pass --database-url or set MAXCLAW_DATABASE_URL")
    return sqlalchemy_url(url)


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        # include_object: the search indexes' shape depends on the server's extensions
        context.configure(connection=connection, target_metadata=target_metadata,
                          compare_type=True, include_object=include_object)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()
