"""Comparing a secret a caller presents (a token, a boot secret) with the expected one: in
constant time, and whatever the caller sent. HTTP headers arrive as Latin-1 text and paths
as UTF-8 text, and `hmac.compare_digest` refuses a str with non-ASCII characters
(TypeError): both sides are compared as bytes instead, so such a value is only wrong."""

from __future__ import annotations

import hmac
import secrets

# The start of a server token whose agent was given the undercloud's https URL and CA: such a
# token is refused over plain HTTP (api/guard.py), while an agent configured before TLS (a
# token without it) keeps working until its server is rebuilt.
TLS_SERVER = "tls-"


def server_token(tls: bool) -> str:
    """A new token for a server's agent; `tls`: its agent speaks https (TLS_SERVER)."""
    return (TLS_SERVER if tls else "") + secrets.token_urlsafe(32)


def same(given: str | bytes | None, expected: str | bytes) -> bool:
    if given is None:
        return False
    return hmac.compare_digest(_raw(given), _raw(expected))


def _raw(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")
