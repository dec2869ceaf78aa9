"""Limits with a default and an environment variable each (`UNDERCLOUD_MAX_...`), read once
when a table of them is made; the template/engine limits (orchestration/limits.py) and the
API's (api/limits.py) are two such tables. A limit that is hit is one line naming it and
its variable; tests and benchmarks change limits with `override()`."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from undercloud.errors import InvalidInput


@dataclass(frozen=True)
class Limit:
    name: str
    env: str
    default: int
    what: str  # what is limited and what happens beyond it (docs/architecture.md lists these)


class LimitSet:
    """The limits of a table in force, as attributes (cheap to read on hot paths)."""

    def __init__(self, table: tuple[Limit, ...], environ: Mapping[str, str] = os.environ):
        self._table = {x.name: x for x in table}
        for x in table:
            raw = environ.get(x.env)
            value = x.default
            if raw not in (None, ""):
                try:
                    value = int(raw.replace("_", ""))
                except ValueError:
                    value = 0
                if value < 1:
                    raise InvalidInput(f"{x.env}={raw!r}: expected a whole number of 1 or more")
            setattr(self, x.name, value)

    def variable(self, name: str) -> str:
        """The environment variable that sets limit `name`."""
        return self._table[name].env

    def exceeded(self, name: str, what: str, amount: int | None = None) -> str:
        """The one-line message for `what` going over limit `name`."""
        n = f" ({amount:,})" if amount is not None else ""
        return (f"{what}{n} is more than the limit of {getattr(self, name):,} "
                f"(set {self._table[name].env} to change it)")

    @contextmanager
    def override(self, **values: int) -> Iterator[None]:
        """Change limits for a block (tests, benchmarks); restored after."""
        old = {k: getattr(self, k) for k in values}
        for k, v in values.items():
            if k not in self._table:
                raise KeyError(k)
            setattr(self, k, v)
        try:
            yield
        finally:
            for k, v in old.items():
                setattr(self, k, v)
