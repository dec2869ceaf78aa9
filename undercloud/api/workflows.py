"""/v1/workflows: the overcloud's workflows (overcloud/workflows.py) run by the service, so
they survive their client; admin only.

POST starts one (201), or answers the one running for that overcloud with the same input
(200, `attached`), or 409 naming the one running with another. GET .../events?after=N
answers the lines after sequence N, holding the request up to `wait` seconds until there
are some or the workflow ends (a long poll: a client follows a workflow with one request
at a time). A runner thread per workflow calls the service's own API over loopback with
the admin token, as the CLI did; at start, the RUNNING ones this worker ran (or a dead
worker's) run again from the start: each step is idempotent."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from fastapi import APIRouter, Depends, Query, Response
from pydantic import BaseModel, Field

from undercloud.api.app import get_context
from undercloud.api.context import Context
from undercloud.errors import InvalidInput, ServiceUnavailable, UndercloudError, internal_error
from undercloud.names import check_name

log = logging.getLogger("undercloud.workflows")
router = APIRouter(prefix="/v1/workflows")
HOLD = 0.2  # how often a long poll looks for new events


class Stopped(Exception):
    """The service stops: the workflow is left RUNNING for its next start to resume."""


class Events:
    """A workflow's sink: each line an event in the store."""

    def __init__(self, ctx: Context, wid: str, stop: threading.Event):
        self.ctx, self.wid, self.stop = ctx, wid, stop
        # The store numbers a workflow's events for one writer; a workflow's own threads
        # (image builds running at once) write through here one at a time.
        self.lock = threading.Lock()

    def _add(self, text: str, stream: str) -> None:
        if self.stop.is_set() or self.ctx.stopping.is_set():
            raise Stopped()
        with self.lock:
            self.ctx.workflows.add_event(self.wid, str(text), stream)

    def note(self, text: str) -> None:
        self._add(text, "err")

    def echo(self, text: str) -> None:
        self._add(text, "out")


class Runner:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.stop = threading.Event()
        self.threads: dict[str, threading.Thread] = {}

    def run(self, wid: str, resumed: bool = False) -> None:
        t = threading.Thread(target=self._run, args=(wid, resumed), name=f"workflow-{wid[:8]}", daemon=True)
        self.threads[wid] = t
        t.start()

    def resume(self, own: bool) -> None:
        """Claim and run again the RUNNING workflows of a dead worker (and with `own`, this
        worker's own: at its start); one resumed too often ends FAILED instead."""
        from undercloud.orchestration.limits import BY_NAME, LIMITS

        ctx = self.ctx
        # a hypervisor host's worker resumes only its own (as for stacks): it runs servers
        for wid in ctx.workflows.claim(ctx.workers.live(), ctx.workers.id, own, others=not ctx.hypervisor_only):
            runs = ctx.workflows.get(wid)["runs"]
            if runs - 1 > LIMITS.resumes:
                message = (f"interrupted by {runs - 1} restarts of the undercloud service without finishing; "
                           f"not resumed again (set {BY_NAME['resumes'].env} to allow more)")
                ctx.workflows.add_event(wid, f"workflow {wid}: {message}")
                ctx.workflows.finish(wid, ctx.workers.id, runs, "FAILED", {
                    "error": {"message": message, "where": "workflow", "exit_code": 1}, "exit_code": 1})
                continue
            self.run(wid, resumed=True)

    def _client(self):
        from undercloud.cli.client import Client

        client = Client(self.ctx.home, timeout=600, start=False)
        deadline = time.monotonic() + 60
        while True:  # at start the hooks run before the service listens
            try:
                client.get("/v1/health")
                return client
            except ServiceUnavailable:
                if self.stop.is_set() or self.ctx.stopping.is_set():
                    raise Stopped() from None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _run(self, wid: str, resumed: bool) -> None:
        from undercloud.overcloud.workflows import KINDS

        wf = self.ctx.workflows.get(wid)
        out = Events(self.ctx, wid, self.stop)
        try:
            if resumed:
                out.note(f"workflow {wid}: resumed (run {wf['runs']}) after the undercloud service running it "
                         f"stopped: its steps run again from the start")
            result = KINDS[wf["kind"]](self._client(), out, wf["stack"], self.ctx.workflows.input(wid))
            status, outcome = "SUCCEEDED", {"result": result, "exit_code": 0}
        except Stopped:
            return
        except UndercloudError as exc:
            if self.stop.is_set() or self.ctx.stopping.is_set():
                return  # the service stops under it (its own API gone): resumed at the next start
            status, outcome = "FAILED", {"error": {"message": exc.message, "where": exc.where,
                                                   "exit_code": exc.exit_code}, "exit_code": exc.exit_code}
        except Exception as exc:  # noqa: BLE001 - a bug: logged under an id, the workflow FAILED
            if self.stop.is_set() or self.ctx.stopping.is_set():
                return
            err = internal_error(exc, log, f"workflow {wf['kind']}")
            status, outcome = "FAILED", {"error": {"message": err.message, "where": None, "exit_code": 1},
                                         "exit_code": 1}
        finally:
            self.threads.pop(wid, None)
        if not self.ctx.workflows.finish(wid, self.ctx.workers.id, wf["runs"], status, outcome):
            log.info("workflow %s: taken over by another run; its end not written by this one", wid)


