"""Stacks: create, update (dry run), delete, cancel; resources, events, outputs."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field
from sqlalchemy.exc import IntegrityError

from undercloud.api.app import get_context
from undercloud.api.context import Context
from undercloud.api.limits import LIMITS
from undercloud.api.workers import forwarded
from undercloud.errors import Conflict, Elsewhere, InvalidInput

router = APIRouter(prefix="/v1/stacks")
MAX_TIMEOUT = 7 * 24 * 3600.0  # a week: longer is a mistake (the default is an hour)
DEPTH = Query(0, ge=0, le=100)


class StackBody(BaseModel):
    name: str | None = Field(None, max_length=255)  # the engine checks the characters
    bundle: dict[str, Any] | None = None  # required, except for an update with `existing`
    parameters: dict[str, Any] = Field(default_factory=dict)
    rollback: bool = False
    timeout: float | None = Field(None, gt=0, le=MAX_TIMEOUT)  # seconds
    dry_run: bool = False
    existing: bool = False  # update: keep the stored bundle (unless given) and parameters, these over them
    environment: dict[str, Any] | None = None  # update: {parameter_defaults} after the bundle's environments
    max_fail: int = Field(0, ge=0, le=1_000_000)  # update: group members that may fail (each rolled back)


@router.get("")
def list_stacks(ctx: Context = Depends(get_context)):
    return ctx.stacks.list()


@router.post("", status_code=201)
def create_stack(body: StackBody, ctx: Context = Depends(get_context)):
    if body.bundle is None:
        raise InvalidInput("a create needs a bundle", "bundle")
    try:
        return ctx.stacks.create(body.name or "", body.bundle, body.parameters, rollback=body.rollback,
                                 timeout=body.timeout)
    except IntegrityError:  # created by another request since the engine checked the name
        raise Conflict(f"stack {body.name!r} already exists") from None


@router.get("/{stack}")
def show_stack(stack: str, wait: float = Query(0, ge=0, le=10), ctx: Context = Depends(get_context)):
    """`wait`: seconds to wait first for the operation under way to end (a long poll: a
    client following it learns the end at once, not at its next poll)."""
    if wait:
        ctx.stacks.wait(stack, wait)
    return ctx.stacks.show(stack)


@router.patch("/{stack}")
def update_stack(stack: str, body: StackBody, ctx: Context = Depends(get_context)):
    return ctx.stacks.update(stack, body.bundle, body.parameters, rollback=body.rollback,
                             timeout=body.timeout, dry_run=body.dry_run, existing=body.existing,
                             environment=body.environment, max_fail=body.max_fail)


@router.delete("/{stack}")
def delete_stack(stack: str, request: Request, ctx: Context = Depends(get_context)):
    try:
        return ctx.stacks.delete(stack)
    except Elsewhere as exc:  # another live worker runs its operation: that one deletes it
        return forwarded(ctx, exc, request, "DELETE", f"/v1/stacks/{quote(stack, safe='')}")


@router.post("/{stack}/cancel")
def cancel_stack(stack: str, request: Request, ctx: Context = Depends(get_context)):
    try:
        return ctx.stacks.cancel(stack)
    except Elsewhere as exc:
        return forwarded(ctx, exc, request, "POST", f"/v1/stacks/{quote(stack, safe='')}/cancel")


@router.get("/{stack}/resources")
def list_resources(stack: str, nested_depth: int = DEPTH, ctx: Context = Depends(get_context)):
    return ctx.stacks.resources(stack, nested_depth)


@router.get("/{stack}/resources/{path}")
def show_resource(stack: str, path: str, ctx: Context = Depends(get_context)):
    return ctx.stacks.resource(stack, path)


@router.get("/{stack}/events")
def list_events(stack: str, after: int = Query(0, ge=0, le=2**62),
                limit: int = Query(1000, ge=1, le=LIMITS.list_limit),
                nested_depth: int | None = Query(None, ge=0, le=100), ctx: Context = Depends(get_context)):
    return ctx.stacks.events(stack, after, limit, nested_depth)


@router.get("/{stack}/outputs")
def list_outputs(stack: str, ctx: Context = Depends(get_context)):
    return ctx.stacks.outputs(stack)


def startup(ctx: Context):
    """Resume the stack operations a stopped or killed service left IN_PROGRESS."""
    ctx.stacks.resume_all()
    return ctx.stacks.stop
