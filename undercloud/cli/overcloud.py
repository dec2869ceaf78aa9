"""`undercloud overcloud ...`: the deployed overcloud (credentials, health, update and rollback,
removal)."""

from __future__ import annotations

import re
import shutil
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import click

from undercloud.cli.client import Client
from undercloud.cli.output import formatted, note
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
    endpoint is the virtual IP in front of the APIs, which this host reaches directly.
    """
    from undercloud.overcloud.clouds import admin_password
    from undercloud.overcloud.clouds import clouds_yaml as render
    from undercloud.overcloud.state import StackState

    client = Client()
    endpoints = _outputs(client, stack).get("EndpointMap") or {}
    if not endpoints.get("keystone"):
        raise UndercloudError(f"stack {stack} has no keystone endpoint (not deployed, or keystone disabled)",
                              "--stack")
    password = admin_password(StackState(client, stack).secrets(), stack)
    click.echo(render(stack, endpoints["keystone"], password), nl=False)


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
    restart's reason."""
    client = Client(timeout=60 + wait)
    try:
        s = client.get(f"/v1/stacks/{stack}")
    except NotFound:
        raise NotFound(f"no overcloud stack {stack!r}: run `undercloud deploy`", "--stack") from None
    note(f"stack {stack}: {s['stack_status']}" + (f" ({s['stack_status_reason']})"
                                                  if s["stack_status"].endswith("FAILED") else ""))
    return service_health(client, stack, wait=wait)


@overcloud.command()
@STACK_OPTION
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(stack, yes):
    """Delete the overcloud: its stack (servers and the services on them), what the store
    kept of it (secrets, deployed sets) and its plan and clouds.yaml in the home. Nothing of
    it is left on the host."""
    from undercloud.cli.stack import wait_for
    from undercloud.overcloud.secrets import stack_dir
    from undercloud.overcloud.state import StackState

    client = Client()
    try:
        client.get(f"/v1/stacks/{stack}")
    except NotFound:
        raise NotFound(f"no overcloud stack {stack!r}", "--stack") from None
    if not yes and not click.confirm(f"Delete the overcloud {stack} and everything on its nodes?", err=True):
        raise UndercloudError("not confirmed", "overcloud delete")
    start = time.monotonic()
    s = client.delete(f"/v1/stacks/{stack}")
    wait_for(client, s["id"], deleting=True)
    StackState(client, stack).forget()
    shutil.rmtree(stack_dir(client.home.path, stack), ignore_errors=True)
    note(f"overcloud {stack} deleted in {time.monotonic() - start:.1f} s")


def _idle_stack(client: Client, stack: str) -> dict:
    """The overcloud's stack; refuses one that is missing or busy."""
    try:
        s = client.get(f"/v1/stacks/{stack}")
    except NotFound:
        raise NotFound(f"no overcloud stack {stack!r}: run `undercloud deploy`", "--stack") from None
    if s["stack_status"].endswith("_IN_PROGRESS"):
        raise UndercloudError(f"stack {stack} is {s['stack_status']}: wait for it or "
                              f"`undercloud stack cancel {stack}`", "--stack")
    return s


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
    client = Client(timeout=300)
    _idle_stack(client, stack)
    out = _outputs(client, stack)
    roles = {n: (role, address) for role, members in (out.get("RoleNodes") or {}).items()
             for n, address in (members or {}).items()}
    if node not in roles:
        raise NotFound(f"no node {node!r} in overcloud {stack} (its nodes: {', '.join(sorted(roles)) or 'none'})",
                       "NODE")
    role, address = roles[node]
    if not yes and not click.confirm(f"Replace {node} ({role}, {address}) by a new node? What is on it "
                                     f"outside its persistent volumes is lost.", err=True):
        raise UndercloudError("not confirmed", "overcloud replace")
    start = time.monotonic()
    client.post(f"/v1/servers/{node}/action", json={"action": "rebuild"})
    note(f"replace: {node} rebuilding from its image; its agent then plays its deploy steps again")
    deadline, seen, rows = start + timeout * 60, set(), []
    while time.monotonic() < deadline:
        server = client.get(f"/v1/servers/{node}")
        if server["status"] == "ERROR":
            raise UndercloudError(f"replace: {node}'s rebuild failed: {server.get('fault') or server.get('notes')}",
                                  "NODE")
        if server["status"] == "ACTIVE":
            rows = service_health(client, stack, only=node, wait=5)
            for r in rows:
                if r["service"] not in seen and r["health"] == "healthy":
                    seen.add(r["service"])
                    note(f"[{time.monotonic() - start:6.1f}s] {node}: {r['service']} {r['health']}")
            if rows and all(r["health"] == "healthy" for r in rows):
                now = (next(iter((server.get("addresses") or {}).values()), None) or [address])[0]
                took = time.monotonic() - start
                note(f"replace: {node} replaced in {took:.1f} s: {len(rows)} service(s) healthy, "
                     f"address {now}" + ("" if now == address else f" (was {address})"))
                return {"node": node, "role": role, "address": now, "seconds": round(took, 1),
                        "services": sorted(seen)}
        time.sleep(2)
    failing = [f"{r['service']}: {r['health']}" for r in rows if not r["health"] == "healthy"]
    raise UndercloudError(f"replace: {node} not healthy after {timeout:g} min: "
                          f"{'; '.join(failing) or 'its server is not ACTIVE'}", "--timeout")


