"""AES-256-GCM boxes (``cryptography``'s AEAD; nothing hand-rolled).

A box is ``nonce (12 bytes) || ciphertext || tag (16 bytes)``. The associated data binds a box
to its owner and thread, so a box copied onto another user's row does not open.
A key is 32 random bytes, written as unpadded base64url (43 characters). Its id is derived
from the key itself, so a wrong key can never be mistaken for the right one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

NONCE_BYTES = 12
TAG_BYTES = 16
KEY_BYTES = 32


class BoxError(Exception):
    """A box that does not open: truncated, altered, or sealed under another key or row."""


class KeyFormatError(ValueError):
    """A key that is not 32 bytes of base64url."""


@dataclass(frozen=True)
class Key:
    id: str
    material: bytes

    def __repr__(self) -> str:  # never print the material
        return f"Key(id={self.id!r})"


def key_id_of(material: bytes) -> str:
    """``k`` + 12 hex digits of SHA-256 over a label and the key (public; names the key)."""
    return "k" + hashlib.sha256(b"maxclaw secret key id\x00" + material).hexdigest()[:12]


def parse_key(text: str) -> Key:
    raw = text.strip()
    try:
        material = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
    except (binascii.Error, ValueError):
        raise KeyFormatError("a secret key must be base64url text") from None
    if len(material) != KEY_BYTES:
        raise KeyFormatError(f"a secret key must be {KEY_BYTES} bytes of base64url "
                             f"(got {len(material)}); make one with `maxclaw secrets new-key`")
    return Key(key_id_of(material), material)


def generate_key() -> str:
    """A fresh key as text (43 characters of base64url)."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).rstrip(b"=").decode()


def seal(key: Key, plaintext: bytes, aad: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key.material).encrypt(nonce, plaintext, aad)


def open_box(key: Key, box: bytes, aad: bytes) -> bytes:
    if len(box) < NONCE_BYTES + TAG_BYTES:
        raise BoxError("box too short")
    try:
        return AESGCM(key.material).decrypt(box[:NONCE_BYTES], box[NONCE_BYTES:], aad)
    except InvalidTag:
        raise BoxError("box does not open") from None
