"""The overcloud's secrets and the private files of a stack's directory.

Secrets (passwords, fernet and credential keys) are the ones the enabled services declare
(`secrets: {Name: password|fernet|store-key}`), generated once per stack and kept in the store
(state.py) so re-deploys keep them; one set in an environment wins and is kept. Never
printed. The stack's directory in the home holds only what a deploy writes again (its plan,
clouds.yaml).
"""

from __future__ import annotations

import base64
import os
import re
import secrets as _secrets
import string
from pathlib import Path
from typing import Any

from undercloud.errors import InvalidInput


def _password(n: int = 24) -> str:
    alphabet = string.ascii_letters + string.digits
    return "".join(_secrets.choice(alphabet) for _ in range(n))


def _fernet_key() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


def _store_key() -> str:
    """The undercloud's own store key (not generated): what a node that joins the undercloud's
    workers (a hypervisor host) decrypts the shared store with."""
    from undercloud.config import Home

    path = Home.current().store_key_file()
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise InvalidInput(f"cannot read the undercloud's store key for a service that joins its workers: "
                           f"{exc.strerror} (deploy from the service's home, or set UNDERCLOUD_STORE_KEY)",
                           str(path)) from None


GENERATORS = {"password": _password, "fernet": _fernet_key, "store-key": _store_key}


def stack_dir(home: Path, stack: str) -> Path:
    if not re.match(r"^[A-Za-z][A-Za-z0-9_.-]*$", stack):
        raise InvalidInput("a stack name starts with a letter and has letters, digits, _ . - only", "--stack")
    return home / "overcloud" / stack


def missing_secrets(kept: dict[str, Any], kinds: dict[str, str]) -> dict[str, str]:
    """A new value for each name of `kinds` (name -> password | fernet) that `kept` lacks."""
    return {k: GENERATORS[kind]() for k, kind in kinds.items() if kept.get(k) in (None, "")}


def secrets_given(environments: list[Path], names: set[str]) -> dict[str, str]:
    """The secrets of `names` your environments set (parameters or parameter_defaults; the
    last wins)."""
    out: dict[str, str] = {}
    from undercloud.orchestration.template.source import TemplateError, parse_yaml

    for e in environments:
        try:
            doc = parse_yaml(e.read_text(), str(e)) or {}  # the template loader's limits (aliases, depth)
        except (OSError, TemplateError):
            continue  # the template loader reports it with file and line
        if not isinstance(doc, dict):
            continue
        for section in ("parameter_defaults", "parameters"):
            values = doc.get(section) or {}
            if isinstance(values, dict):
                out.update({k: str(v) for k, v in values.items() if k in names and v not in (None, "")})
    return out
