"""Names people give to flavors, images and nodes: letters, digits, '.', '_', '-' (safe in
URLs, file names, podman and libvirt names), at most NAME_MAX characters."""

from __future__ import annotations

import re

from undercloud.errors import InvalidInput

NAME_MAX = 255
NAME = re.compile(r"[A-Za-z0-9._-]+")


def fit_name(name: str, limit: int = NAME_MAX) -> str:
    """`name` cut to `limit` characters as Heat cuts the names it makes (nested stacks,
    physical resource names): its start and its end, where a unique suffix is, kept."""
    if len(name) <= limit:
        return name
    return name[:limit // 2 - 1] + "-" + name[-(limit - limit // 2):]


def check_name(value: object, what: str, where: str = "name") -> str:
    """`value` if it is a good name, else one line saying what is wrong (never the whole value)."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} name must be a non-empty string", where)
    if len(value) > NAME_MAX:
        raise InvalidInput(f"{what} name of {len(value):,} characters; at most {NAME_MAX}", where)
    if not NAME.fullmatch(value):
        shown = value[:40].encode("unicode_escape").decode()
        raise InvalidInput(f"{what} name '{shown}{'…' if len(value) > 40 else ''}': only letters, digits, "
                           f"'.', '_' and '-'", where)
    return value
