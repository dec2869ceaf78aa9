"""`undercloud stack ...`: stacks as `openstack stack ...` knows them."""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable

import click

from undercloud.cli.client import Client
from undercloud.cli.output import emit, format_option, formatted, note
from undercloud.errors import InvalidInput, NotFound, UndercloudError

LIST_COLUMNS = ["id", "stack_name", "stack_status", "creation_time", "updated_time"]
RES_COLUMNS = ["resource_name", "physical_resource_id", "resource_type", "resource_status", "updated_time"]
EVENT_COLUMNS = ["event_time", "resource_name", "resource_status", "resource_status_reason"]


class StackFailed(UndercloudError):
    pass


def parse_parameters(values: tuple[str, ...]) -> dict:
    params: dict[str, str] = {}
    for v in values:
        k, sep, val = v.partition("=")
        if not sep or not k.strip():
            raise InvalidInput(f"expected KEY=VALUE, got {v!r}", "--parameter")
        params[k.strip()] = val
    return params


def gather(template: str, environments: tuple[str, ...]) -> dict:
    """Read the template, environments and every file they name into a Bundle (as JSON)."""
    from undercloud.orchestration.template import Bundle

    return Bundle.from_paths(template, env_paths=list(environments)).to_json()


def template_options(f: Callable, template_required: bool = True) -> Callable:
    for opt in reversed([
        click.option("-t", "--template", required=template_required, type=click.Path(dir_okay=False),
                     help="The HOT template file." + ("" if template_required else
                                                      " Required, except with --existing.")),
        click.option("-e", "--environment", "environments", multiple=True, type=click.Path(dir_okay=False),
                     help="An environment file; repeat to merge several, in order."),
        click.option("-P", "--parameter", "parameters", multiple=True, metavar="KEY=VALUE",
                     help="A parameter value; repeatable."),
        click.option("--rollback", is_flag=True,
                     help="On failure, roll back (a create deletes what it made; an update converges "
                          "back to the previous template). Off by default, as in Heat."),
        click.option("--timeout", type=float, metavar="MINUTES",
                     help="Fail resources still in progress after this long (default 60)."),
        click.option("--wait", is_flag=True, help="Wait for the end, showing progress on stderr; exit 1 on failure "
                                                  "(rolled back included)."),
    ]):
        f = opt(f)
    return f


POLL = 0.5  # seconds between progress lines; the service answers at once when the operation ends


def progress_line(s: dict) -> str:
    """One line of a stack's progress (`stack create/update/delete --wait`, overcloud delete)."""
    p = s.get("progress") or {}
    busy = ", ".join(p.get("in_progress") or [])
    more = p.get("in_progress_count", 0) - len(p.get("in_progress") or [])
    return (f"{s['stack_status']}: {p.get('complete', 0)}/{p.get('total', 0)} resources complete"
            + (f", in progress: {busy}" if busy else "") + (f" (+{more})" if more > 0 else ""))


def wait_for(client: Client, name: str, deleting: bool = False) -> dict | None:
    """Follow the stack, showing progress on stderr; raise with the reason when it fails."""
    tty = sys.stderr.isatty()
    last = ""
    wait = 0.0  # the first look at once: the operation may be over already
    while True:
        try:
            s = client.get(f"/v1/stacks/{name}", params={"wait": wait} if wait else None)
        except NotFound:
            if deleting:
                if tty and last:
                    click.echo("", err=True)
                return None
            raise
        line = progress_line(s)
        if line != last:
            if tty:
                click.echo("\r\033[K" + line[:200], err=True, nl=False)
            else:
                click.echo(line, err=True)
            last = line
        if not s["stack_status"].endswith("_IN_PROGRESS"):
            if tty:
                click.echo("", err=True)
            if s["stack_status"].endswith("_FAILED"):
                raise StackFailed(f"stack {s['stack_name']} {s['stack_status']}: {s['stack_status_reason']}")
            if s["stack_status"] == "ROLLBACK_COMPLETE":  # the operation failed, then was undone
                raise StackFailed(f"stack {s['stack_name']} ROLLBACK_COMPLETE: {rollback_cause(client, s)}; "
                                  f"rolled back")
            return s
        wait = POLL


