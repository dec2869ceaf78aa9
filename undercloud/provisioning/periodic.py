"""The nodes' background loop (an app.STARTUP hook): power sync, wait-state timeouts and
orphaned claims.

At start it fails work interrupted by the last stop (a BMC call cannot resume halfway);
then every `UNDERCLOUD_POWER_SYNC_INTERVAL` seconds (default 60) it runs one power-sync
pass, and every few seconds (`housekeeping`) it fails nodes that stayed too long in a busy
or wait state and gives back claims whose server row never came (scheduler.py).
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger("undercloud.nodes")

TIMEOUT_CHECK_INTERVAL = 5.0


def housekeeping(nodes, scheduler) -> None:
    """The loop's pass every TIMEOUT_CHECK_INTERVAL seconds."""
    nodes.check_timeouts()
    if scheduler is not None:
        scheduler.release_orphans()


def startup(ctx):
    nodes = ctx.nodes
    interrupted = nodes.recover_interrupted()
    if interrupted:
        log.warning("%d node(s) were busy when the service stopped; marked failed", interrupted)
    interval = float(os.environ.get("UNDERCLOUD_POWER_SYNC_INTERVAL", "60"))
    stop = threading.Event()

    def loop() -> None:
        waited = interval  # first sync pass soon after start
        while not stop.wait(TIMEOUT_CHECK_INTERVAL) and not ctx.stopping.is_set():
            try:
                housekeeping(nodes, ctx.scheduler)
                waited += TIMEOUT_CHECK_INTERVAL
                if interval > 0 and waited >= interval:
                    waited = 0
                    stats = nodes.sync_power()
                    if stats["drift"] or stats["failed"]:
                        log.info("power sync: %(nodes)d nodes, %(drift)d drifted, %(failed)d unreadable, "
                                 "%(seconds).2f s", stats)
            except Exception:  # noqa: BLE001 - the loop must survive one bad pass
                log.exception("nodes periodic pass failed")

    thread = threading.Thread(target=loop, name="nodes-periodic", daemon=True)
    thread.start()

    def halt() -> None:
        stop.set()
        nodes.close()

    return halt
