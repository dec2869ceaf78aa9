"""/v1/workers: the service processes sharing this store (store/workers.py). Admin only.

`startup` registers this worker, then every heartbeat interval beats, stops its own walks of
operations another worker took over (it looked dead to them), and takes over what workers
that stopped beating left: their stack operations (resumed from what they wrote) and their
nodes' busy work (failed: a BMC call cannot resume halfway).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Depends, Request

from undercloud.api.app import get_context
from undercloud.api.context import Context
from undercloud.config import connection
from undercloud.errors import (
    Conflict,
    Elsewhere,
    InvalidInput,
    NeedsFirstBoot,
    NotFound,
    ServiceUnavailable,
    by_status,
)

log = logging.getLogger("undercloud.workers")
router = APIRouter()
FORWARD_TIMEOUT = 40.0  # the owner waits up to 30 s for its walk to apply a signal
# the owner's refusals raised here as its own errors (their status, errors.py); any other
# status is this worker's ServiceUnavailable naming the owner
FORWARDED_ERRORS = by_status(InvalidInput, NotFound, Conflict, NeedsFirstBoot)


@router.get("/v1/workers")
def list_workers(ctx: Context = Depends(get_context)):
    return ctx.workers.list()


@router.delete("/v1/workers/{worker_id}")
def forget_worker(worker_id: str, ctx: Context = Depends(get_context)):
    ctx.workers.forget(worker_id)
    return {"forgotten": worker_id}


def forward_signal(workers, owner: str, stack_id: str, resource: str, payload: Any, token: str) -> None:
    """Hand a stack signal to the worker whose walk holds the resource, as the sender sent it;
    its refusal comes back as it gave it."""
    _forward(workers, owner, "POST", f"/v1/stacks/{quote(stack_id)}/resources/{quote(resource, safe='')}/signal",
             payload, {"X-Signal-Token": token})


def forwarded(ctx: Context, exc: Elsewhere, request: Request, method: str, path: str) -> Any:
    """An admin's request that must run on the worker `exc` names (it holds the walk), sent
    there; that worker's answer, or its refusal as it gave it. A request that was itself
    forwarded is not sent on again."""
    if request.headers.get("x-undercloud-forwarded"):
        raise exc
    return forward_admin(ctx, exc.worker, method, path)


def forward_admin(ctx: Context, worker: str, method: str, path: str, body: Any = None) -> Any:
    """An admin request run by another worker, with the workers' own credential."""
    return _forward(ctx.workers, worker, method, path, body, {"X-Undercloud-Worker-Token": ctx.worker_token})


def _forward(workers, owner: str, method: str, path: str, payload: Any, headers: dict[str, str]) -> Any:
    where = urlsplit(workers.url_of(owner) or "")
    if not where.hostname:
        raise ServiceUnavailable(f"worker {owner} gave no address; try again later")
    conn = connection(where.geturl(), workers.ca_file, FORWARD_TIMEOUT)
    try:
        body = None if payload is None else json.dumps(payload).encode()
        conn.request(method, path, body, {**headers, "Content-Type": "application/json",
                                          "X-Undercloud-Forwarded": workers.id})
        r = conn.getresponse()
        data = r.read()
    except OSError as exc:
        raise ServiceUnavailable(f"worker {owner} did not answer ({exc}); try again later") from None
    finally:
        conn.close()
    try:
        answer = json.loads(data) if data else None
    except ValueError:
        answer = None
    if r.status < 300:
        return answer
    message = (str(answer.get("error") or "") if isinstance(answer, dict) else "") or f"HTTP {r.status}"
    error = FORWARDED_ERRORS.get(r.status)
    if error is not None:
        raise error(message)
    raise ServiceUnavailable(f"worker {owner}: {message}")


def startup(ctx: Context):
    workers = ctx.workers
    workers.join()
    stop = threading.Event()

    def loop() -> None:
        failing = False
        while not stop.wait(workers.interval):  # beats on while the service stops, until `halt`
            try:
                workers.beat()
                ctx.server_metadata.flush_seen()  # agents' last calls, one write for all
                ctx.stacks.fence()
                if not ctx.stopping.is_set():  # a stopping worker starts nothing new
                    if len(workers.live()) > 1:  # others may have written agents' metadata and signals
                        ctx.server_metadata.refresh()
                    ctx.stacks.take_over()
                    failed = ctx.nodes.recover_interrupted(at_start=False)
                    if failed:
                        log.warning("%d node(s) were busy on a worker that stopped heart-beating; marked failed",
                                    failed)
                if failing:
                    log.info("heartbeats go through again")
                failing = False
            except Exception as exc:  # noqa: BLE001 - the loop must survive bad passes (e.g. the store restarting)
                if not failing:  # once per outage, not every beat
                    log.warning("heartbeat pass failed (%s); trying again every %.0f s", type(exc).__name__,
                                workers.interval)
                failing = True

    thread = threading.Thread(target=loop, name="worker-heartbeat", daemon=True)
    thread.start()

    def halt() -> None:  # run last (api/app.run_startup): the operations have stopped writing
        stop.set()
        thread.join(5)
        try:
            ctx.server_metadata.flush_seen()
            workers.leave()
        except Exception as exc:  # noqa: BLE001 - the store may be gone: the others wait for the beats to stop
            log.warning("could not leave the workers' table (%s): others take over when the beats stop",
                        type(exc).__name__)

    return halt
