"""Settings come from MAXCLAW_-prefixed environment variables, typed, with sane defaults."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs
import pytest

from maxclaw.settings import Settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("MAXCLAW_"):
            monkeypatch.delenv(key)


def test_defaults() -> None:
    settings = Settings()
    assert settings.database_url is None  # serve then starts the embedded database
    assert settings.data_dir == Path(platformdirs.user_data_dir("maxclaw", appauthor=False))
    assert (settings.host, settings.port) == ("127.0.0.1", 8765)
    assert settings.max_body_bytes == 1024 * 1024


def test_prefixed_environment_is_read_and_typed(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("MAXCLAW_DATABASE_URL", "postgresql://u@db:5432/maxclaw")
    monkeypatch.setenv("MAXCLAW_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MAXCLAW_HOST", "0.0.0.0")
    monkeypatch.setenv("MAXCLAW_PORT", "9000")
    monkeypatch.setenv("MAXCLAW_LOG_JSON", "false")
    monkeypatch.setenv("MAXCLAW_RUN_SWEEPER", "0")
    settings = Settings()
    assert settings.database_url == "postgresql://u@db:5432/maxclaw"
    assert settings.data_dir == tmp_path
    assert (settings.host, settings.port) == ("0.0.0.0", 9000)
    assert settings.log_json is False
    assert settings.run_sweeper is False


def test_unprefixed_variables_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://someone-else@db/other")
    monkeypatch.setenv("PORT", "1")
    settings = Settings()
    assert settings.database_url is None
    assert settings.port == 8765


def test_explicit_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAXCLAW_PORT", "9000")
    assert Settings(port=9100).port == 9100


def test_a_malformed_value_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAXCLAW_PORT", "not-a-port")
    with pytest.raises(ValueError, match="port"):
        Settings()
