"""/v1/clouds: OpenStack clouds known by name (provisioning/clouds.py). Admin only."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from undercloud.api.app import get_context
from undercloud.api.context import Context

router = APIRouter()


class CloudBody(BaseModel):
    name: str
    config: dict[str, Any]  # a clouds.yaml entry
    source: str = Field(default="", max_length=1024)


@router.get("/v1/clouds")
def list_clouds(ctx: Context = Depends(get_context)):
    return ctx.clouds.list()


@router.post("/v1/clouds", status_code=201)
def add_cloud(body: CloudBody, ctx: Context = Depends(get_context)):
    return ctx.clouds.add(body.name, body.config, body.source)


@router.get("/v1/clouds/{name}")
def show_cloud(name: str, check: bool = False, ctx: Context = Depends(get_context)):
    return ctx.clouds.get(name, check=check)


@router.delete("/v1/clouds/{name}")
def remove_cloud(name: str, ctx: Context = Depends(get_context)):
    return ctx.clouds.remove(name)
