"""/v1/overclouds/STACK/status: every node's services and their health, as the nodes' agents
report it (`undercloud overcloud status` shows these rows; overcloud/status.py makes them).

The service asks the nodes' agents for a fresh report (server_metadata.request_health: a
request in each node's document, which wakes its agent's long-poll), then waits until
every node answered or `wait` seconds passed; a node that did not answer shows `unknown`
with the age of its last report.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Query

from undercloud.api.app import get_context
from undercloud.api.context import Context
from undercloud.errors import NotFound
from undercloud.overcloud import status as rows_of

router = APIRouter(prefix="/v1/overclouds")

LOOK_EVERY = 0.2  # seconds between looks at the reports while waiting for the answers


def _agent_ids(ctx: Context, names: list[str]) -> dict[str, str]:
    """node name -> its agent's server id (a server's id; a deployed server's by its agent's name)."""
    out, named = {}, None
    for name in names:
        try:
            out[name] = ctx.servers.get(name)["id"]
        except NotFound:
            if named is None:
                named = {s["name"]: s["id"] for s in ctx.server_metadata.servers()}
            if name in named:
                out[name] = named[name]
    return out


@router.get("/{stack}/status")
def status(stack: str, node: str | None = Query(None, max_length=255),
           wait: float = Query(15.0, ge=0, le=60), ctx: Context = Depends(get_context)):
    """One row per service per node (or of node `node`): role, node, address, service, step,
    health_check, health ("healthy", "failing (why)", "unknown (why)"), restarts, image,
    config, last_restart, certificate_expires (haproxy's public certificate; else null)."""
    try:
        outputs = {o["output_key"]: o.get("output_value") for o in ctx.stacks.outputs(stack)}
    except NotFound:
        raise NotFound(f"no overcloud stack {stack!r}: run `undercloud deploy`", "stack") from None
    nodes = {n for members in (outputs.get("RoleNodes") or {}).values() for n in (members or {})}
    if node is not None and node not in nodes:
        raise NotFound(f"no node {node!r} in overcloud {stack} (its nodes: {', '.join(sorted(nodes)) or 'none'})",
                       "node")
    todo = rows_of.targets(outputs, node)
    ids = _agent_ids(ctx, sorted({n for _, n, _, _ in todo}))
    meta = ctx.server_metadata
    asked = meta.request_health(list(ids.values())) if ids else None
    deadline = time.monotonic() + wait
    while True:
        got = meta.healths(list(ids.values())) if ids else {}
        answered = asked is None or all(((got.get(i) or {}).get("answers") or 0) >= asked for i in ids.values())
        if answered or time.monotonic() >= deadline or ctx.stopping.wait(LOOK_EVERY):
            break
    reports = {name: got.get(i) for name, i in ids.items()}
    return rows_of.rows(todo, reports, asked, time.time(), rows_of.certificates(outputs))
