"""What the agents on the servers call: their own metadata, and signals.

PUBLIC (no admin token): each call carries the server's own token (`X-Server-Token`
header, or `?token=` for clients that cannot set headers, such as os-collect-config's
request collector). A token opens only its own server's metadata and deployments; an
unknown server and a wrong token get the same answer.

Polls are cheap by design: async handlers that answer from the in-memory document
(ETag / If-None-Match -> 304, Last-Modified for os-collect-config), no database query,
and `?wait=SECONDS` turns a poll into a long-poll that returns when the document changes
(the agents ask 25 s; at most MAX_WAIT). A held poll holds no thread and no store connection:
a future woken by the metadata service; it is let go when the client disconnects, when the
server's token is revoked (401) and when the service stops (304: ask again).
"""

from __future__ import annotations

import asyncio
import json
import math

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from undercloud.api.limits import LIMITS
from undercloud.errors import NotFound

PUBLIC = True
router = APIRouter(prefix="/v1/agent")

MAX_WAIT = 120.0

_DENIED = {"error": "unknown server or wrong server token", "where": None}


def _auth(request: Request, server_id: str):
    meta = request.app.state.ctx.server_metadata
    token = request.headers.get("x-server-token") or request.query_params.get("token")
    return meta, meta.authenticate(server_id, token)


async def _disconnected(receive) -> None:
    """Returns when the client closed its connection (a held long-poll is then let go at once,
    not at the end of its wait)."""
    try:
        while (await receive())["type"] != "http.disconnect":
            pass
    except Exception:  # noqa: BLE001 - a receive that fails: taken as gone too
        return


@router.api_route("/servers/{server_id}/metadata", methods=["GET", "HEAD"])
async def metadata(server_id: str, request: Request):
    meta, srv = _auth(request, server_id)
    if srv is None:
        return JSONResponse(_DENIED, status_code=401)
    inm = request.headers.get("if-none-match")
    wait = request.query_params.get("wait")
    if wait and inm == srv.etag:
        try:
            seconds = float(wait)
            if not math.isfinite(seconds):
                raise ValueError
            seconds = min(max(seconds, 0.0), MAX_WAIT)
        except ValueError:
            return JSONResponse({"error": f"wait: not a number: {wait[:20]!r}", "where": "query"}, status_code=400)
        if seconds > 0:
            gone = asyncio.ensure_future(_disconnected(request.receive))
            try:
                await meta.wait_change(server_id, inm, seconds, gone)
            finally:
                gone.cancel()
            if gone.done() and not gone.cancelled():
                return Response(status_code=204)  # the client left while held: nobody reads this
        meta, srv = _auth(request, server_id)
        if srv is None:  # forgotten while waiting
            return JSONResponse(_DENIED, status_code=401)
    headers = {"ETag": srv.etag, "Last-Modified": srv.last_modified, "Cache-Control": "no-cache"}
    if inm == srv.etag:
        return Response(status_code=304, headers=headers)
    if request.method == "HEAD":
        return Response(status_code=200, headers=headers, media_type="application/json")
    return Response(srv.doc, media_type="application/json", headers=headers)


@router.post("/servers/{server_id}/deployments/{deployment_id}/signal")
async def signal(server_id: str, deployment_id: str, request: Request):
    meta, srv = _auth(request, server_id)
    if srv is None:
        return JSONResponse(_DENIED, status_code=401)
    raw = await request.body()  # at most LIMITS.signal_body_bytes: api/guard.py cut it there
    if len(raw) > LIMITS.signal_body_bytes:
        return JSONResponse({"error": f"signal of {len(raw)} bytes exceeds {LIMITS.signal_body_bytes}",
                             "where": None}, status_code=413)
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        return JSONResponse({"error": "signal body is not JSON", "where": None}, status_code=400)
    if not isinstance(body, dict):
        return JSONResponse({"error": "signal body must be a JSON object", "where": None}, status_code=400)
    try:
        await run_in_threadpool(meta.record_signal, server_id, deployment_id, body)
    except NotFound as exc:
        return JSONResponse({"error": exc.message, "where": None}, status_code=404)
    return {"acknowledged": True, "deployment": deployment_id}


@router.put("/servers/{server_id}/health")
async def health(server_id: str, request: Request):
    """The agent's watchdog: its node's Pods, containers, images and restarts."""
    meta, srv = _auth(request, server_id)
    if srv is None:
        return JSONResponse(_DENIED, status_code=401)
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError:
        return JSONResponse({"error": "health report is not JSON", "where": None}, status_code=400)
    if not isinstance(body, dict) or not isinstance(body.get("pods", {}), dict):
        return JSONResponse({"error": "health report must be a JSON object with pods: {name: ...}", "where": "pods"},
                            status_code=400)
    report = {"paused": bool(body.get("paused")), "pods": body.get("pods") or {}}
    if "answers" in body:  # the health request (server_metadata.HEALTH_REQUEST) it answers; older agents: none
        answers = body["answers"]
        report["answers"] = float(answers) if isinstance(answers, (int, float)) and not isinstance(answers, bool) \
            and math.isfinite(answers) else None
    await run_in_threadpool(meta.record_health, server_id, report)  # a store write: not on the event loop
    return {"acknowledged": True}
