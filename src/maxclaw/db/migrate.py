"""Apply alembic migrations programmatically (``maxclaw migrate``, ``serve`` at start, tests)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config


def alembic_dir() -> Path:
    """The migration scripts: ``alembic/`` in a checkout, ``maxclaw/_alembic`` in a wheel."""
    packaged = Path(__file__).resolve().parent.parent / "_alembic"
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[3] / "alembic"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError("alembic migration scripts not found next to the maxclaw package")


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(alembic_dir()))
    cfg.attributes["database_url"] = database_url
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    """``alembic upgrade <revision>`` against ``database_url``."""
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    """``alembic downgrade <revision>`` against ``database_url``."""
    command.downgrade(alembic_config(database_url), revision)
