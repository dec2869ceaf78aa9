"""The overcloud's workflows (deploy; update, rollback, replace, scale and delete to come),
run by the service (api/workflows.py) so that they survive their client: the CLI starts
one, or attaches to the one running, and follows its events.

Each workflow is written against `client` (the API client's interface: get, post, put,
patch, delete, stream and its home; in the service, a client of its own API over loopback)
and `out`, the sink of its lines: `out.note(text)` a progress line (stderr in the CLI),
`out.echo(text)` a result line (stdout). So the same code makes the same calls in the
same order as the CLI did, and says the same words. Every step is idempotent: a workflow
interrupted by a restart of the service runs again from the start and converges, as
`undercloud deploy` run again does.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from pathlib import Path
from typing import Protocol

from undercloud.errors import InvalidInput, NotFound, UndercloudError

POLL = 0.5


class Output(Protocol):
    def note(self, text: str) -> None: ...

    def echo(self, text: str) -> None: ...


class DeployFailed(UndercloudError):
    pass


def input_digest(kind: str, input: dict) -> str:
    """What makes two requests the same workflow: the kind, the input and the content of the
    files it names (an environment edited since is another deploy)."""
    files = {}
    for p in [input.get("roles"), *(input.get("environments") or [])]:
        if p:
            try:
                files[p] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
            except OSError:
                files[p] = None
    text = json.dumps({"kind": kind, "input": input, "files": files}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def node_targets(hypervisor: str) -> list:
    from undercloud.images import catalog
    from undercloud.overcloud.deploy import NODE_IMAGE_TYPES
    from undercloud.overcloud.plan import node_kind

    targets = catalog.targets("overcloud-full", NODE_IMAGE_TYPES[node_kind(hypervisor)])
    if hypervisor == "baremetal":
        targets += catalog.targets("deploy-ramdisk")
    return targets


def deployed_records(client, library, current: dict | None) -> dict[str, dict]:
    """The image records of the deployed set that the library still uses, by image name:
    a deploy keeps what runs (`overcloud update` changes service images)."""
    names = library.images()
    have = {}
    for param, i in ((current or {}).get("images") or {}).items():
        if names.get(param) == i.get("name"):
            try:
                have[i["name"]] = client.get(f"/v1/images/{i['id']}")
            except NotFound:
                pass  # removed behind our back: built again below
    return have


def build_images(client, out: Output, hypervisor: str, library, current: dict | None = None) -> tuple[dict, dict]:
    """Build what is missing (node image, the service images the enabled services declare
    and the deployed set has not); returns (the image parameters, the records by name)."""
    from undercloud.cli.image import build_targets
    from undercloud.images import catalog
    from undercloud.overcloud import deploy as od

    have = deployed_records(client, library, current)
    targets = node_targets(hypervisor) + [t for name in od.service_images(library) if name not in have
                                          for t in catalog.targets(name)]
    records = {r["name"]: r for r in build_targets(client, targets, say=out.note, progress=out.note)}
    records.update(have)
    return od.image_parameters(library, records), records


def network_parameters(client, stack: str, hypervisor: str) -> dict:
    """PublicVirtualIP (an address the nodes' network keeps for VIPs, which the service
    holds for the stack: the same at every deploy; keepalived holds it on the haproxy
    nodes) and keepalived's virtual_router_id. An environment may set both. Where the nodes
    have a port on the lab bridge without an address (container nodes), Neutron's flat
    provider network `datacentre` is bridged to it: the overcloud's instances can then be
    on the lab network. Servers of another cloud: none of these (the first haproxy node's
    address serves)."""
    from undercloud.overcloud import addresses
    from undercloud.overcloud.plan import node_cloud

    if node_cloud(hypervisor):
        return {}
    net = client.post(f"/v1/hypervisors/{hypervisor}/network/virtual-ip", json={"stack": stack})
    vip = net["virtual_ip"]
    params = {"PublicVirtualIP": vip,
              "KeepalivedVirtualRouterId": addresses.virtual_router_id(client.home.instance, vip)}
    if net.get("provider_interface"):
        params["NeutronPhysicalInterfaceMappings"] = [f"datacentre:{net['provider_interface']}"]
    return params


def lab_network_parameters(client, out: Output, library) -> dict:
    """UndercloudLabNetwork, for the services that take it (a hypervisor host's worker): the
    container lab network of the host this deploy talks to, which the new host's servers join
    (made here when missing). A host without container servers has none to join."""
    if not any("UndercloudLabNetwork" in s.parameters for s in library.enabled):
        return {}
    try:
        return {"UndercloudLabNetwork": client.get("/v1/hypervisors/container/network")["network"]}
    except UndercloudError as exc:
        out.note(f"hypervisor hosts keep their servers on networks of their own: {exc.message}")
        return {}


def resources(client, stack: str) -> list[dict]:
    try:
        return client.get(f"/v1/stacks/{stack}/resources")
    except NotFound:
        return []


def wait(client, out: Output, stack: str, plan, start: float, before: list[dict]) -> dict:
    from undercloud.overcloud.deploy import Progress, failure_details

    progress = Progress(plan, start, before, out.note)
    while True:
        s = client.get(f"/v1/stacks/{stack}")
        progress.update(resources(client, stack))
        status = s["stack_status"]
        if not status.endswith("_IN_PROGRESS"):
            if status.endswith("_FAILED"):
                line, tail = failure_details(client.get, stack)
                if tail:
                    out.note("last lines of the service's log:")
                for t in tail:
                    out.note(f"  | {t}")
                raise DeployFailed(line, "deploy")
            return s
        time.sleep(POLL)


def new_identifier() -> str:
    return uuid.uuid4().hex[:16]


def drifted(client, stack: str) -> list[dict]:
    """The services not healthy now (`overcloud status`'s checks, as the nodes' agents
    report them); none when the stack has no outputs to check yet (a create that failed)."""
    try:
        rows = client.get(f"/v1/overclouds/{stack}/status", params={"wait": 15.0})
    except UndercloudError:
        return []
    return [r for r in rows if r["health"] != "healthy" and not r["health"].startswith("not checked")]


def power_on_stopped(client, out: Output, drift: list[dict]) -> None:
    """Nodes of the drifted services that stopped as a whole (every controller off, a host
    restarted, a container node's container exited) are powered on before the steps run
    again: their agents start their Pods, and clustered services rejoin. A machine that is
    gone is refused here, naming `overcloud replace`, before the stack changes (its agent
    would never answer: the steps would wait for it until the stack's timeout)."""
    for name in sorted({r["node"] for r in drift}):
        try:
            server = client.get(f"/v1/servers/{name}")
        except NotFound:
            continue
        if server["status"] not in ("SHUTOFF", "ERROR"):
            continue
        try:
            client.post(f"/v1/servers/{name}/action", json={"action": "power-on"})
        except UndercloudError as exc:
            if "machine is gone" in exc.message:
                raise UndercloudError(f"node {name}: the machine is gone; `undercloud overcloud replace {name}` "
                                      f"makes it again", "deploy") from None
            out.note(f"node {name} is {server['status']} and was not powered on: {exc.message}")
            continue
        out.note(f"repaired: node {name} was {server['status']}: powered on")


def report_repairs(client, out: Output, stack: str) -> None:
    """What the steps' runs repaired (the stack output Repairs), one line each."""
    said = 0
    for _role, steps in sorted((outputs(client, stack).get("Repairs") or {}).items()):
        for _step, nodes in sorted((steps or {}).items()):
            for node, items in sorted((nodes or {}).items()):
                for item in items or []:
                    pod, _, what = str(item).partition(": ")
                    out.note(f"repaired: {pod} on {node}: {what}")
                    said += 1
    if not said:
        out.note("repaired: nothing needed it when the steps ran again (each service was running and ready)")


def scale_in(client, out: Output, stack: str, body: dict, library, yes: bool, secrets: dict):
    """The nodes this update removes (the engine's dry run), compute nodes drained first:
    their instances refused unless `yes`, else deleted, then their nova-compute records.
    Returns (connection to the overcloud or None, the compute nodes drained)."""
    from undercloud.overcloud import scale
    from undercloud.overcloud.clouds import admin_password

    dry = client.patch(f"/v1/stacks/{stack}", json={**body, "dry_run": True})
    removed = scale.removed_nodes(stack, dry, client.get)
    if not removed:
        return None, []
    out.note(f"scale-in: removing {', '.join(sorted(removed))}")
    computes = sorted(n for n, role in removed.items() if scale.COMPUTE_SERVICE in library.service_names(role))
    keystone = (outputs(client, stack).get("EndpointMap") or {}).get("keystone")
    if not computes or not keystone:
        return None, []
    conn = scale.connect(keystone, admin_password(secrets, stack))
    busy = {n: [s.name for s in overcloud_call(f"cannot ask the overcloud's Compute API which instances run on {n}",
                                               scale.instances_on, conn, n)] for n in computes}
    busy = {n: names for n, names in busy.items() if names}
    if busy and not yes:
        raise UndercloudError("scale-in would remove " + "; ".join(
            f"{n}, which runs instance(s) {', '.join(names)}" for n, names in sorted(busy.items()))
            + ": delete or move them, or deploy again with --yes to delete them first", "deploy")
    for n in computes:
        overcloud_call(f"drain {n}", scale.drain, conn, n, out.note)
    return conn, computes


def overcloud_call(what: str, fn, *args):
    """A call to the overcloud's APIs: its errors as one line, no traceback."""
    try:
        return fn(*args)
    except UndercloudError:
        raise
    except Exception as exc:  # noqa: BLE001 - openstacksdk and keystoneauth errors alike
        raise UndercloudError(f"{what}: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}",
                              "deploy") from None


def outputs(client, stack: str) -> dict:
    return {o["output_key"]: o.get("output_value") for o in client.get(f"/v1/stacks/{stack}/outputs")}


def finish(client, out: Output, stack: str, secrets: dict) -> dict:
    """Waits for the endpoints, prints them, writes clouds.yaml; returns {endpoints, clouds_yaml}."""
    from undercloud.overcloud.clouds import write_clouds_yaml
    from undercloud.overcloud.deploy import ENDPOINT_WAIT, wait_for_endpoints

    endpoints = outputs(client, stack).get("EndpointMap") or {}
    failing = wait_for_endpoints(endpoints)
    if failing:
        raise DeployFailed("; ".join(f"{svc} at {endpoints[svc]} does not answer through the virtual IP "
                                     f"after {ENDPOINT_WAIT:.0f} s ({why})" for svc, why in sorted(failing.items())),
                           "deploy")
    for service, url in sorted(endpoints.items()):
        out.echo(f"{service:<10} {url}")
    if not endpoints.get("keystone"):
        out.note("no keystone in this overcloud: no clouds.yaml")
        return {"endpoints": endpoints, "clouds_yaml": None}
    path = write_clouds_yaml(client.home.path, stack, endpoints["keystone"], secrets)
    out.note(f"clouds.yaml: {path} (admin credentials; `openstack --os-cloud {stack} ...` with "
             f"OS_CLIENT_CONFIG_FILE={path}, or `undercloud overcloud clouds-yaml`)")
    return {"endpoints": endpoints, "clouds_yaml": str(path)}


def deploy_input(example: str | None, roles: str | None, environments, hypervisor: str, timeout: float,
                 yes: bool) -> dict:
    """The deploy's input as the service takes it (paths absolute: the service reads them)."""
    import os

    if not example and not roles and not environments:
        example = "minimal"
    return {"example": example, "roles": os.path.abspath(roles) if roles else None,
            "environments": [os.path.abspath(e) for e in environments], "hypervisor": hypervisor,
            "timeout": float(timeout), "yes": bool(yes)}


def check_deploy(stack: str, input: dict):
    """What can be refused before anything is asked of the service, in `undercloud deploy`'s
    words: (roles, environment paths, library)."""
    from undercloud.overcloud import plan as op
    from undercloud.overcloud.roles import load_roles, roles_file_for
    from undercloud.overcloud.secrets import stack_dir

    stack_dir(Path("."), stack)
    example, roles = input.get("example"), input.get("roles")
    hypervisor = input.get("hypervisor") or "container"
    if hypervisor not in op.HYPERVISOR_FLAVORS and not op.node_cloud(hypervisor):
        raise InvalidInput(f"{hypervisor!r}: one of {', '.join(op.HYPERVISOR_FLAVORS)}, or openstack:<cloud>",
                           "--hypervisor")
    role_list = load_roles(roles_file_for(example, roles))
    env_paths = [Path(e) for e in input.get("environments") or []]
    for e in env_paths:
        if not e.is_file():
            raise UndercloudError("environment file not found", str(e))
    library = op.resolve(role_list, op.environments_for(example, env_paths))
    op.check_required(library, op.environments_for(example, env_paths))
    return role_list, env_paths, library


def deploy(client, out: Output, stack: str, input: dict) -> dict:
    """`undercloud deploy`: plans the roles, builds the images that are missing, asks for
    the VIP, keeps the secrets, renders the plan, creates or updates the stack, follows it,
    waits for the endpoints and writes clouds.yaml. Returns {stack, stack_status, endpoints,
    clouds_yaml, changed}."""
    from undercloud.orchestration.template import Bundle
    from undercloud.overcloud import deployed
    from undercloud.overcloud import plan as op
    from undercloud.overcloud.secrets import secrets_given
    from undercloud.overcloud.state import StackState

    start = time.monotonic()
    role_list, env_paths, library = check_deploy(stack, input)
    example, hypervisor = input.get("example"), input.get("hypervisor") or "container"
    timeout, yes = float(input.get("timeout") or 60), bool(input.get("yes"))
    home = client.home.path
    state = StackState(client, stack)
    wrong = op.container_roles(library, role_list, op.environments_for(example, env_paths), hypervisor,
                               lambda name: client.get(f"/v1/flavors/{name}")["hypervisor_type"])
    if wrong:
        raise UndercloudError(wrong[0], "deploy")
    if op.node_cloud(hypervisor):
        try:
            client.get(f"/v1/clouds/{op.node_cloud(hypervisor)}")  # known here, before any work
        except NotFound as exc:
            raise UndercloudError(exc.message, f"--hypervisor {hypervisor}") from None
    out.note(f"images: building what is missing for {hypervisor} nodes")
    current_set = deployed.load(state).get("current")
    images, records = build_images(client, out, hypervisor, library, current_set)
    # The images a role runs instead (`overcloud update --role`) stay, as the set's do.
    overrides = deployed.kept_overrides(current_set, images, [r.name for r in role_list])
    images.update(deployed.override_parameters(images, overrides, list(overrides)))
    if "ServiceImageSources" in images:
        images["ServiceImageSources"].update(deployed.sources(i for over in overrides.values() for i in over.values()))
    images.update(network_parameters(client, stack, hypervisor))
    images.update(lab_network_parameters(client, out, library))
    kinds = library.secrets()
    secrets = state.secrets(kinds, secrets_given(env_paths, set(kinds)))
    plan = op.render(home, stack, role_list, library, images, hypervisor, example, env_paths, secrets)
    bundle = Bundle.from_paths(str(plan.template), env_paths=[str(p) for p in plan.environments]).to_json()
    params = {k: secrets[k] for k in plan.secret_names}
    digest = op.digest({"bundle": bundle, "parameters": params})
    try:
        current = client.get(f"/v1/stacks/{stack}")
    except NotFound:
        current = None
    last = state.get("last-deploy", {})
    # DeployIdentifier: kept while nothing drifted (unchanged steps do not run again); a new
    # one when a service is not healthy, so every step runs again and repairs it.
    identifier = last.get("deploy_identifier") or new_identifier()
    drift = []
    if current is not None and not current["stack_status"].endswith("_IN_PROGRESS"):
        drift = drifted(client, stack)
        if drift:
            identifier = new_identifier()
    body = {"bundle": bundle, "parameters": {**params, "DeployIdentifier": identifier}, "timeout": timeout * 60}
    drained = (None, [])
    before = resources(client, stack) if current is not None else []
    stack_start = time.monotonic()
    if current is None:
        out.note(f"stack {stack}: creating ({', '.join(f'{r.name}' for r in role_list)})")
        client.post("/v1/stacks", json={"name": stack, **body})
    else:
        status = current["stack_status"]
        unchanged = (last.get("digest") == digest and last.get("stack_id") == current["id"]
                     and status in ("CREATE_COMPLETE", "UPDATE_COMPLETE"))
        if unchanged and not drift:
            out.note(f"stack {stack}: no change since the last deploy ({status}) and every service is healthy; "
                     f"nothing to do")
            return {"stack": stack, "stack_status": status, "changed": False, **finish(client, out, stack, secrets)}
        if status.endswith("_IN_PROGRESS"):
            raise UndercloudError(f"stack {stack} is {status}: wait for it or `undercloud stack cancel {stack}`",
                                  "deploy")
        if drift:
            out.note(f"stack {stack}: {len(drift)} service(s) not healthy: "
                     + "; ".join(f"{r['service']} on {r['node']} ({r['health']})" for r in drift)
                     + ("; every step runs again to repair them" if unchanged else ""))
        if drift:
            power_on_stopped(client, out, drift)
        if not unchanged:
            drained = scale_in(client, out, stack, body, library, yes, secrets)
        out.note(f"stack {stack}: updating ({status} before{', no change to the stack' if unchanged else ''})")
        client.patch(f"/v1/stacks/{stack}", json=body)
    s = wait(client, out, stack, plan, start, before)
    conn, gone = drained
    for node in gone:  # now that the node is gone, its agents cannot register again
        from undercloud.overcloud.scale import forget_agents
        overcloud_call(f"forget the Neutron agents of {node}", forget_agents, conn, node, out.note)
    state.put("last-deploy", {"digest": digest, "stack_id": s["id"], "deploy_identifier": identifier})
    deployed.record(state, {**deployed.make_set(library, records, hypervisor), "overrides": overrides})
    now = time.monotonic()
    out.note(f"stack {stack}: {s['stack_status']} in {now - stack_start:.1f} s ({now - start:.1f} s with the images)")
    if drift:
        report_repairs(client, out, stack)
    return {"stack": stack, "stack_status": s["stack_status"], "changed": True, **finish(client, out, stack, secrets)}


# kind -> the function that runs it: (client, out, stack, input) -> result
KINDS = {"deploy": deploy}
