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


class LabBody(BaseModel):
    nodes: int = Field(default=2, ge=1, le=100)
    flavor: str | None = Field(default=None, max_length=255)
    network: str | None = Field(default=None, max_length=255)
    image: str | None = Field(default=None, max_length=255)


@router.post("/v1/clouds/{name}/lab")
def cloud_lab_up(name: str, body: LabBody, ctx: Context = Depends(get_context)):
    """Empty servers in the cloud to enrol as nodes (driver openstack); their instackenv."""
    return ctx.cloud_lab.up(name, body.nodes, body.flavor, body.network, body.image)


@router.delete("/v1/clouds/{name}/lab")
def cloud_lab_down(name: str, ctx: Context = Depends(get_context)):
    return {"removed": ctx.cloud_lab.down(name)}
