"""Where the keys come from, in this order:

1. ``MAXCLAW_SECRET_KEY``: one key, or several separated by commas (the first seals new boxes,
   the others only open old ones);
2. ``MAXCLAW_SECRET_KEY_FILE``: a file with one key per line (``#`` comments allowed), the
   first the sealing key;
3. ``<data dir>/secret.key`` if it exists;
4. on the embedded database's first start, ``serve`` creates that file (mode 0600).

A key file readable by group or others is refused. A file-backed keyring re-reads its file when
it changes (checked at most once a second), so ``maxclaw secrets rotate`` can add a key while
servers run.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path

from maxclaw.errors import MaxclawError
from maxclaw.secrets.crypto import Key, KeyFormatError, generate_key, parse_key

KEY_FILE_NAME = "secret.key"
RELOAD_S = 1.0
NO_KEY = ("no secret key: set MAXCLAW_SECRET_KEY (make one with `maxclaw secrets new-key`) or "
          "MAXCLAW_SECRET_KEY_FILE")
FILE_HEADER = ("# MaxClaw secret keys: the first line seals new secrets, later lines open old\n"
               "# ones. Back this file up: secrets sealed under a lost key are gone.\n")


class KeyringError(MaxclawError):
    """The keys cannot be loaded (missing, malformed, loose permissions)."""

    code = "secret_key"
    http_status = 503


def read_key_file(path: Path) -> list[Key]:
    """The keys of a key file, sealing key first; refuses a file others can read."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise KeyringError(f"secret key file {path} does not exist") from None
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise KeyringError(
            f"secret key file {path} has mode {stat.S_IMODE(st.st_mode):04o}: it must be "
            f"readable by its owner only (chmod 600 {path})")
    try:
        keys = parse_keys(line for line in path.read_text().splitlines()
                          if line.strip() and not line.lstrip().startswith("#"))
    except KeyFormatError as exc:
        raise KeyringError(f"secret key file {path}: {exc}") from None
    if not keys:
        raise KeyringError(f"secret key file {path} holds no key")
    return keys


def parse_keys(texts: Iterable[str]) -> list[Key]:
    keys: list[Key] = []
    for text in texts:
        key = parse_key(text)
        if key.id not in {k.id for k in keys}:
            keys.append(key)
    return keys


def write_key_file(path: Path, keys: list[str]) -> None:
    """Write (or replace) a key file atomically, owner-only from its first byte."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, (FILE_HEADER + "".join(k + "\n" for k in keys)).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def key_file_texts(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


class Keyring:
    """The keys this process holds: one sealing key, any number of opening keys."""

    def __init__(self, keys: list[Key], *, path: Path | None = None,
                 source: str = "MAXCLAW_SECRET_KEY") -> None:
        if not keys:
            raise KeyringError(NO_KEY)
        self._keys = keys
        self.path = path
        self.source = str(path) if path else source
        self._mtime = path.stat().st_mtime_ns if path else 0
        self._checked = time.monotonic()

    @property
    def primary(self) -> Key:
        self.refresh()
        return self._keys[0]

    def get(self, key_id: str) -> Key | None:
        self.refresh()
        return next((k for k in self._keys if k.id == key_id), None)

    @property
    def ids(self) -> list[str]:
        self.refresh()
        return [k.id for k in self._keys]

    def refresh(self, force: bool = False) -> None:
        """Re-read a key file that changed (at most once a second unless forced). A file that
        turns unreadable keeps the keys already loaded."""
        if self.path is None:
            return
        now = time.monotonic()
        if not force and now - self._checked < RELOAD_S:
            return
        self._checked = now
        try:
            mtime = self.path.stat().st_mtime_ns
            if mtime != self._mtime:
                self._keys = read_key_file(self.path)
                self._mtime = mtime
        except (OSError, KeyringError):
            return


def load_keyring(secret_key: str | None, key_file: Path | None, data_dir: Path, *,
                 create: bool = False) -> tuple[Keyring, Path | None]:
    """The keyring from settings; ``create`` makes ``<data dir>/secret.key`` when no key is
    configured anywhere. Returns the keyring and the path of a file it created (else None)."""
    if secret_key and secret_key.strip():
        try:
            keys = parse_keys(part for part in secret_key.replace(",", " ").split())
        except KeyFormatError as exc:
            raise KeyringError(f"MAXCLAW_SECRET_KEY: {exc}") from None
        return Keyring(keys), None
    if key_file is not None:
        return Keyring(read_key_file(key_file), path=key_file), None
    default = data_dir / KEY_FILE_NAME
    if default.exists():
        return Keyring(read_key_file(default), path=default), None
    if not create:
        raise KeyringError(NO_KEY)
    write_key_file(default, [generate_key()])
    return Keyring(read_key_file(default), path=default), default
