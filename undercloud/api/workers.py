"""/v1/workers: the service processes sharing this store (store/workers.py). Admin only.

`startup` registers this worker, then every heartbeat interval beats, stops its own walks of
operations another worker took over (it looked dead to them), and takes over what workers
that stopped beating left: their stack operations (resumed from what they wrote) and their
nodes' busy work (failed: a BMC call cannot resume halfway).
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
from typing import Any
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Depends

from undercloud.api.app import get_context
from undercloud.api.context import Context
from undercloud.errors import InvalidInput, NotFound, ServiceUnavailable

log = logging.getLogger("undercloud.workers")
router = APIRouter()
FORWARD_TIMEOUT = 40.0  # the owner waits up to 30 s for its walk to apply a signal


@router.get("/v1/workers")
def list_workers(ctx: Context = Depends(get_context)):
    return ctx.workers.list()


def forward_signal(workers, owner: str, stack_id: str, resource: str, payload: Any, token: str) -> None:
    """Hand a stack signal to the worker whose walk holds the resource, as the sender sent it;
    its refusal comes back as it gave it."""
    url = workers.url_of(owner)
    where = urlsplit(url or "")
    if not where.hostname:
        raise ServiceUnavailable(f"worker {owner} runs this stack and gave no address; try again later")
    conn = http.client.HTTPConnection(where.hostname, where.port or 80, timeout=FORWARD_TIMEOUT)
    try:
        conn.request("POST", f"/v1/stacks/{quote(stack_id)}/resources/{quote(resource, safe='')}/signal",
                     json.dumps(payload).encode(), {"Content-Type": "application/json", "X-Signal-Token": token,
                                                    "X-Undercloud-Forwarded": workers.id})
        r = conn.getresponse()
        body = r.read()
    except OSError as exc:
        raise ServiceUnavailable(f"worker {owner} runs this stack and did not answer ({exc}); try again later") \
            from None
    finally:
        conn.close()
    if r.status < 300:
        return
    try:
        message = str(json.loads(body).get("error") or "")
    except (ValueError, AttributeError):
        message = ""
    message = message or f"HTTP {r.status}"
    if r.status == 404:
        raise NotFound(message)
    if r.status == 400:
        raise InvalidInput(message)
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
            workers.leave()
        except Exception as exc:  # noqa: BLE001 - the store may be gone: the others wait for the beats to stop
            log.warning("could not leave the workers' table (%s): others take over when the beats stop",
                        type(exc).__name__)

    return halt
