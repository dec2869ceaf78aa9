"""/v1/servers, /v1/flavors, /v1/hypervisors (the service: Context.servers; the API's
listeners on guest networks: api/listeners.py)."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field, StringConstraints, field_validator

from undercloud.api.app import get_context
from undercloud.api.context import Context
from undercloud.errors import InvalidInput, NotFound
from undercloud.names import check_name
from undercloud.server_types import CONTAINER

log = logging.getLogger("undercloud.api.servers")
router = APIRouter()
_ctx = get_context


TUNNEL_SYNC = 5.0  # seconds between looks at who else is on this host's lab network


def startup(ctx: Context):
    """First start: default flavors, this host as hypervisor host; listeners for existing
    servers; then a status pass over the settled servers every UNDERCLOUD_SERVER_SYNC_INTERVAL
    seconds (default 60; 0: never), so `server list` shows a machine that died by itself; and
    every 5 s the tunnels of a lab network other hosts share (a host joined or left) and the
    podman API service container nodes drive (restarted when it has gone bad)."""
    ctx.servers.startup()
    interval = float(os.environ.get("UNDERCLOUD_SERVER_SYNC_INTERVAL", "60"))
    stop = threading.Event()

    def loop() -> None:
        next_status = time.monotonic() + interval
        while not stop.wait(min(interval, TUNNEL_SYNC) if interval > 0 else TUNNEL_SYNC) \
                and not ctx.stopping.is_set():
            try:
                ctx.servers.watch_engines()
            except Exception:  # noqa: BLE001 - the loop must survive one bad pass
                log.exception("podman API service check failed")
            try:
                ctx.servers.sync_networks()
                if interval > 0 and time.monotonic() >= next_status:
                    next_status = time.monotonic() + interval
                    stats = ctx.servers.sync_status()
                    if stats["changed"]:
                        log.info("server status sync: %(servers)d servers, %(changed)d changed, %(seconds).2f s",
                                 stats)
            except Exception:  # noqa: BLE001 - the loop must survive one bad pass
                log.exception("server status sync failed")

    threading.Thread(target=loop, name="servers-status-sync", daemon=True).start()

    def halt() -> None:
        stop.set()
        ctx.listeners.stop()

    return halt


def with_agent(ctx: Context, servers: list[dict]) -> list[dict]:
    """Servers with what their agents did: checked in, and when last seen."""
    seen = {s["id"]: s["last_seen"] for s in ctx.server_metadata.servers()}
    return [{**srv, "agent_checked_in": seen.get(srv["id"]) is not None, "agent_last_seen": seen.get(srv["id"])}
            for srv in servers]


# ---- flavors -------------------------------------------------------------------------
class FlavorBody(BaseModel):
    name: str
    # lower bounds are Flavors.validate's (it names the CLI option); upper ones keep SQL integers
    vcpus: int = Field(le=4096)
    ram: int = Field(le=64 * 1024 * 1024)  # MB: 64 TiB
    disk: int = Field(le=1024 * 1024)  # GB: 1 PiB
    properties: dict[Annotated[str, StringConstraints(max_length=255)],
                     Annotated[str, StringConstraints(max_length=1024)]] = Field(default={}, max_length=100)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v, "flavor")


@router.get("/v1/flavors")
def list_flavors(ctx: Context = Depends(_ctx)):
    return ctx.servers.flavors.list()


@router.post("/v1/flavors", status_code=201)
def create_flavor(body: FlavorBody, ctx: Context = Depends(_ctx)):
    return ctx.servers.flavors.create(body.name, body.vcpus, body.ram, body.disk, body.properties)


@router.get("/v1/flavors/{name}")
def show_flavor(name: str, ctx: Context = Depends(_ctx)):
    return ctx.servers.flavors.get(name)


@router.delete("/v1/flavors/{name}")
def delete_flavor(name: str, ctx: Context = Depends(_ctx)):
    return ctx.servers.flavors.delete(name)


@router.get("/v1/hypervisors")
def list_hypervisors(ctx: Context = Depends(_ctx)):
    return ctx.servers.hosts()


@router.delete("/v1/hypervisors/{name}")
def forget_hypervisor(name: str, ctx: Context = Depends(_ctx)):
    return ctx.servers.forget_host(name)


@router.get("/v1/hypervisors/{hypervisor_type}/network")
def hypervisor_network(hypervisor_type: str, ctx: Context = Depends(_ctx)):
    """The network servers of this type are on: subnet, gateway, addresses kept for VIPs."""
    return ctx.servers.network(hypervisor_type)


class VirtualIpBody(BaseModel):
    stack: str

    @field_validator("stack")
    @classmethod
    def _stack(cls, v: str) -> str:
        return check_name(v, "stack", "stack")


@router.post("/v1/hypervisors/{hypervisor_type}/network/virtual-ip")
def hypervisor_virtual_ip(hypervisor_type: str, body: VirtualIpBody, ctx: Context = Depends(_ctx)):
    """The network, with the virtual IP of an overcloud stack on it (`undercloud deploy`):
    one the network keeps for VIPs, the same at every deploy of the stack, released when
    the stack is deleted (overcloud/addresses.py)."""
    from undercloud.overcloud.addresses import choose_virtual_ip

    net = ctx.servers.network(hypervisor_type)
    vip = choose_virtual_ip(ctx.addresses, ctx.home.path, net["network"], body.stack, net.get("virtual_ips") or [])
    return {**net, "virtual_ip": vip}


# ---- servers -------------------------------------------------------------------------
class ActionBody(BaseModel):
    # power-on | power-off | rebuild; spawn: make the machine of a server placed on this worker's
    # host by a worker of another host (answers at once; the machine is made in the background)
    action: str = Field(max_length=32)
    image: str | None = Field(None, max_length=255)
    # rebuild: keys replacing the first-boot data's (e.g. user_data); spawn: the whole data
    first_boot: dict[str, Any] | None = None


@router.get("/v1/servers")
def list_servers(ctx: Context = Depends(_ctx)):
    return with_agent(ctx, ctx.servers.list())


@router.get("/v1/servers/{ref}")
def show_server(ref: str, ctx: Context = Depends(_ctx)):
    return with_agent(ctx, [ctx.servers.refresh(ref)])[0]


@router.delete("/v1/servers/{ref}")
def delete_server(ref: str, wait: float = Query(60.0, ge=0, le=600), ctx: Context = Depends(_ctx)):
    import time

    srv = ctx.servers.delete(ref)
    deadline = time.monotonic() + wait
    gone = ctx.servers.gone(srv["id"])
    while not gone and time.monotonic() < deadline:
        time.sleep(0.5)
        gone = ctx.servers.gone(srv["id"])
    if gone:
        ctx.server_metadata.forget(srv["id"])
    return {**srv, "deleted": gone}


@router.post("/v1/servers/{ref}/action")
def server_action(ref: str, body: ActionBody, ctx: Context = Depends(_ctx)):
    if body.action in ("power-on", "power-off"):
        return ctx.servers.power(ref, body.action == "power-on")
    if body.action == "rebuild":
        return ctx.servers.rebuild(ref, body.image, first_boot=body.first_boot)
    if body.action == "spawn":
        return ctx.servers.resume(ref, body.first_boot, background=True)
    raise InvalidInput(f"unknown action {body.action!r}; one of power-on, power-off, rebuild, spawn", "action")


@router.get("/v1/servers/{ref}/health")
def server_health(ref: str, ctx: Context = Depends(_ctx)):
    """What the server's agent watchdog last reported: per Pod its config, per container its
    state, image and restarts."""
    srv = ctx.servers.get(ref)
    report = ctx.server_metadata.health(srv["id"])
    if report is None:
        raise NotFound(f"server {srv['name']}: no health report from its agent yet", "server")
    engine = ctx.servers.engine_health() if srv.get("hypervisor_type") == CONTAINER else None
    return {"server": srv["id"], "name": srv["name"], **report,
            **({"container_engine": engine} if engine else {})}  # the host's podman API its kube hook drives


@router.get("/v1/servers/{ref}/console")
def server_console(ref: str, lines: int = Query(100, ge=1, le=10_000), ctx: Context = Depends(_ctx)):
    return {"console": ctx.servers.console(ref, lines)}
