"""The README's "Operator CLI" table lists every command ``maxclaw`` has, and every command and
option it names exists (issue 28: ``token list|revoke``, ``push-worker`` and ``db …`` were
missing). The commands are read from the typer app ``maxclaw --help`` renders."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from typer.main import get_command

from maxclaw.cli import app

README = Path(__file__).resolve().parents[2] / "README.md"
WORD = re.compile(r"[a-z][a-z0-9-]*")


def app_commands() -> dict[tuple[str, ...], set[str]]:
    """Every leaf command's path (``("token", "revoke")``) and its option names."""
    out: dict[tuple[str, ...], set[str]] = {}

    def walk(command: Any, path: tuple[str, ...]) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                walk(sub, (*path, name))
        else:
            out[path] = {o for p in command.params for o in p.opts if o.startswith("--")}

    walk(get_command(app), ())
    return out


def readme_rows() -> list[tuple[tuple[str, ...], set[str]]]:
    """Each ``maxclaw …`` invocation in the table's first column: its path and options."""
    text = README.read_text()
    table = text[text.index("## Operator CLI"):]
    table = table[:table.index("\n## ", 1)]
    rows = []
    for line in table.splitlines():
        if not line.startswith("| `maxclaw"):
            continue
        first_cell = re.split(r"(?<!\\)\|", line)[1]
        for invocation in re.findall(r"`maxclaw ([^`]*)`", first_cell):
            words = invocation.split()
            path: list[str] = []
            for word in words:
                if not WORD.fullmatch(word):
                    break
                path.append(word)
            options = set(re.findall(r"--[a-z][a-z0-9-]*", invocation))
            rows.append((tuple(path), options))
    return rows


def test_every_command_is_in_the_readme() -> None:
    listed = {path for path, _ in readme_rows()}
    missing = sorted(" ".join(p) for p in app_commands() if p not in listed)
    assert missing == [], f"README.md's Operator CLI table lacks: {missing}"


def test_every_command_and_option_the_readme_names_exists() -> None:
    commands = app_commands()
    for path, options in readme_rows():
        name = f"maxclaw {' '.join(path)}"
        assert path in commands, f"README.md names `{name}`, which is not a command"
        unknown = options - commands[path]
        assert not unknown, f"`{name}` has no {sorted(unknown)}"


def test_the_check_reads_the_table() -> None:
    paths = {path for path, _ in readme_rows()}
    assert {("serve",), ("token", "create"), ("token", "revoke"), ("secrets", "purge"),
            ("secrets", "sweep")} <= paths
