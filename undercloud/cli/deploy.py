"""`undercloud deploy`: deploy (or update) the overcloud from roles and the service library."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from undercloud.cli.client import Client
from undercloud.cli.output import note
from undercloud.errors import NotFound, UndercloudError

POLL = 0.5


class DeployFailed(UndercloudError):
    pass


def node_targets(hypervisor: str) -> list:
    from undercloud.images import catalog

    types = {"container": ("oci",), "vm": ("qcow2",), "baremetal": ("qcow2",)}[hypervisor]
    targets = catalog.targets("overcloud-full", types)
    if hypervisor == "baremetal":
        targets += catalog.targets("deploy-ramdisk")
    return targets


def build_images(client: Client, hypervisor: str) -> dict[str, str]:
    """Build what is missing (node image, service images); returns the image parameters."""
    from undercloud.cli.image import build_targets
    from undercloud.images import catalog
    from undercloud.orchestration import overcloud

    wanted = sorted(set(overcloud.SERVICE_IMAGES.values()))
    targets = node_targets(hypervisor) + [t for name in wanted for t in catalog.targets(name)]
    records = {r["name"]: r for r in build_targets(client, targets)}
    params: dict = {}
    sources = {}
    for param, name in overcloud.SERVICE_IMAGES.items():
        ref = (records.get(name, {}).get("properties") or {}).get("podman_image")
        if not ref:
            raise UndercloudError(f"image {name} has no podman_image property after the build", "deploy")
        params[param] = ref
        sources[ref] = f"/v1/images/{records[name]['id']}/file"
    if hypervisor != "container":
        # Container nodes share the host's podman, which has the images; VMs and bare metal
        # load them from the image store when a Pod first needs one.
        params["ServiceImageSources"] = sources
    return params


def virtual_ip_parameters(client: Client, stack: str, hypervisor: str) -> dict:
    """PublicVirtualIP (an address the nodes' network keeps for VIPs, the same at every
    deploy of the stack; keepalived holds it on the haproxy nodes) and keepalived's
    virtual_router_id. An environment may set both."""
    from undercloud.orchestration import overcloud

    net = client.get(f"/v1/hypervisors/{hypervisor}/network")
    vip = overcloud.choose_virtual_ip(client.home.path, stack, net.get("virtual_ips") or [])
    return {"PublicVirtualIP": vip, "KeepalivedVirtualRouterId": overcloud.virtual_router_id(client.home.instance, vip)}


class Progress:
    """Progress per role / step / service on stderr, from the stack's resources."""

    def __init__(self, plan, start: float, before: list[dict]):
        # Resources as they were before this operation: an update reports only what it touches.
        self.plan, self.start = plan, start
        self.before = {r["resource_name"]: (r["resource_status"], r.get("updated_time")) for r in before}
        self.seen: dict[str, str] = {}

    def say(self, msg: str) -> None:
        note(f"[{time.monotonic() - self.start:6.1f}s] {msg}")

    def update(self, rows: list[dict]) -> None:
        from undercloud.orchestration.overcloud import STEP_NAMES

        by = {r["resource_name"]: r for r in rows}
        for role in self.plan.roles:
            for name, what in [(f"{role.name}Servers", "servers")] + [
                    (f"{role.name}Deployment_Step{n}", n) for n in STEP_NAMES]:
                r = by.get(name)
                if r is None:
                    continue
                status = r["resource_status"]
                if self.seen.get(name) == status or self.before.get(name) == (status, r.get("updated_time")):
                    continue
                self.seen[name] = status
                action, _, state = status.partition("_")
                if what == "servers":
                    if state == "IN_PROGRESS":
                        self.say(f"{role.name}: servers ({action.lower()})")
                    elif state == "COMPLETE":
                        self.say(f"{role.name}: servers ready")
                    continue
                services = ", ".join(self.plan.services_at(role, what)) or "no services"
                if state == "IN_PROGRESS":
                    self.say(f"step {what} ({STEP_NAMES[what]}) on {role.name}: {services}")
                elif state == "COMPLETE":
                    self.say(f"step {what} on {role.name}: healthy on every node")


def failure_details(client: Client, stack: str) -> tuple[str, list[str]]:
    """(one line naming step, node, service and health check; the service's log tail)."""
    import re

    s = client.get(f"/v1/stacks/{stack}")
    rows = client.get(f"/v1/stacks/{stack}/resources", params={"nested_depth": 2})
    for r in rows:
        m = re.match(r"^(\w+)Deployment_Step(\d)\.(.+)$", r.get("path") or "")
        if not m or not r["resource_status"].endswith("FAILED"):
            continue
        role, step, node = m.groups()
        try:
            reason = client.get(f"/v1/stacks/{stack}/resources/{r['path']}").get("resource_status_reason") or ""
        except UndercloudError:
            reason = ""
        detail = re.search(r"non-zero status code: -?\d+ \((.*)\)$", reason, re.S)
        text = detail.group(1) if detail else reason
        head, _, tail = text.partition(" | last lines of its log: | ")
        return (f"step {step} failed on node {node} (role {role}): {head}",
                [x for x in tail.split(" | ") if x] if tail else [])
    return f"stack {stack} {s['stack_status']}: {s['stack_status_reason']}", []


def resources(client: Client, stack: str) -> list[dict]:
    try:
        return client.get(f"/v1/stacks/{stack}/resources")
    except NotFound:
        return []


