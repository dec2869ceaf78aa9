"""Mustache as os-apply-config renders it (pystache with its JsonRenderer).

- no HTML escaping; `{{x}}`, `{{{x}}}` and `{{& x}}` are the same;
- non-string values are rendered as JSON (`true`, `5`, `{"a": 1}`), None as empty;
- dotted names (`{{a.b.c}}`) and `{{.}}`; a missing key renders empty;
- sections over lists, dicts and truthy values, inverted sections, comments, and
  standalone tag lines removed as the mustache spec says.
Partials and delimiter changes are not used by os-apply-config templates: refused.
"""

from __future__ import annotations

import json
import re
from typing import Any

TAG = re.compile(r"\{\{(\{[^}]*\}|[^}]*)\}\}")
_MISSING = object()


class MustacheError(ValueError):
    pass


def _tokens(text: str) -> list[tuple[str, str]]:
    """[(kind, value)]: kind '' for text, else one of '#^/!&' or 'v' (variable)."""
    out: list[tuple[str, str]] = []
    pos = 0
    for m in TAG.finditer(text):
        inner = m.group(1)
        if inner.startswith("{"):
            kind, name = "&", inner[1:-1].strip()
        elif inner[:1] and inner[0] in "#^/!&>=":
            kind, name = inner[0], inner[1:].strip()
        else:
            kind, name = "v", inner.strip()
        if kind in (">", "="):
            raise MustacheError(f"unsupported tag {{{{{inner}}}}} (partials and delimiters)")
        start, end = m.start(), m.end()
        if kind in ("#", "^", "/", "!"):
            # A standalone tag (only whitespace around it on its line) takes its line.
            ls = text.rfind("\n", 0, start) + 1
            le = text.find("\n", end)
            le_full = len(text) if le == -1 else le + 1
            if text[ls:start].strip() == "" and text[end:(le if le != -1 else len(text))].strip() == "" \
                    and ls >= pos:
                start, end = ls, le_full
        out.append(("", text[pos:start]))
        out.append((kind if kind != "&" else "v", name))
        pos = end
    out.append(("", text[pos:]))
    return out


def _parse(tokens: list[tuple[str, str]]) -> list:
    """Nest the tokens: sections become (kind, name, children)."""
    root: list = []
    stack: list[tuple[str, str, list]] = []
    cur = root
    for kind, value in tokens:
        if kind in ("#", "^"):
            node = (kind, value, [])
            cur.append(node)
            stack.append(node)
            cur = node[2]
        elif kind == "/":
            if not stack or stack[-1][1] != value:
                raise MustacheError(f"section close {{{{/{value}}}}} does not match its opening")
            stack.pop()
            cur = stack[-1][2] if stack else root
        elif kind == "!":
            continue
        else:
            cur.append((kind, value, None))
    if stack:
        raise MustacheError(f"section {{{{#{stack[-1][1]}}}}} is never closed")
    return root


def _lookup(stack: list[Any], name: str) -> Any:
    if name == ".":
        return stack[-1]
    first, *rest = name.split(".")
    for ctx in reversed(stack):
        if isinstance(ctx, dict) and first in ctx:
            value = ctx[first]
            break
    else:
        return _MISSING
    for part in rest:
        if isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return _MISSING
    return value


def _coerce(value: Any) -> str:
    if value is _MISSING or value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _render(nodes: list, stack: list[Any], out: list[str]) -> None:
    for kind, value, children in nodes:
        if kind == "":
            out.append(value)
        elif kind == "v":
            out.append(_coerce(_lookup(stack, value)))
        elif kind == "#":
            data = _lookup(stack, value)
            if data is _MISSING or not data:
                continue
            if isinstance(data, list):
                for item in data:
                    _render(children, stack + [item], out)
            else:
                _render(children, stack + [data], out)
        elif kind == "^":
            data = _lookup(stack, value)
            if data is _MISSING or not data:
                _render(children, stack, out)


def render(template: str, context: dict) -> str:
    out: list[str] = []
    _render(_parse(_tokens(template)), [context], out)
    return "".join(out)
