"""Database URL helpers: one URL form for users, the right driver prefix for each library."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit


def plain_url(url: str) -> str:
    """``postgresql://…`` without a driver suffix (what asyncpg and libpq take)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"not a database URL: {redact(url)}")
    if scheme.startswith("postgresql+") or scheme in ("postgres", "postgresql"):
        return "postgresql://" + rest
    raise ValueError(f"not a PostgreSQL URL: {redact(url)}")


def sqlalchemy_url(url: str) -> str:
    """The URL for SQLAlchemy with the psycopg (v3) driver, used by alembic."""
    return "postgresql+psycopg://" + plain_url(url).removeprefix("postgresql://")


def with_database(url: str, database: str) -> str:
    """The same server, another database name (query string kept, e.g. a socket ``host``)."""
    parts = urlsplit(plain_url(url))
    return parts._replace(path="/" + database).geturl()


def database_of(url: str) -> str:
    """The database a URL names (``with_database``'s inverse). The path, not the text after the
    last slash: a socket URL's query holds slashes too (``…/t_1?host=/tmp/pgdata``)."""
    return unquote(urlsplit(plain_url(url)).path.lstrip("/"))


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(":" + parts.password + "@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url
