"""/v1/nodes: inventory, lifecycle verbs, power, boot device, maintenance; /v1/scheduler.

Responses never carry a BMC password (driver_info is masked in `provisioning.nodes.view`).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from undercloud.api.app import get_context
from undercloud.api.context import Context
from undercloud.provisioning.scheduler import Request

router = APIRouter()
_ctx = get_context


class ImportBody(BaseModel):
    filename: str = "instackenv.json"
    content: str


class VerbBody(BaseModel):
    verb: str


class PowerBody(BaseModel):
    action: str


class BootBody(BaseModel):
    device: str
    persistent: bool = False


class MaintenanceBody(BaseModel):
    reason: str | None = None


class CallbackBody(BaseModel):
    ok: bool = True
    error: str | None = None
    inventory: dict | None = None


@router.get("/v1/nodes")
def list_nodes(provision_state: str | None = None, maintenance: bool | None = None, ctx: Context = Depends(_ctx)):
    return ctx.nodes.list(provision_state, maintenance)


@router.post("/v1/nodes/import", status_code=201)
def import_nodes(body: ImportBody, ctx: Context = Depends(_ctx)):
    return ctx.nodes.import_nodes(body.content, body.filename)


@router.get("/v1/nodes/{ident}")
def show_node(ident: str, ctx: Context = Depends(_ctx)):
    return ctx.nodes.get(ident)


@router.get("/v1/nodes/{ident}/events")
def node_events(ident: str, limit: int = 50, ctx: Context = Depends(_ctx)):
    return ctx.nodes.events(ident, limit)


@router.delete("/v1/nodes/{ident}", status_code=204)
def delete_node(ident: str, ctx: Context = Depends(_ctx)):
    ctx.nodes.delete(ident)


@router.post("/v1/nodes/{ident}/provision")
def provision(ident: str, body: VerbBody, ctx: Context = Depends(_ctx)):
    return ctx.nodes.act(ident, body.verb)


@router.post("/v1/nodes/{ident}/callback")
def callback(ident: str, body: CallbackBody, ctx: Context = Depends(_ctx)):
    return ctx.nodes.callback(ident, body.ok, body.error, body.inventory)


@router.post("/v1/nodes/{ident}/power")
def power(ident: str, body: PowerBody, ctx: Context = Depends(_ctx)):
    return ctx.nodes.set_power(ident, body.action)


@router.put("/v1/nodes/{ident}/boot-device")
def boot_device(ident: str, body: BootBody, ctx: Context = Depends(_ctx)):
    return ctx.nodes.set_boot_device(ident, body.device, body.persistent)


@router.put("/v1/nodes/{ident}/maintenance")
def maintenance_set(ident: str, body: MaintenanceBody, ctx: Context = Depends(_ctx)):
    return ctx.nodes.set_maintenance(ident, True, body.reason)


@router.delete("/v1/nodes/{ident}/maintenance")
def maintenance_unset(ident: str, ctx: Context = Depends(_ctx)):
    return ctx.nodes.set_maintenance(ident, False)


@router.post("/v1/nodes/power-sync")
def power_sync(ctx: Context = Depends(_ctx)):
    """Run one power-sync pass now (the periodic loop runs them on its own)."""
    return ctx.nodes.sync_power()


@router.post("/v1/scheduler/claims", status_code=201)
def claim(body: dict, ctx: Context = Depends(_ctx)):
    return ctx.scheduler.claim(Request.from_dict(body))


@router.delete("/v1/scheduler/claims/{instance_uuid}", status_code=204)
def release(instance_uuid: str, ctx: Context = Depends(_ctx)):
    ctx.scheduler.release(instance_uuid)