def rollback_cause(client: Client, stack: dict) -> str:
    """Why the last rollback started (its event says; the stack's reason then only says it
    completed). All events are paged: the service pages before it filters by depth."""
    cause, after = "the operation failed", 0
    while True:
        rows = client.get(f"/v1/stacks/{stack['id']}/events", params={"after": after, "limit": 1000})
        for e in rows:
            if e["resource_status"] == "ROLLBACK_IN_PROGRESS" and e["physical_resource_id"] == stack["id"]:
                cause = (e.get("resource_status_reason") or "").removeprefix("Stack ROLLBACK started: ") or cause
        if len(rows) < 1000:
            return cause
        after = rows[-1]["id"]


@click.group()
def stack() -> None:
    """Create, update and delete stacks of resources from HOT templates.

    The verbs are those of `openstack stack`. Operations run in the undercloud service;
    `--wait` follows one to its end (progress on stderr) and exits non-zero with the
    reason when it fails. `stack event list --follow` streams what happens.

    \b
    Example:
      undercloud stack create demo -t demo.yaml --parameter count=3 --wait
      undercloud stack output show demo --all
      undercloud stack update demo -t demo.yaml --parameter count=5 --dry-run
      undercloud stack delete demo --wait
    """


@stack.command()
@click.argument("name")
@template_options
@formatted()
def create(name, template, environments, parameters, rollback, timeout, wait):
    """Create stack NAME from a template (validated before anything is written)."""
    bundle = gather(template, environments)
    client = Client()
    body = {"name": name, "bundle": bundle, "parameters": parse_parameters(parameters), "rollback": rollback,
            "timeout": timeout * 60 if timeout else None}
    s = client.post("/v1/stacks", json=body)
    return wait_for(client, s["id"]) if wait else s


@stack.command()
@click.argument("name")
@functools.partial(template_options, template_required=False)
@click.option("--existing", is_flag=True,
              help="Keep the stored template (unless -t is given) and parameters; -P values go over "
                   "them (Heat's PATCH update).")
@click.option("--dry-run", is_flag=True,
              help="Show what would be created, updated, replaced and deleted; change nothing.")
@click.option("--max-fail", type=click.IntRange(min=0), default=0, show_default=True, metavar="N",
              help="Up to N members of resource groups may fail their update: each is updated back to "
                   "its previous properties, its server's later deployments are skipped, and the rest "
                   "goes on. One more failure fails the update (and rolls it back with --rollback).")
@formatted()
def update(name, template, environments, parameters, rollback, timeout, wait, existing, dry_run, max_fail):
    """Update stack NAME to a new template and parameters.

    Resources whose properties are unchanged are not touched; changed properties that
    allow it are updated in place, other changes replace the resource (the new one is
    made before the old one goes, unless its type says otherwise). Resources the new
    template no longer has are deleted at the end. Parameters are not carried over from
    the previous update unless --existing is given: then the stored ones stay, with the
    -P values over them, and without -t the stored template stays too.

    \b
    Examples:
      undercloud stack update demo -t demo.yaml -P count=5
      undercloud stack update demo --existing -P count=6 --wait
      undercloud stack update demo --existing -P version=2 --rollback --max-fail 1 --wait
    """
    if not template and not existing:
        raise InvalidInput("give the template (-t) or --existing to keep the stored one", "stack update")
    if environments and not template:
        raise InvalidInput("-e needs -t: environments go with a template", "stack update")
    bundle = gather(template, environments) if template else None
    client = Client()
    body = {"bundle": bundle, "parameters": parse_parameters(parameters), "rollback": rollback,
            "timeout": timeout * 60 if timeout else None, "dry_run": dry_run, "existing": existing,
            "max_fail": max_fail}
    s = client.patch(f"/v1/stacks/{name}", json=body)
    if dry_run:
        return s
    return wait_for(client, s["id"]) if wait else s


@stack.command()
@click.argument("name")
@click.option("--wait", is_flag=True, help="Wait until it is gone, showing progress on stderr.")
def delete(name, wait):
    """Delete stack NAME: its resources in reverse dependency order, then the stack.

    Resources with `deletion_policy: Retain` are left in place and forgotten.
    """
    client = Client()
    s = client.delete(f"/v1/stacks/{name}")
    if wait:
        wait_for(client, s["id"], deleting=True)
        note(f"stack {name} deleted")
    else:
        note(f"stack {name}: delete started")


@stack.command()
@click.argument("name")
@click.option("--wait", is_flag=True, help="Wait for the stack to settle (FAILED, or ROLLBACK_*).")
@formatted()
def cancel(name, wait):
    """Cancel the create or update in progress on stack NAME.

    Resources in progress end FAILED, nothing new starts; with --rollback given to the
    operation, the stack then rolls back.
    """
    client = Client()
    s = client.post(f"/v1/stacks/{name}/cancel")
    if wait:
        try:
            return wait_for(client, s["id"])
        except StackFailed as exc:
            note(str(exc))
            return client.get(f"/v1/stacks/{s['id']}")
    return s


