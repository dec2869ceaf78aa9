"""/v1/nodes: inventory, lifecycle verbs, power, boot device, maintenance; /v1/scheduler.

Responses never carry a BMC password (driver_info is masked in `provisioning.nodes.view`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from undercloud.api.app import get_context
from undercloud.api.context import Context
from undercloud.provisioning.scheduler import Request

router = APIRouter()
_ctx = get_context

Short = Annotated[str, StringConstraints(max_length=255)]
# What refusals quote back (profile, resource class...): no spaces or control characters, so
# "no node fits server X: ..." stays one line.
Word = Annotated[str, StringConstraints(pattern=r"^[^\x00-\x20\x7f]{1,255}$")]
Count = Annotated[int, Field(ge=0, le=2**31)]  # CPUs, MB, GB: far beyond any machine, within SQL integers
MANY = 1000  # nodes per batch verb request (the CLI sends more in several)
Mac = Annotated[str, StringConstraints(pattern=r"^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$")]


class ImportBody(BaseModel):
    filename: Short = "instackenv.json"
    content: str  # its size is bounded by the route's body limit


class VerbBody(BaseModel):
    verb: Short


class VerbManyBody(BaseModel):
    """A verb for several nodes (names or UUIDs), applied in order, sharing transactions."""

    verb: Short
    nodes: Annotated[list[Short], Field(min_length=1, max_length=MANY)]


class PowerBody(BaseModel):
    action: Short


class BootBody(BaseModel):
    device: Short
    persistent: bool = False


class MaintenanceBody(BaseModel):
    reason: Annotated[str, StringConstraints(max_length=1000)] | None = None


class Inventory(BaseModel):
    """What an inspection found (a ramdisk's report); other keys are ignored."""

    model_config = ConfigDict(extra="ignore")
    cpus: Count | None = None
    memory_mb: Count | None = None
    local_gb: Count | None = None
    cpu_arch: Annotated[str, StringConstraints(max_length=32)] | None = None
    macs: Annotated[list[Mac], Field(max_length=1024)] = []


class CallbackBody(BaseModel):
    ok: bool = True
    error: Annotated[str, StringConstraints(max_length=10_000)] | None = None
    inventory: Inventory | None = None


class ClaimBody(BaseModel):
    """A scheduler request (provisioning.scheduler.Request) with its types and bounds."""

    model_config = ConfigDict(extra="forbid")
    instance_uuid: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]{1,64}$")]
    resource_class: Word | None = "baremetal"
    profile: Word | None = None
    capabilities: dict[Word, Word] = {}
    cpus: Count = 0
    memory_mb: Count = 0
    local_gb: Count = 0
    cpu_arch: Word | None = None
    hypervisor_type: Word | None = None
    instance_info: dict = {}


def _inventory(body: CallbackBody) -> dict | None:
    return body.inventory.model_dump(exclude_none=True) if body.inventory is not None else None


@router.get("/v1/nodes")
def list_nodes(provision_state: Short | None = None, maintenance: bool | None = None, ctx: Context = Depends(_ctx)):
    return ctx.nodes.list(provision_state, maintenance)


@router.post("/v1/nodes/import", status_code=201)
def import_nodes(body: ImportBody, ctx: Context = Depends(_ctx)):
    return ctx.nodes.import_nodes(body.content, body.filename)


@router.get("/v1/nodes/{ident}")
def show_node(ident: str, ctx: Context = Depends(_ctx)):
    return ctx.nodes.get(ident)


@router.get("/v1/nodes/{ident}/events")
def node_events(ident: str, limit: int = Query(50, ge=1, le=10_000), ctx: Context = Depends(_ctx)):
    return ctx.nodes.events(ident, limit)


@router.delete("/v1/nodes/{ident}", status_code=204)
def delete_node(ident: str, ctx: Context = Depends(_ctx)):
    ctx.nodes.delete(ident)


@router.post("/v1/nodes/provision")
def provision_many(body: VerbManyBody, ctx: Context = Depends(_ctx)):
    """The nodes after the verb, in order; the first refusal is the answer (the nodes before
    it moved, it and those after did not), as one request per node would have it."""
    return ctx.nodes.act_many(body.nodes, body.verb)


@router.post("/v1/nodes/{ident}/provision")
def provision(ident: str, body: VerbBody, ctx: Context = Depends(_ctx)):
    return ctx.nodes.act(ident, body.verb)


@router.post("/v1/nodes/{ident}/callback")
def callback(ident: str, body: CallbackBody, ctx: Context = Depends(_ctx)):
    return ctx.nodes.callback(ident, body.ok, body.error, _inventory(body))


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
def claim(body: ClaimBody, ctx: Context = Depends(_ctx)):
    return ctx.scheduler.claim(Request.from_dict(body.model_dump()))


@router.delete("/v1/scheduler/claims/{instance_uuid}", status_code=204)
def release(instance_uuid: str, ctx: Context = Depends(_ctx)):
    ctx.scheduler.release(instance_uuid)
