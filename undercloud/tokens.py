"""Comparing a secret a caller presents (a token, a boot secret) with the expected one: in
constant time, and whatever the caller sent. HTTP headers arrive as Latin-1 text and paths
as UTF-8 text, and `hmac.compare_digest` refuses a str with non-ASCII characters
(TypeError): both sides are compared as bytes instead, so such a value is only wrong."""

from __future__ import annotations

import hmac


def same(given: str | bytes | None, expected: str | bytes) -> bool:
    if given is None:
        return False
    return hmac.compare_digest(_raw(given), _raw(expected))


def _raw(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")