@stack.command("list")
@formatted(LIST_COLUMNS)
def list_():
    """List stacks."""
    return Client().get("/v1/stacks")


@stack.command()
@click.argument("name")
@formatted()
def show(name):
    """Show stack NAME: status, reason, parameters (hidden ones masked), outputs, progress."""
    return Client().get(f"/v1/stacks/{name}")


@stack.group()
def resource() -> None:
    """The resources of a stack."""


@resource.command("list")
@click.argument("name")
@click.option("-n", "--nested-depth", type=int, default=0, show_default=True,
              help="Also list resources of nested stacks down to this depth.")
@formatted(RES_COLUMNS)
def resource_list(name, nested_depth):
    """List the resources of stack NAME (nested ones with dotted names)."""
    rows = Client().get(f"/v1/stacks/{name}/resources", params={"nested_depth": nested_depth})
    if nested_depth:
        for r in rows:
            r["resource_name"] = r["path"]
    return rows


@resource.command("show")
@click.argument("name")
@click.argument("resource")
@formatted()
def resource_show(name, resource):
    """Show one resource of stack NAME (RESOURCE may be a dotted nested path)."""
    return Client().get(f"/v1/stacks/{name}/resources/{resource}")


@stack.group()
def event() -> None:
    """The events of a stack: one per status change of the stack or a resource."""


@event.command("list")
@click.argument("name")
@click.option("--follow", is_flag=True, help="Keep printing new events until the operation ends.")
@click.option("-n", "--nested-depth", type=click.IntRange(min=0), default=None,
              help="Only events down to this nesting depth (0: the stack itself; default: all). "
                   "A nested stack's own events carry its name, its resources their path.")
@format_option
def event_list(name, follow, nested_depth, fmt):
    """List the events of stack NAME, oldest first."""
    client = Client()
    params = {} if nested_depth is None else {"nested_depth": nested_depth}
    if not follow:
        events = []
        after = 0
        while True:
            page = client.get(f"/v1/stacks/{name}/events", params={**params, "after": after, "limit": 5000})
            events += page
            if len(page) < 5000:
                break
            after = page[-1]["id"]
        emit(events, fmt, EVENT_COLUMNS if nested_depth is None else ["stack_name", *EVENT_COLUMNS])
        return
    after = 0
    sid = client.get(f"/v1/stacks/{name}")["id"]
    while True:
        try:
            s = client.get(f"/v1/stacks/{sid}")
            page = client.get(f"/v1/stacks/{sid}/events", params={**params, "after": after, "limit": 5000})
        except NotFound:  # a delete finished: the stack and its events are gone
            note(f"stack {name} deleted")
            return
        for e in page:
            if fmt == "json":
                click.echo(json.dumps(e, sort_keys=True))
            else:
                click.echo(f"{e['event_time']} [{e['resource_name']}]: {e['resource_status']}  "
                           f"{e['resource_status_reason']}")
            after = e["id"]
        if not page and not s["stack_status"].endswith("_IN_PROGRESS"):
            return
        if not page:
            time.sleep(0.5)


@stack.group()
def output() -> None:
    """The outputs of a stack."""


@output.command("show")
@click.argument("name")
@click.argument("output_name", required=False)
@click.option("--all", "all_", is_flag=True, help="Show every output.")
@formatted()
def output_show(name, output_name, all_):
    """Show output OUTPUT_NAME of stack NAME, or every output with --all."""
    if not output_name and not all_:
        raise InvalidInput("give an OUTPUT name or --all")
    outputs = Client().get(f"/v1/stacks/{name}/outputs")
    if all_:
        return outputs
    for o in outputs:
        if o["output_key"] == output_name:
            return o
    raise NotFound(f"stack {name} has no output {output_name!r}")


@output.command("list")
@click.argument("name")
@formatted(["output_key", "description"])
def output_list(name):
    """List the outputs of stack NAME."""
    return Client().get(f"/v1/stacks/{name}/outputs")


def _attach_preview() -> None:
    # `stack preview` belongs to the template language (cli/stack_preview.py).
    try:
        from undercloud.cli.stack_preview import preview
    except ImportError:
        return
    stack.add_command(preview, "preview")


_attach_preview()
