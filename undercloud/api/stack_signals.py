"""Signals to stack resources (wait condition handles) from nodes: no admin token, the
resource's own signal token (X-Signal-Token) instead."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Header, Path

from undercloud.api.app import get_context
from undercloud.api.context import Context
from undercloud.errors import NotFound

PUBLIC = True
router = APIRouter(prefix="/v1/stacks")


@router.post("/{stack_id}/resources/{resource}/signal", status_code=204)
def signal(stack_id: str = Path(pattern=r"^[A-Za-z0-9-]{1,64}$"),  # a stack's id (refusals quote it)
           resource: str = Path(max_length=255), payload: Any = Body(default=None),
           x_signal_token: str | None = Header(default=None),
           x_undercloud_forwarded: str | None = Header(default=None), ctx: Context = Depends(get_context)):
    if not x_signal_token:
        raise NotFound(f"resource {resource!r} not found in stack {stack_id}")
    ctx.stacks.signal(stack_id, resource, payload if payload is not None else {}, token=x_signal_token,
                      forwarded=x_undercloud_forwarded is not None)
