"""/v1/overcloud-state: what `undercloud deploy` keeps of each overcloud between runs
(store/overcloud.py): its secrets among them, so admin only."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from undercloud.api.app import get_context
from undercloud.api.context import Context

router = APIRouter(prefix="/v1/overcloud-state")


class ValueBody(BaseModel):
    value: Any


class MergeBody(BaseModel):
    given: dict[str, Any] = Field(default_factory=dict)  # set as they are
    missing: dict[str, Any] = Field(default_factory=dict)  # set only where nothing is kept yet


@router.get("")
def by_name(name: str, ctx: Context = Depends(get_context)):
    """stack -> its value of `name`."""
    return ctx.overcloud_states.by_name(name)


@router.get("/{stack}")
def get_state(stack: str, ctx: Context = Depends(get_context)):
    return ctx.overcloud_states.get(stack)


@router.put("/{stack}/{name}")
def put_state(stack: str, name: str, body: ValueBody, ctx: Context = Depends(get_context)):
    return ctx.overcloud_states.put(stack, name, body.value)


@router.patch("/{stack}/{name}")
def merge_state(stack: str, name: str, body: MergeBody, ctx: Context = Depends(get_context)):
    return ctx.overcloud_states.merge(stack, name, body.given, body.missing)


@router.delete("/{stack}")
def forget_state(stack: str, ctx: Context = Depends(get_context)):
    return {"removed": ctx.overcloud_states.forget(stack)}