def _rollout(client: Client, stack: str, new: dict, params: list[str], batch: int, timeout: float,
             what: str, max_fail: int = 0) -> None:
    """Roll the set `new`'s images of `params` out (a stack update the undercloud runs: the
    deploy steps' groups `batch` nodes at a time, rolled back by itself on a failure; up to
    `max_fail` nodes that fail are rolled back alone and the rest goes on) and follow it;
    records `new` as the deployed set once it is complete, with the nodes rolled back."""
    from undercloud.overcloud import deployed, rollout

    start = time.monotonic()
    after = rollout.last_event(client.get, stack)
    # parameter_defaults (the image parameters belong to the service templates), over the
    # stored bundle's, with a rollback to it on any failure. A role's own images: the
    # `<Role>ImageOverrides` of every role that has or had one.
    roles = sorted({k.split(":")[0] for k in params if ":" in k} | set(new.get("overrides") or {}))
    chosen = deployed.parameters(new, [k for k in params if ":" not in k], roles)
    body = {"existing": True, "rollback": True, "timeout": timeout * 60, "max_fail": max_fail,
            "environment": {"parameter_defaults": {**chosen, "UpdateBatchSize": batch}}}
    client.patch(f"/v1/stacks/{stack}", json=body)
    follow = rollout.Follow(client.get, stack, note, after)
    s = follow.run()
    status = s["stack_status"]
    if status == "UPDATE_COMPLETE":
        new = {k: v for k, v in new.items() if k != "rolled_back"}
        if follow.tolerated:
            new["rolled_back"] = {node: failed for node, (failed, _tail) in follow.tolerated.items()}
        from undercloud.overcloud.state import StackState

        deployed.record(StackState(client, stack), new)
        done = sorted(n for n, state in follow.nodes.items() if state == "updated")
        note(f"{what}: complete in {time.monotonic() - start:.1f} s ({len(done)} node(s) ran a changed step)")
        if follow.tolerated:
            for node, (failed, tail) in sorted(follow.tolerated.items()):
                note(f"{what}: {node} failed at {failed}")
                for t in tail:
                    note(f"  | {t}")
            nodes = sorted(follow.tolerated)
            raise UndercloudError(
                f"{len(nodes)} node(s) failed within --max-fail {max_fail} and run their previous images "
                f"and configuration again: {', '.join(nodes)}; the others are updated; `undercloud overcloud "
                f"update` again retries them", what.split()[0])
        return
    if follow.failure:
        node, failed, tail = follow.failure
        for t in tail:
            note(f"  | {t}")
        back = ("rolled back by itself: the nodes it reached run their previous images and configuration "
                "again" if status == "ROLLBACK_COMPLETE" else f"and its rollback ended {status}: "
                f"{s['stack_status_reason']} (see `undercloud overcloud status`)")
        raise UndercloudError(f"{what} failed on node {node}, {failed}; {back}", what.split()[0])
    raise UndercloudError(f"{what} ended {status}: {s['stack_status_reason']}", what.split()[0])


