"""Following a workflow the service runs (api/workflows.py): the CLI starts it, or attaches
to the one running with the same input, prints its lines as they come (progress to
stderr, results to stdout, as the command printed them when it ran them itself) and ends
as it ended: its result, or its error line and exit code. Interrupting the CLI stops
nothing: the workflow goes on in the service, and the same command again follows it."""

from __future__ import annotations

from typing import Any

import click

from undercloud.cli.client import Client
from undercloud.cli.output import note
from undercloud.errors import UndercloudError

WAIT = 10.0  # seconds a long poll for events is held


def run(client: Client, stack: str, kind: str, input: dict) -> Any:
    """Start (or attach to) workflow `kind` on `stack`, follow it; returns its result."""
    wf = client.post("/v1/workflows", json={"stack": stack, "kind": kind, "input": input})
    if wf.get("attached"):
        note(f"{kind}: following workflow {wf['id']}, already running for {stack} with this input")
    return follow(client, wf["id"], kind)


def follow(client: Client, wid: str, kind: str = "workflow") -> Any:
    after = 0
    try:
        while True:
            page = client.get(f"/v1/workflows/{wid}/events", params={"after": after, "wait": WAIT})
            for e in page["events"]:
                click.echo(e["text"], err=e["stream"] != "out")
                after = e["seq"]
            wf = page["workflow"]
            if wf["status"] != "RUNNING" and not page["events"]:
                break
    except KeyboardInterrupt:
        note(f"{kind} goes on in the service (workflow {wid}); the same command again follows it")
        raise
    outcome = wf.get("result") or {}
    if wf["status"] == "FAILED":
        err = outcome.get("error") or {}
        exc = UndercloudError(err.get("message") or f"workflow {wid} failed", err.get("where"))
        exc.exit_code = int(outcome.get("exit_code") or 1)
        raise exc
    return outcome.get("result")
