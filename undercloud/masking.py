"""Masking secrets in what the undercloud shows: the one place that replaces a secret by
`******`, by its text (in a message, or anywhere inside a value: strings in lists and
maps, keys included) or by the key it is under (`mask_keys`). Which texts or keys are
secret is the caller's knowledge: a template's hidden values
(orchestration/template/parameters.secret_texts), a node's BMC password
(provisioning/drivers), a cloud's credentials (provisioning/clouds). The agent keeps its
own copy (it imports only itself)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

MASK = "******"
CUT = "…"  # what a text cut to a limit ends with (orchestration/limits.cut)


class Mask:
    """Masks a set of secrets (ordered once: the longest first, as one may hold another)."""

    __slots__ = ("order",)

    def __init__(self, secrets: Collection[str] = ()):
        self.order = tuple(sorted((t for t in secrets if t), key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self.order)

    def text(self, text: str) -> str:
        """`text` with every secret masked, also where a cut ('…') ended one early (its
        first three characters or more before the cut)."""
        if not self.order or not text:
            return text
        for t in self.order:
            if t in text:
                text = text.replace(t, MASK)
        if CUT not in text:
            return text
        parts = text.split(CUT)
        for i in range(len(parts) - 1):
            head = parts[i]
            for t in self.order:
                if len(t) < 3:
                    continue
                pos = head.find(t[:3], max(0, len(head) - len(t)))
                while pos != -1:
                    if t.startswith(head[pos:]):
                        head = head[:pos] + MASK
                        break
                    pos = head.find(t[:3], pos + 1)
            parts[i] = head
        return CUT.join(parts)

    def value(self, value: Any) -> Any:
        """`value` (as JSON holds it) with every secret masked wherever it shows: in each
        string, map key and list item; a number whose text is a secret becomes the mask."""
        if not self.order:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        if isinstance(value, int | float) and not isinstance(value, bool) and str(value) in self.order:
            return MASK
        return value


def mask_text(text: str, secrets: Collection[str]) -> str:
    """`text` with every one of `secrets` masked (see Mask.text)."""
    return Mask(secrets).text(text) if secrets and text else text


def mask_value(value: Any, secrets: Collection[str]) -> Any:
    """`value` with every one of `secrets` masked (see Mask.value)."""
    return Mask(secrets).value(value) if secrets else value


def mask_keys(value: Any, secret_key: Callable[[str], bool]) -> Any:
    """`value` with the value of every map entry whose key names a secret (`secret_key`:
    a password, token...) masked, at any depth; empty ones stay empty (nothing to hide)."""
    if isinstance(value, dict):
        return {k: MASK if isinstance(k, str) and secret_key(k) and v not in (None, "")
                else mask_keys(v, secret_key) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_keys(v, secret_key) for v in value]
    return value
