"""`undercloud overcloud ...`: the deployed overcloud (credentials, health, update and rollback,
removal)."""

from __future__ import annotations

import re
import socket
import urllib.error
import urllib.request
from pathlib import Path

import click

from undercloud.cli.client import Client
from undercloud.cli.output import emit, format_option, formatted, note
from undercloud.errors import NotFound, UndercloudError

STACK_OPTION = click.option("--stack", default="overcloud", show_default=True, help="The overcloud's stack name.")


@click.group()
def overcloud() -> None:
    """The overcloud that `undercloud deploy` made: credentials, status, rolling update and
    rollback of its service images, replacing a failed node, delete.

    \b
    Example:
      undercloud overcloud clouds-yaml > clouds.yaml
      OS_CLIENT_CONFIG_FILE=clouds.yaml openstack --os-cloud overcloud token issue
      undercloud overcloud status
      undercloud overcloud update --service keystone --no-cache
      undercloud overcloud rollback
      undercloud overcloud replace overcloud-controller-1
      undercloud overcloud delete
    """


def _outputs(client: Client, stack: str) -> dict:
    try:
        rows = client.get(f"/v1/stacks/{stack}/outputs")
    except NotFound:
        raise NotFound(f"no overcloud stack {stack!r}: run `undercloud deploy`", "--stack") from None
    return {o["output_key"]: o.get("output_value") for o in rows}


@overcloud.command("clouds-yaml")
@STACK_OPTION
def clouds_yaml(stack):
    """Print a clouds.yaml with the overcloud's admin credentials (cloud named after the stack).

    This is the one command that reveals them (as TripleO's overcloudrc did). The
    endpoint is the virtual IP in front of the APIs, which this host reaches directly: its
    public TLS port, verified with `cacert` (the undercloud's CA, or the one you gave).
    """
    from undercloud.overcloud.clouds import admin_password
    from undercloud.overcloud.clouds import clouds_yaml as render
    from undercloud.overcloud.state import StackState

    client = Client()
    found = _outputs(client, stack)
    endpoints = found.get("PublicEndpointMap") or found.get("EndpointMap") or {}
    if not endpoints.get("keystone"):
        raise UndercloudError(f"stack {stack} has no keystone endpoint (not deployed, or keystone disabled)",
                              "--stack")
    state = StackState(client, stack)
    password = admin_password(state.secrets(), stack)
    cacert = state.get("last-deploy", {}).get("public_ca")
    click.echo(render(stack, endpoints["keystone"], password, cacert=cacert), nl=False)


def probe(address: str, check: str, timeout: float = 2.0) -> str:
    """Run a health check ("HTTP GET :PORT/PATH" or "TCP :PORT") against `address` from this
    host: the tests and benches time a service's recovery with it. `status` does not use it
    (the nodes' agents run the checks)."""
    m = re.match(r"^HTTP GET :(\d+)(\S*)$", check)
    try:
        if m:
            with urllib.request.urlopen(f"http://{address}:{m.group(1)}{m.group(2) or '/'}", timeout=timeout) as r:
                return "healthy" if 200 <= r.status < 400 else f"HTTP {r.status}"
        m = re.match(r"^TCP :(\d+)$", check)
        if m:
            with socket.create_connection((address, int(m.group(1))), timeout=timeout):
                return "healthy"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except OSError as exc:
        return f"failing ({getattr(exc, 'reason', None) or exc.strerror or exc})"
    return "unknown check"


def service_health(client: Client, stack: str, only: str | None = None, wait: float = 15.0) -> list[dict]:
    """One row per service per node (or of node `only`), as the nodes' agents report it: the
    service asks them for a fresh report and waits up to `wait` seconds for their answers
    (GET /v1/overclouds/STACK/status; overcloud/status.py)."""
    params = {"wait": wait} if only is None else {"wait": wait, "node": only}
    try:
        return client.get(f"/v1/overclouds/{stack}/status", params=params)
    except NotFound as exc:
        raise NotFound(exc.message, "NODE" if only else "--stack") from None


