"""`undercloud overcloud ...`: the deployed overcloud (credentials, health, removal)."""

from __future__ import annotations

import re
import shutil
import socket
import time
import urllib.error
import urllib.request

import click

from undercloud.cli.client import Client
from undercloud.cli.output import formatted, note
from undercloud.errors import NotFound, UndercloudError

STACK_OPTION = click.option("--stack", default="overcloud", show_default=True, help="The overcloud's stack name.")


@click.group()
def overcloud() -> None:
    """The overcloud that `undercloud deploy` made: credentials, status, delete.

    \b
    Example:
      undercloud overcloud clouds-yaml > clouds.yaml
      OS_CLIENT_CONFIG_FILE=clouds.yaml openstack --os-cloud overcloud token issue
      undercloud overcloud status
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
    from undercloud.orchestration.overcloud.clouds import admin_password
    from undercloud.orchestration.overcloud.clouds import clouds_yaml as render

    client = Client()
    endpoints = _outputs(client, stack).get("EndpointMap") or {}
    if not endpoints.get("keystone"):
        raise UndercloudError(f"stack {stack} has no keystone endpoint (not deployed, or keystone disabled)",
                              "--stack")
    click.echo(render(stack, endpoints["keystone"], admin_password(client.home.path, stack)), nl=False)


def probe(address: str, check: str, timeout: float = 2.0) -> str:
    """Run a health check ("HTTP GET :PORT/PATH" or "TCP :PORT") against `address`."""
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


def probe_container(container: str, spec: dict) -> str:
    """A Pod's exec readiness probe, run inside its container through the host's podman
    (container nodes); elsewhere the node's agent runs it."""
    from undercloud.host import podman as hp

    state = hp.podman("container", "inspect", container, "--format", "{{.State.Status}}", check=False)
    if state.returncode != 0:
        return "not checked from here (the node's agent runs it)"
    if state.stdout.strip() != "running":
        return f"failing (container {state.stdout.strip()})"
    timeout = int(spec.get("timeoutSeconds") or 10)
    try:
        p = hp.podman("exec", container, *[str(a) for a in spec["exec"]["command"]], check=False, timeout=timeout + 5)
    except UndercloudError:  # podman exec did not finish in time
        return f"failing (no answer within {timeout + 5} s)"
    if p.returncode == 0:
        return "healthy"
    last = (p.stderr or p.stdout).strip().splitlines()[-1:] or [""]
    return f"failing (exit {p.returncode}{': ' + last[0][:120] if last[0] else ''})"


def check(instance: str, node: str, address: str, service: list) -> str:
    """One service's health on one node: its readiness probes (HTTP and TCP from this host
    to the node's address, exec inside the container), else its health check words."""
    name, _step, words, *rest = service
    pod, probes = (rest + [None, []])[:2]
    results = []
    for container, spec in probes or []:
        if "exec" in spec:
            results.append(probe_container(f"{instance}-{node}-{pod}-{container}", spec))
        elif "httpGet" in spec:
            h = spec["httpGet"]
            results.append(probe(h.get("host") or address, f"HTTP GET :{h['port']}{h.get('path', '/')}"))
        elif "tcpSocket" in spec:
            results.append(probe(spec["tcpSocket"].get("host") or address, f"TCP :{spec['tcpSocket']['port']}"))
    if not results:
        return probe(address, words) if address else "no address"
    return next((r for r in results if r != "healthy"), "healthy")


def node_reports(client: Client, nodes: list[str]) -> dict[str, dict]:
    """node -> what its agent's watchdog last reported (nodes that have not reported: none)."""
    reports = {}
    for node in nodes:
        try:
            reports[node] = client.get(f"/v1/servers/{node}/health")
        except UndercloudError:
            continue
    return reports


def service_health(client: Client, stack: str) -> list[dict]:
    """One row per service per node: its health checked now (probes from this host, exec
    ones inside the container on container nodes; a container its agent reports stopped is
    not healthy either), and from the agent's report its restarts, image and config."""
    from concurrent.futures import ThreadPoolExecutor

    out = _outputs(client, stack)
    nodes, services = out.get("RoleNodes") or {}, out.get("RoleServices") or {}
    todo = [(role, node, address, svc) for role, members in sorted(nodes.items())
            for node, address in sorted((members or {}).items()) for svc in services.get(role) or []]
    reports = node_reports(client, sorted({node for _, node, _, _ in todo}))

    def row(item) -> dict:
        role, node, address, svc = item
        pod = (svc[3:4] or [None])[0]
        seen = ((reports.get(node) or {}).get("pods") or {}).get(pod) or {}
        containers = seen.get("containers") or {}
        health = check(client.home.instance, node, address, svc) if address else "no address"
        stopped = sorted(f"{c} {x.get('state')}" for c, x in containers.items()
                         if x.get("state") not in ("running", "supervised", None))
        if health == "healthy" and stopped:
            health = f"failing ({', '.join(stopped)})"
        last = max((x.get("last_restart") or {} for x in containers.values()), key=lambda r: r.get("at", ""),
                   default={})
        return {"role": role, "node": node, "address": address, "service": svc[0], "step": svc[1],
                "health_check": svc[2], "health": health,
                "restarts": sum(int(x.get("restarts") or 0) for x in containers.values()) if seen else None,
                "image": ",".join(sorted({x.get("image_id") or x.get("image", "") for x in containers.values()})),
                "config": seen.get("config", ""), "last_restart": last.get("why", "")}

    with ThreadPoolExecutor(8) as pool:  # checks wait on the network and on podman exec: in parallel
        return list(pool.map(row, todo))


@overcloud.command()
@STACK_OPTION
@formatted(["role", "node", "address", "service", "step", "health_check", "health", "restarts", "image", "config"])
def status(stack):
    """Every node, its services and their health checks, checked now from this host (exec
    checks inside their containers, on container nodes), with what each node's agent
    reports: restarts (its watchdog's and podman's), image and configuration versions (a
    half-rolled change shows as mixed versions). `-f json` adds the last restart's reason."""
    client = Client()
    try:
        s = client.get(f"/v1/stacks/{stack}")
    except NotFound:
        raise NotFound(f"no overcloud stack {stack!r}: run `undercloud deploy`", "--stack") from None
    note(f"stack {stack}: {s['stack_status']}" + (f" ({s['stack_status_reason']})"
                                                  if s["stack_status"].endswith("FAILED") else ""))
    return service_health(client, stack)


@overcloud.command()
@STACK_OPTION
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(stack, yes):
    """Delete the overcloud: its stack (servers and the services on them) and its plan,
    secrets and clouds.yaml in the home. Nothing of it is left on the host."""
    from undercloud.cli.stack import wait_for
    from undercloud.orchestration.overcloud.secrets import stack_dir

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
    shutil.rmtree(stack_dir(client.home.path, stack), ignore_errors=True)
    note(f"overcloud {stack} deleted in {time.monotonic() - start:.1f} s")