def wait(client: Client, stack: str, plan, start: float, before: list[dict]) -> dict:
    progress = Progress(plan, start, before)
    while True:
        s = client.get(f"/v1/stacks/{stack}")
        progress.update(resources(client, stack))
        status = s["stack_status"]
        if not status.endswith("_IN_PROGRESS"):
            if status.endswith("_FAILED"):
                line, tail = failure_details(client, stack)
                if tail:
                    note("last lines of the service's log:")
                for t in tail:
                    note(f"  | {t}")
                raise DeployFailed(line, "deploy")
            return s
        time.sleep(POLL)


def outputs(client: Client, stack: str) -> dict:
    return {o["output_key"]: o.get("output_value") for o in client.get(f"/v1/stacks/{stack}/outputs")}


def finish(client: Client, stack: str) -> None:
    from undercloud.orchestration import overcloud

    out = outputs(client, stack)
    endpoints = out.get("EndpointMap") or {}
    path = overcloud.write_clouds_yaml(client.home.path, stack, endpoints.get("keystone", ""))
    for service, url in sorted(endpoints.items()):
        click.echo(f"{service:<10} {url}")
    note(f"clouds.yaml: {path} (admin credentials; `openstack --os-cloud {stack} ...` with "
         f"OS_CLIENT_CONFIG_FILE={path}, or `undercloud overcloud clouds-yaml`)")


@click.command()
@click.option("--example", type=click.Choice(["minimal", "ha"]),
              help="A shipped example: minimal (one controller, every service; the default when "
                   "neither --roles nor -e is given) or ha (three controllers behind haproxy + a database node).")
@click.option("--roles", type=click.Path(dir_okay=False), help="Your roles_data.yaml (TripleO format).")
@click.option("-e", "--environment", "environments", multiple=True, type=click.Path(dir_okay=False),
              help="An environment file (parameter_defaults such as ControllerCount, resource_registry "
                   "mapping a service to OS::Heat::None...); repeat to merge several, in order.")
@click.option("--hypervisor", type=click.Choice(["container", "vm", "baremetal"]), default="container",
              show_default=True, help="How nodes are realised (the flavor of every role).")
@click.option("--stack", default="overcloud", show_default=True, help="The stack's name.")
@click.option("--timeout", type=float, default=60, show_default=True, metavar="MINUTES",
              help="Fail what is still in progress after this long.")
def deploy(example, roles, environments, hypervisor, stack, timeout):
    """Deploy the overcloud, or bring it to what the roles and environments now say.

    Builds the images that are missing (node image, one image per service), renders the
    overcloud templates from the roles (TripleO's roles_data.yaml: per role a group of
    servers, its services and deploy steps 1..5), then creates or updates the stack.
    Progress per role, step and service goes to stderr; a step starts only when the
    previous one is healthy on every node. At the end: the endpoints (stdout) and the path
    of a generated clouds.yaml. Run again with no change, it does nothing and says so.

    \b
    Examples:
      undercloud deploy                          # the `minimal` example, container nodes
      undercloud deploy --example ha
      undercloud deploy --roles my_roles.yaml -e counts.yaml
      openstack --os-cloud overcloud token issue  # with OS_CLIENT_CONFIG_FILE=<path shown>
    """
    from undercloud.orchestration import overcloud
    from undercloud.orchestration.template import Bundle

    start = time.monotonic()
    if not example and not roles and not environments:
        example = "minimal"
    client = Client(timeout=600)
    home = client.home.path
    overcloud.stack_dir(home, stack)  # refuses a bad name before any work
    role_list = overcloud.load_roles(overcloud.roles_file_for(example, roles))
    env_paths = [Path(e) for e in environments]
    for e in env_paths:
        if not e.is_file():
            raise UndercloudError("environment file not found", str(e))
    note(f"images: building what is missing for {hypervisor} nodes")
    images = build_images(client, hypervisor)
    images.update(virtual_ip_parameters(client, stack, hypervisor))
    plan = overcloud.render(home, stack, role_list, images, hypervisor, example, env_paths)
    bundle = Bundle.from_paths(str(plan.template), env_paths=[str(p) for p in plan.environments]).to_json()
    secrets = overcloud.load_secrets(home, stack)
    params = {k: secrets[k] for k in overcloud.SECRETS}
    digest = overcloud.digest({"bundle": bundle, "parameters": params})
    last_file = overcloud.stack_dir(home, stack) / "last-deploy.json"
    try:
        current = client.get(f"/v1/stacks/{stack}")
    except NotFound:
        current = None
    body = {"bundle": bundle, "parameters": params, "timeout": timeout * 60}
    before = resources(client, stack) if current is not None else []
    stack_start = time.monotonic()
    if current is None:
        note(f"stack {stack}: creating ({', '.join(f'{r.name}' for r in role_list)})")
        client.post("/v1/stacks", json={"name": stack, **body})
    else:
        try:
            last = json.loads(last_file.read_text())
        except (OSError, ValueError):
            last = {}
        status = current["stack_status"]
        if (last.get("digest") == digest and last.get("stack_id") == current["id"]
                and status in ("CREATE_COMPLETE", "UPDATE_COMPLETE")):
            note(f"stack {stack}: no change since the last deploy ({status}); nothing to do")
            finish(client, stack)
            return
        if status.endswith("_IN_PROGRESS"):
            raise UndercloudError(f"stack {stack} is {status}: wait for it or `undercloud stack cancel {stack}`",
                                  "deploy")
        note(f"stack {stack}: updating ({status} before)")
        client.patch(f"/v1/stacks/{stack}", json=body)
    s = wait(client, stack, plan, start, before)
    overcloud.write_private(last_file, json.dumps({"digest": digest, "stack_id": s["id"]}))
    now = time.monotonic()
    note(f"stack {stack}: {s['stack_status']} in {now - stack_start:.1f} s ({now - start:.1f} s with the images)")
    finish(client, stack)
