"""Following a workflow the service runs (api/workflows.py): the CLI starts it, or attaches
to the one running with the same input, prints its lines as they come (progress to
stderr, results to stdout, as the command printed them when it ran them itself) and ends
as it ended: its result, or its error line and exit code. Interrupting the CLI stops
nothing: the workflow goes on in the service, and the same command again follows it.
`undercloud workflow list/show/follow` reads them."""

from __future__ import annotations

import time
from typing import Any

import click

from undercloud.cli.client import Client
from undercloud.cli.output import formatted, note
from undercloud.errors import UndercloudError

WAIT = 10.0  # seconds a long poll for events is held
COLUMNS = ["id", "stack", "kind", "status", "runs", "created_at", "updated_at"]


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


def _when(row: dict) -> dict:
    return {**row, **{k: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(row[k]))
                      for k in ("created_at", "updated_at") if isinstance(row.get(k), (int, float))}}


@click.group()
def workflow() -> None:
    """The overcloud's workflows the service runs: list them, show one, follow its lines.

    `undercloud deploy`, `overcloud update`, `rollback`, `replace` and `delete` each start
    one (or attach to the one running with the same input) and follow it; a workflow goes
    on when its command is interrupted, and survives a restart of the service. Any client
    can follow one here or through the API (GET /v1/workflows/ID/events?after=N&wait=S).

    \b
    Examples:
      undercloud workflow list --stack overcloud
      undercloud workflow follow 3f0c...   # its lines from the first; exits as it ended
    """


@workflow.command("list")
@click.option("--stack", help="Only the workflows of this overcloud stack.")
@formatted(COLUMNS)
def list_(stack: str | None):
    """List workflows, oldest first (RUNNING, SUCCEEDED or FAILED)."""
    return [_when(w) for w in Client().get("/v1/workflows", params={"stack": stack} if stack else None)]


@workflow.command("show")
@click.argument("workflow_id")
@formatted()
def show(workflow_id: str):
    """Show one workflow: status, runs (1 + the restarts it was resumed after), result."""
    return _when(Client().get(f"/v1/workflows/{workflow_id}"))


@workflow.command("follow")
@click.argument("workflow_id")
def follow_cmd(workflow_id: str):
    """Print a workflow's lines from its first (progress on stderr, results on stdout) as
    they come, and exit as it ended: 0, or its error line and exit code. Interrupting this
    stops nothing."""
    client = Client()
    follow(client, workflow_id, client.get(f"/v1/workflows/{workflow_id}")["kind"])
