"""What `undercloud deploy` keeps of an overcloud between runs, in the store so that every
worker (and a CLI of any home) sees the same: the generated secrets, the deployed image
sets, the last deploy's digest and identifier. Encrypted at rest, as stack parameters are.

Secrets are merged, never replaced: generated ones only fill names not kept yet, so two
deploys racing to make the first set agree on one."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Float, String, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from undercloud.errors import InvalidInput
from undercloud.names import check_name
from undercloud.store.crypto import Encrypted
from undercloud.store.db import Base, Store

NAMES = ("secrets", "deployed-sets", "last-deploy")


class OvercloudState(Base):
    __tablename__ = "overcloud_state"

    stack: Mapped[str] = mapped_column(String(255), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[Any] = mapped_column(Encrypted, nullable=True)
    updated_at: Mapped[float] = mapped_column(Float, default=time.time)


def _checked(stack: str, name: str | None = None) -> None:
    check_name(stack, "stack", "stack")
    if name is not None and name not in NAMES:
        raise InvalidInput(f"unknown overcloud state {name[:64]!r} (one of {', '.join(NAMES)})", "name")


class OvercloudStates:
    def __init__(self, store: Store):
        self.store = store

    def get(self, stack: str) -> dict[str, Any]:
        """name -> value of everything kept for `stack` ({} for none)."""
        _checked(stack)
        with self.store.session() as s:
            return {r.name: r.value for r in s.scalars(select(OvercloudState).where(OvercloudState.stack == stack))}

    def by_name(self, name: str) -> dict[str, Any]:
        """stack -> its value of `name`, for every stack that keeps one."""
        _checked("any", name)
        with self.store.session() as s:
            return {r.stack: r.value for r in s.scalars(select(OvercloudState).where(OvercloudState.name == name))}

    def put(self, stack: str, name: str, value: Any) -> Any:
        _checked(stack, name)
        self._write(stack, name, lambda _old: value)
        return value

    def merge(self, stack: str, name: str, given: dict[str, Any], missing: dict[str, Any]) -> dict[str, Any]:
        """The map kept as `name`, with `given` set and `missing` filling only absent names;
        written in one transaction. Returns what is kept now."""
        _checked(stack, name)

        def merged(old):
            out = dict(old) if isinstance(old, dict) else {}
            out.update(given)
            for k, v in missing.items():
                if out.get(k) in (None, ""):
                    out[k] = v
            return out

        return self._write(stack, name, merged)

    def forget(self, stack: str) -> int:
        _checked(stack)
        with self.store.engine.begin() as conn:
            return conn.execute(delete(OvercloudState).where(OvercloudState.stack == stack)).rowcount

    def _write(self, stack: str, name: str, change) -> Any:
        try:
            return self._write_once(stack, name, change)
        except IntegrityError:  # two first writes at once: the other inserted; change what it wrote
            return self._write_once(stack, name, change)

    def _write_once(self, stack: str, name: str, change) -> Any:
        with self.store.session() as s:
            row = s.execute(select(OvercloudState).where(OvercloudState.stack == stack, OvercloudState.name == name)
                            .with_for_update()).scalar_one_or_none()
            if row is None:
                value = change(None)
                s.add(OvercloudState(stack=stack, name=name, value=value, updated_at=time.time()))
            else:
                value = row.value = change(row.value)
                row.updated_at = time.time()
        return value
