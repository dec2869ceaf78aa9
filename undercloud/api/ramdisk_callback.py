"""/v1/deploy: what the deploy ramdisk on a bare-metal node calls when it has written the
image (or failed to). PUBLIC: the call carries the deploy's own token (`X-Deploy-Token`,
made for that deploy only, stored as a hash); an unknown server and a wrong token get the
same answer. The work behind it is the baremetal realiser's (provisioning/servers/baremetal.py);
`inspect-<node id>` in place of a server id is an inspection's call-back.

/v1/deploy/boot: what a node booting from the network loads (baremetal_netboot.py): its
iPXE script by MAC, then the kernel, initramfs and request under a secret of that boot.
Only a node armed for a deploy or an inspection gets anything, and only from the address
DHCP gives its MAC; others get 404 (403 for the request from another address). The request
(deploy token, config drive) is handed out once: a second one gets 410 and fails the deploy.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, Field

from undercloud.api.app import get_context
from undercloud.api.context import Context
from undercloud.api.nodes import Inventory
from undercloud.server_types import BAREMETAL

PUBLIC = True
router = APIRouter(prefix="/v1/deploy")


class CallbackBody(BaseModel):
    ok: bool
    error: str | None = Field(None, max_length=10_000)
    inventory: Inventory | None = None  # inspection: cpus, memory_mb, local_gb, cpu_arch, macs


@router.post("/servers/{server_id}/callback", status_code=202)
def callback(server_id: str, body: CallbackBody, request: Request, ctx: Context = Depends(get_context)):
    from undercloud.provisioning.servers.baremetal import DeployDenied

    realiser = ctx.servers.realiser(BAREMETAL)
    try:
        inventory = body.inventory.model_dump(exclude_none=True) if body.inventory is not None else None
        return realiser.callback(server_id, request.headers.get("x-deploy-token"), body.ok, body.error, inventory)
    except DeployDenied as exc:
        return JSONResponse({"error": exc.message, "where": None}, status_code=401)


@router.get("/boot/{mac}")
def boot_script(mac: str, request: Request, ctx: Context = Depends(get_context)):
    script = ctx.servers.realiser(BAREMETAL).netboot.script(mac, client_address(request))
    if script is None:
        # repr: whatever the path holds (a new line, a control character) stays on one line
        return JSONResponse({"error": f"no network boot is armed for {mac[:17]!r}", "where": None}, status_code=404)
    return PlainTextResponse(script)


@router.get("/boot/{mac}/{secret}/{name}")
def boot_file(mac: str, secret: str, name: str, request: Request, ctx: Context = Depends(get_context)):
    from undercloud.provisioning.servers.baremetal_netboot import BootRefused

    realiser = ctx.servers.realiser(BAREMETAL)
    client = client_address(request)
    if name == "request":
        try:
            body = realiser.boot_request(mac, secret, client)
        except BootRefused as exc:
            return JSONResponse({"error": exc.message, "where": None}, status_code=exc.status)
        if body is not None:
            return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})
    elif (path := realiser.netboot.file(mac, secret, name, client)) is not None:
        return FileResponse(path, media_type="application/octet-stream")
    return JSONResponse({"error": "not found", "where": None}, status_code=404)


def client_address(request: Request) -> str:
    """Where the call came from: a lab machine's own address through the lab's relay
    (vm_net.serve_api), else the connection's peer; "" when unknown."""
    from undercloud.provisioning.servers.vm_net import relayed_peer

    if request.client is None:
        return ""
    return relayed_peer(request.client.host, request.client.port) or request.client.host


def startup(ctx: Context) -> None:
    """The bare-metal realiser is made with the service, before the servers' start-up (which
    resumes its armed network boots): the nodes' deploy interface (api/context.py), it deploys,
    tears down and inspects nodes, and an inspection needs no server."""
    ctx.servers.realiser(BAREMETAL)
