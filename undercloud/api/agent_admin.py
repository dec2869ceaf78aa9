"""Admin side of the agents: list the servers that have agent credentials, and issue an
agent configuration (rotating that server's token) for a pre-provisioned server."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from undercloud.api.app import get_context
from undercloud.api.context import Context
from undercloud.errors import NotFound

router = APIRouter(prefix="/v1/agent")


def _find(ctx: Context, ref: str) -> str:
    meta = ctx.server_metadata
    if meta.exists(ref):
        return ref
    ids = [s["id"] for s in meta.servers() if s["name"] == ref]
    if len(ids) == 1:
        return ids[0]
    if ids:
        raise NotFound(f"{len(ids)} agent servers are named {ref!r}: use the id", "server")
    raise NotFound(f"no agent server {ref!r}", "server")


@router.get("/servers")
def list_servers(ctx: Context = Depends(get_context)):
    return ctx.server_metadata.servers()


@router.post("/servers/{ref}/credentials")
def issue_credentials(ref: str, ctx: Context = Depends(get_context)):
    """A new token for the server (the old one stops working) and the agent config using it."""
    server_id = _find(ctx, ref)
    token = ctx.server_metadata.register(server_id)
    return ctx.server_metadata.agent_config(server_id, token)