def startup(ctx: Context):
    """Resume the RUNNING workflows of this worker (a restart) or of a dead one; one that
    restarts interrupted too often (UNDERCLOUD_MAX_RESUMES, as stack operations) ends FAILED.
    Then, every heartbeat, those of a worker that stopped beating."""
    runner = ctx.workflow_runner = Runner(ctx)
    runner.resume(own=True)
    if ctx.hypervisor_only:
        return runner.stop.set

    def take_over() -> None:  # a dead worker's workflows, as its stack operations (api/workers.py)
        while not runner.stop.wait(ctx.workers.interval) and not ctx.stopping.is_set():
            try:
                runner.resume(own=False)
            except Exception:  # noqa: BLE001 - the loop must survive one bad pass
                log.exception("workflow take-over failed")

    threading.Thread(target=take_over, name="workflow-take-over", daemon=True).start()
    return runner.stop.set


class StartBody(BaseModel):
    stack: str = Field(max_length=255)
    kind: str = Field(max_length=32)
    input: dict[str, Any] = Field(default_factory=dict)


@router.post("", status_code=201)
def start(body: StartBody, response: Response, ctx: Context = Depends(get_context)):
    from undercloud.overcloud.workflows import KINDS, input_digest

    check_name(body.stack, "stack", "stack")
    if body.kind not in KINDS:
        raise InvalidInput(f"unknown workflow kind {body.kind!r} (one of {', '.join(sorted(KINDS))})", "kind")
    wf, new = ctx.workflows.start(body.stack, body.kind, body.input, input_digest(body.kind, body.input),
                                  ctx.workers.id)
    if new:
        ctx.workflow_runner.run(wf["id"])
    else:
        response.status_code = 200
    return {**wf, "attached": not new}


@router.get("")
def list_workflows(stack: str | None = Query(None, max_length=255), ctx: Context = Depends(get_context)):
    return ctx.workflows.list(stack)


@router.get("/{wid}")
def show(wid: str, ctx: Context = Depends(get_context)):
    return ctx.workflows.get(wid)


@router.get("/{wid}/events")
def events(wid: str, after: int = Query(0, ge=0, le=2**31 - 1), wait: float = Query(0, ge=0, le=60),
           ctx: Context = Depends(get_context)):
    """{workflow, events}: the workflow read before its events, so a workflow that has ended
    comes with all its lines (a client stops when it has ended and no events are left)."""
    deadline = time.monotonic() + wait
    while True:
        wf = ctx.workflows.get(wid)
        evs = ctx.workflows.events(wid, after)
        if evs or wf["status"] != "RUNNING" or time.monotonic() >= deadline or ctx.stopping.is_set():
            return {"workflow": wf, "events": evs}
        time.sleep(HOLD)