@overcloud.command()
@STACK_OPTION
@click.option("--wait", type=click.FloatRange(0, 60), default=15, show_default=True, metavar="SECONDS",
              help="How long to wait for the nodes' agents to answer with a fresh report.")
@formatted(["role", "node", "address", "service", "step", "health_check", "health", "restarts", "image", "config"])
def status(stack, wait):
    """Every node, its services and their health, as each node's agent reports it: asked
    for a fresh report, the agent runs its services' readiness probes on the node itself
    (so nodes on any host and any network are checked alike), and reports with them its
    containers' states, restarts (its watchdog's and podman's), image and configuration
    versions (a half-rolled change shows as mixed versions). Health is "healthy", "failing
    (why)", or "unknown (why)" for a node whose agent did not answer within --wait seconds
    (its last report's age is shown, never an older result as now). `-f json` adds the last
    restart's reason and, on haproxy's rows, when the public endpoints' certificate ends
    (a deploy renews it within 30 days of that). A podman API service the container nodes rely on that the undercloud
    had to restart (or that still fails) is said on stderr."""
    client = Client(timeout=60 + wait)
    try:
        s = client.get(f"/v1/stacks/{stack}")
    except NotFound:
        raise NotFound(f"no overcloud stack {stack!r}: run `undercloud deploy`", "--stack") from None
    note(f"stack {stack}: {s['stack_status']}" + (f" ({s['stack_status_reason']})"
                                                  if s["stack_status"].endswith("FAILED") else ""))
    for h in client.get("/v1/hypervisors"):  # the podman API the container nodes' hooks drive, if it went bad
        if h.get("engine") and h["engine"] != "podman API ok":
            note(f"container engine on {h['name']}: {h['engine']}")
    return service_health(client, stack, wait=wait)


@overcloud.command()
@STACK_OPTION
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(stack, yes):
    """Delete the overcloud: its stack (servers and the services on them), what the store
    kept of it (secrets, deployed sets) and its plan and clouds.yaml in the home. Nothing of
    it is left on the host."""
    from undercloud.cli import workflows

    client = Client()
    try:
        client.get(f"/v1/stacks/{stack}")
    except NotFound:
        raise NotFound(f"no overcloud stack {stack!r}", "--stack") from None
    if not yes and not click.confirm(f"Delete the overcloud {stack} and everything on its nodes?", err=True):
        raise UndercloudError("not confirmed", "overcloud delete")
    workflows.run(client, stack, "delete", {})


@overcloud.command()
@STACK_OPTION
@click.argument("node")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--timeout", type=float, default=30, show_default=True, metavar="MINUTES",
              help="Fail if the node's services are not all healthy after this long.")
@formatted()
def replace(stack, node, yes, timeout):
    """Replace a failed node with a new one of the same name and address.

    The node's server is rebuilt from its image: a new container, a re-imaged VM disk,
    or a bare-metal machine deployed again through its BMC, with the same name, address
    and declared persistent volumes (a database's data). Its agent then plays every
    deploy step of its role again; this waits until all of the node's services pass
    their health checks, printing each as it does, and exits 1 naming those that did
    not. Nothing else in the overcloud is touched.

    \b
    Example:
      undercloud overcloud replace overcloud-controller-1 --yes
    """
    from undercloud.cli import workflows
    from undercloud.overcloud.workflows import replace_target

    client = Client(timeout=300)
    role, address = replace_target(client, stack, node)
    if not yes and not click.confirm(f"Replace {node} ({role}, {address}) by a new node? What is on it "
                                     f"outside its persistent volumes is lost.", err=True):
        raise UndercloudError("not confirmed", "overcloud replace")
    return workflows.run(client, stack, "replace", {"node": node, "timeout": float(timeout)})


BATCH_OPTION = click.option("--batch", type=click.IntRange(min=1), default=1, show_default=True,
                            help="Nodes of a role changed at once; each batch's services must pass their "
                                 "health checks before the next batch starts.")
TIMEOUT_OPTION = click.option("--timeout", type=float, default=30, show_default=True, metavar="MINUTES",
                              help="Fail (and roll back) what is still in progress after this long.")


