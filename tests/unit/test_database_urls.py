"""``database_of``: the database a URL names, whatever its query holds."""

from __future__ import annotations

import pytest

from maxclaw.db.urls import database_of, with_database

SOCKET = "postgresql://postgres:@/postgres?host=/dev/shm/maxclaw-test-pg/run/embedded-pg/pgdata"


@pytest.mark.parametrize(("url", "name"), [
    ("postgresql://postgres@127.0.0.1:5432/test", "test"),
    ("postgresql+psycopg://u:p@db:5432/max%20claw?sslmode=require", "max claw"),
    (SOCKET, "postgres"),  # the text after the last slash is "pgdata": not the database
    (with_database(SOCKET, "t_0123abcd"), "t_0123abcd"),
])
def test_the_database_is_the_path_not_the_last_slash(url: str, name: str) -> None:
    assert database_of(url) == name
