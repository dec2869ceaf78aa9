"""/v1/workers: the service processes sharing this store (store/workers.py). Admin only.

The STARTUP hook registers this worker, then every heartbeat interval beats and takes over
what workers that stopped beating left: their stack operations (resumed from what they
wrote) and their nodes' busy work (failed: a BMC call cannot resume halfway).
"""

from __future__ import annotations

import logging
import threading

from fastapi import APIRouter, Depends

from undercloud.api.app import get_context
from undercloud.api.context import Context

log = logging.getLogger("undercloud.workers")
router = APIRouter()


@router.get("/v1/workers")
def list_workers(ctx: Context = Depends(get_context)):
    return ctx.workers.list()


def startup(ctx: Context):
    workers = ctx.workers
    workers.join()
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(workers.interval) and not ctx.stopping.is_set():
            try:
                workers.beat()
                ctx.stacks.take_over()
                failed = ctx.nodes.recover_interrupted(at_start=False)
                if failed:
                    log.warning("%d node(s) were busy on a worker that stopped heart-beating; marked failed", failed)
            except Exception:  # noqa: BLE001 - the loop must survive one bad pass (e.g. the store restarting)
                log.exception("heartbeat pass failed")

    thread = threading.Thread(target=loop, name="worker-heartbeat", daemon=True)
    thread.start()

    def halt() -> None:  # run last (stops run in reverse): the operations have stopped writing
        stop.set()
        thread.join(5)
        workers.leave()

    return halt
