"""Secrets at rest: store columns that hold BMC passwords, stack parameters (hidden ones
among them), templates and environments, rendered configs and resource data (wait
condition tokens) are Fernet-encrypted (AES-128-CBC + HMAC-SHA256) with one key per
store, kept in a file of its own (mode 600; `<home>/store.key` by default).

The key never enters the database: a copy of the database (a backup, a stolen file)
without the key file shows those columns as opaque tokens. Values are JSON inside the
token, so the columns behave as the JSON columns they replace.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy import JSON
from sqlalchemy.types import TypeDecorator

from undercloud.config import write_once
from undercloud.errors import UndercloudError

KEY_FILE = "store.key"
ATTR = "undercloud_crypto"  # where a Store hangs its Crypto on its engine's dialect


# Small values (a node's driver_info: about 250 characters as a token) are read again and
# again: their plain text is kept, at most CACHE_ENTRIES of them (about 35 MB at worst).
CACHE_TOKEN_CHARS, CACHE_ENTRIES = 1024, 20000


class Crypto:
    def __init__(self, key: bytes, source: str = "an ephemeral key"):
        self.fernet = Fernet(key)
        self.source = source
        self._mac_key = key
        # A power-sync pass reads every node's driver_info: the same tokens each pass.
        self._cached = lru_cache(maxsize=CACHE_ENTRIES)(self._plain)

    def encrypt(self, value: Any) -> str:
        # ensure_ascii: a lone surrogate is stored as its escape, never as invalid UTF-8
        return self.fernet.encrypt(json.dumps(value, separators=(",", ":")).encode()).decode()

    def derived(self, purpose: str) -> str:
        """A secret for `purpose` that every holder of this key can make and nobody else."""
        return hmac.new(self._mac_key, purpose.encode(), hashlib.sha256).hexdigest()

    def decrypt(self, token: str) -> Any:
        if not isinstance(token, str):
            raise UndercloudError(f"cannot decrypt the store with {self.source}: a value is not encrypted")
        return json.loads(self._cached(token) if len(token) <= CACHE_TOKEN_CHARS else self._plain(token))

    def _plain(self, token: str) -> bytes:
        try:
            return self.fernet.decrypt(token.encode())
        except InvalidToken:
            raise UndercloudError(f"cannot decrypt the store with {self.source}: not the key this store "
                                  f"was written with") from None


def load_key(path: Path) -> bytes:
    """The key in `path`, made (mode 600) when there is none yet; two processes making it at
    once agree on one (hard link of a complete file, so nobody reads a half-written key)."""
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    write_once(path, Fernet.generate_key() + b"\n")
    return _read(path)


def _read(path: Path) -> bytes:
    key = path.read_bytes().strip()
    try:
        Fernet(key)
    except ValueError:
        raise UndercloudError(f"{path}: not a store key (32 url-safe base64 bytes)") from None
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)
    return key


def crypto_of(dialect) -> Crypto:
    c = getattr(dialect, ATTR, None)
    if c is None:
        raise UndercloudError("the store was opened without its key")
    return c


class Encrypted(TypeDecorator):
    """A JSON column whose value is stored as one Fernet token (a JSON string). An empty map
    or list holds nothing to hide and is stored as itself (most resources' metadata and
    attributes are empty: no cipher work for them); anything else, strings included, is a
    token, so a stored string is always a token."""

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is None or value == {} or value == []:
            return value
        return crypto_of(dialect).encrypt(value)

    def process_result_value(self, value, dialect):
        if value is None or value == {} or value == []:
            return value
        return crypto_of(dialect).decrypt(value)