def _deployed_set(client: Client, stack: str) -> dict:
    """The stack's recorded deployed sets; refuses a stack that is missing or busy."""
    from undercloud.overcloud import deployed
    from undercloud.overcloud.state import StackState

    _idle_stack(client, stack)
    sets = deployed.load(StackState(client, stack))
    if not sets.get("current"):
        raise UndercloudError(f"no deployed set recorded for stack {stack}: run `undercloud deploy` first",
                              "--stack")
    return sets


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
def update(stack, services, roles, batch, no_cache, elements_path, max_fail, timeout):
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
      undercloud overcloud rollback                               # back to the previous images
    """
    from undercloud.cli.image import build_targets
    from undercloud.images import catalog
    from undercloud.overcloud import rollout

    client = Client(timeout=600)
    current = _deployed_set(client, stack)["current"]
    retry = sorted(current.get("rolled_back") or {})
    by_role = None
    if roles:
        known = {role: {svc[0] for svc in rows or []}
                 for role, rows in (_outputs(client, stack).get("RoleServices") or {}).items()}
        unknown = [r for r in roles if r not in known]
        if unknown:
            raise NotFound(f"no role {', '.join(unknown)} in overcloud {stack} (its roles: "
                           f"{', '.join(sorted(known))})", "--role")
        by_role = {r: known[r] for r in roles}
    params = rollout.choose(current, services, by_role)
    names = sorted({current["images"][p]["name"] for p in params})
    note(f"images: building {', '.join(names)}" + (" from scratch (--no-cache)" if no_cache else
                                                    " (cached by content)"))
    targets = [t.with_elements_path(tuple(elements_path)) for n in names for t in catalog.targets(n)]
    records = {r["name"]: r for r in build_targets(client, targets, no_cache)}
    new = rollout.with_records(current, params, records, list(roles))
    changed = rollout.changed(current, new)
    if not changed and retry:
        note(f"update: retrying {', '.join(retry)}: the last update rolled them back to their previous images")
    elif not changed:
        note(f"update: nothing to update: {', '.join(names)} already run(s) the image just built"
             + (f" on role {', '.join(roles)}" if roles else ""))
        return
    _say_changes("update", current, new, changed)
    _rollout(client, stack, new, changed, batch, timeout, "update", max_fail)


def _say_changes(what: str, old: dict, new: dict, changed: list[str]) -> None:
    from undercloud.overcloud import deployed

    before, after = deployed.refs(old), deployed.refs(new)
    for key in changed:
        role, _, param = key.rpartition(":")
        services = ", ".join((new["images"].get(param) or old["images"].get(param) or {}).get("services") or [param])
        was = before.get(key) or before.get(param)  # a role without its own image ran the set's
        now = after.get(key) or after.get(param)
        note(f"{what}: {services}{' on role ' + role if role else ''}: {was} -> {now}")


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
    from undercloud.overcloud import deployed, rollout

    client = Client(timeout=600)
    sets = _deployed_set(client, stack)
    previous = sets.get("previous")
    if not previous:
        raise UndercloudError(f"stack {stack} has no previous deployed set to roll back to "
                              f"(no update changed its images yet)", "--stack")
    current = sets["current"]
    images = {p: i for p, i in previous["images"].items() if p in current["images"]}
    previous = {**previous, "images": {**current["images"], **images},
                "overrides": {role: {p: i for p, i in over.items() if p in current["images"]}
                              for role, over in (previous.get("overrides") or {}).items()}}
    for i in deployed.every_image(previous):
        try:
            client.get(f"/v1/images/{i['id']}")
        except NotFound:
            raise UndercloudError(f"image {i['name']} ({i['ref']}) of the previous set is no longer in the "
                                  f"image store: nothing to roll {', '.join(i['services'])} back to",
                                  "--stack") from None
    changed = rollout.changed(current, previous)
    if not changed:
        note("rollback: nothing to do: the previous set has the same images")
        return
    _say_changes("rollback", current, previous, changed)
    _rollout(client, stack, previous, changed, batch, timeout, "rollback")