@overcloud.command()
@STACK_OPTION
@click.option("--service", "services", multiple=True, metavar="S",
              help="Update this service's image (repeatable; default: every deployed service). Services "
                   "sharing an image (nova-api, nova-conductor...) are updated together.")
@click.option("--role", "roles", multiple=True, metavar="R",
              help="Only the nodes of this role (repeatable): they run the new image, the other roles "
                   "keep theirs (`overcloud status` shows the versions side by side).")
@BATCH_OPTION
@click.option("--no-cache", is_flag=True,
              help="Rebuild the images from scratch (Debian's newest packages: a minor update).")
@click.option("--elements-path", "elements_path", multiple=True, metavar="DIR",
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Your own elements, searched before the shipped ones (repeatable): a changed "
                   "element makes a new image.")
@click.option("--max-fail", type=click.IntRange(min=0), default=0, show_default=True, metavar="N",
              help="Up to N nodes may fail: each is rolled back alone to its previous images and "
                   "configuration (its later steps not run) and the rollout goes on; one more stops it "
                   "and rolls every node back. The command exits 1 naming the nodes rolled back; run it "
                   "again to retry them.")
@TIMEOUT_OPTION
@click.option("--dry-run", is_flag=True,
              help="Show what the update would change, per node and service (image before -> after, "
                   "restart or not; an image not built yet shows as `would build NAME`), and change "
                   "nothing: no image built, no stack update.")
@format_option
def update(stack, services, roles, batch, no_cache, elements_path, max_fail, timeout, dry_run, fmt):
    """Roll new service images out, node by node, and roll back by itself on a failure.

    Builds the images of the chosen services (cached by content: an unchanged element
    builds nothing; --no-cache or a changed element makes a new image), then the
    undercloud rolls them out: each deploy step that runs a changed service updates
    --batch nodes of a role at a time, and the next batch starts only when those nodes'
    services pass their health checks. Services whose image and configuration did not
    change are not restarted. A node that fails stops the rollout and the undercloud
    rolls it back to its previous image and configuration (it goes on if this command
    dies); the command then exits 1 naming node, service and health check. With
    --max-fail N, up to N failing nodes are rolled back alone while the others go on. With --role,
    only that role's nodes take the new image (the others keep theirs); an update
    without --role brings every role to the same image again.

    \b
    Examples:
      undercloud overcloud update --service keystone              # node by node
      undercloud overcloud update --service keystone --no-cache   # new Debian packages
      undercloud overcloud update --service neutron_linuxbridge_agent --role Compute
      undercloud overcloud update --elements-path ./my-elements --batch 2 --max-fail 1
      undercloud overcloud update --service keystone --dry-run    # what would change
      undercloud overcloud rollback                               # back to the previous images
    """
    from undercloud.cli import workflows
    from undercloud.cli.deploy import DRY_RUN_COLUMNS

    if fmt != "table" and not dry_run:
        raise click.UsageError("-f/--format is for --dry-run's rows")
    given = {"services": list(services), "roles": list(roles), "batch": batch, "no_cache": bool(no_cache),
             "elements_path": [str(p.resolve()) for p in elements_path], "max_fail": max_fail,
             "timeout": float(timeout)}
    if dry_run:  # the rows for scripts; the workflow prints the text itself
        given.update(dry_run=True, rows_only=fmt != "table")
    result = workflows.run(Client(timeout=600), stack, "update", given)
    if dry_run and fmt != "table":
        emit((result or {}).get("rows") or [], fmt, DRY_RUN_COLUMNS)


@overcloud.command()
@STACK_OPTION
@BATCH_OPTION
@TIMEOUT_OPTION
def rollback(stack, batch, timeout):
    """Bring every node back to the previous deployed set of service images.

    The previous set is the one before the last deploy, update or rollback that changed
    an image (its images are kept in the image store for this); it rolls out as an
    update does, node by node, and a rollback twice returns to where it began.

    \b
    Example:
      undercloud overcloud update --service keystone && undercloud overcloud rollback
    """
    from undercloud.cli import workflows

    workflows.run(Client(timeout=600), stack, "rollback", {"batch": batch, "timeout": float(timeout)})
