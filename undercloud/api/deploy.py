"""/v1/deploy: what the deploy ramdisk on a bare-metal node calls when it has written the
image (or failed to). PUBLIC: the call carries the deploy's own token (`X-Deploy-Token`,
made for that deploy only, stored as a hash); an unknown server and a wrong token get the
same answer. The work behind it is the baremetal realiser's (provisioning/servers/baremetal.py);
`inspect-<node id>` in place of a server id is an inspection's call-back.

/v1/deploy/boot: what a node booting from the network loads (baremetal_netboot.py): its
iPXE script by MAC, then the kernel, initramfs and request under a secret of that boot.
Only a node armed for a deploy or an inspection gets anything; others get 404.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, Field

from undercloud.api.app import get_context
from undercloud.api.context import Context
from undercloud.api.nodes import Inventory

PUBLIC = True
router = APIRouter(prefix="/v1/deploy")


class CallbackBody(BaseModel):
    ok: bool
    error: str | None = Field(None, max_length=10_000)
    inventory: Inventory | None = None  # inspection: cpus, memory_mb, local_gb, cpu_arch, macs


@router.post("/servers/{server_id}/callback", status_code=202)
def callback(server_id: str, body: CallbackBody, request: Request, ctx: Context = Depends(get_context)):
    from undercloud.provisioning.servers.baremetal import DeployDenied

    realiser = ctx.servers.realiser("baremetal")
    try:
        inventory = body.inventory.model_dump(exclude_none=True) if body.inventory is not None else None
        return realiser.callback(server_id, request.headers.get("x-deploy-token"), body.ok, body.error, inventory)
    except DeployDenied as exc:
        return JSONResponse({"error": exc.message, "where": None}, status_code=401)


@router.get("/boot/{mac}")
def boot_script(mac: str, ctx: Context = Depends(get_context)):
    script = ctx.servers.realiser("baremetal").netboot.script(mac)
    if script is None:
        # repr: whatever the path holds (a new line, a control character) stays on one line
        return JSONResponse({"error": f"no network boot is armed for {mac[:17]!r}", "where": None}, status_code=404)
    return PlainTextResponse(script)


@router.get("/boot/{mac}/{secret}/{name}")
def boot_file(mac: str, secret: str, name: str, ctx: Context = Depends(get_context)):
    netboot = ctx.servers.realiser("baremetal").netboot
    if name == "request":
        body = netboot.request(mac, secret)
        if body is not None:
            return Response(body, media_type="application/json")
    elif (path := netboot.file(mac, secret, name)) is not None:
        return FileResponse(path, media_type="application/octet-stream")
    return JSONResponse({"error": "not found", "where": None}, status_code=404)


def startup(ctx: Context) -> None:
    """The bare-metal realiser drives the nodes' deploy, undeploy and inspection from the
    start (an inspection needs no server), so it is made with the service."""
    ctx.servers.realiser("baremetal")
