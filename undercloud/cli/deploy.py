"""`undercloud deploy`: deploy (or update) the overcloud from roles and the service library."""

from __future__ import annotations

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
    from undercloud.overcloud.deploy import NODE_IMAGE_TYPES
    from undercloud.overcloud.plan import node_kind

    targets = catalog.targets("overcloud-full", NODE_IMAGE_TYPES[node_kind(hypervisor)])
    if hypervisor == "baremetal":
        targets += catalog.targets("deploy-ramdisk")
    return targets


def deployed_records(client: Client, library, current: dict | None) -> dict[str, dict]:
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


def build_images(client: Client, hypervisor: str, library, current: dict | None = None) -> tuple[dict, dict]:
    """Build what is missing (node image, the service images the enabled services declare
    and the deployed set has not); returns (the image parameters, the records by name)."""
    from undercloud.cli.image import build_targets
    from undercloud.images import catalog
    from undercloud.overcloud import deploy as od

    have = deployed_records(client, library, current)
    targets = node_targets(hypervisor) + [t for name in od.service_images(library) if name not in have
                                          for t in catalog.targets(name)]
    records = {r["name"]: r for r in build_targets(client, targets)}
    records.update(have)
    return od.image_parameters(library, records), records


def network_parameters(client: Client, stack: str, hypervisor: str) -> dict:
    """PublicVirtualIP (an address the nodes' network keeps for VIPs, which the service
    holds for the stack: the same at every deploy; keepalived holds it on the haproxy
    nodes) and keepalived's
    virtual_router_id. An environment may set both. Where the nodes have a port on the lab
    bridge without an address (container nodes), Neutron's flat provider network
    `datacentre` is bridged to it: the overcloud's instances can then be on the lab network.
    Servers of another cloud: none of these (the first haproxy node's address serves)."""
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


def lab_network_parameters(client: Client, library) -> dict:
    """UndercloudLabNetwork, for the services that take it (a hypervisor host's worker): the
    container lab network of the host this deploy talks to, which the new host's servers join
    (made here when missing). A host without container servers has none to join."""
    if not any("UndercloudLabNetwork" in s.parameters for s in library.enabled):
        return {}
    try:
        return {"UndercloudLabNetwork": client.get("/v1/hypervisors/container/network")["network"]}
    except UndercloudError as exc:
        note(f"hypervisor hosts keep their servers on networks of their own: {exc.message}")
        return {}


def check_hypervisor(_ctx, _param, value: str) -> str:
    from undercloud.overcloud.plan import HYPERVISOR_FLAVORS, node_cloud

    if value in HYPERVISOR_FLAVORS or node_cloud(value):
        return value
    raise click.BadParameter(f"{value!r}: one of {', '.join(HYPERVISOR_FLAVORS)}, or openstack:<cloud> "
                             f"(a cloud of `undercloud cloud list`)")


def resources(client: Client, stack: str) -> list[dict]:
    try:
        return client.get(f"/v1/stacks/{stack}/resources")
    except NotFound:
        return []


def wait(client: Client, stack: str, plan, start: float, before: list[dict]) -> dict:
    from undercloud.overcloud.deploy import Progress, failure_details

    progress = Progress(plan, start, before, note)
    while True:
        s = client.get(f"/v1/stacks/{stack}")
        progress.update(resources(client, stack))
        status = s["stack_status"]
        if not status.endswith("_IN_PROGRESS"):
            if status.endswith("_FAILED"):
                line, tail = failure_details(client.get, stack)
                if tail:
                    note("last lines of the service's log:")
                for t in tail:
                    note(f"  | {t}")
                raise DeployFailed(line, "deploy")
            return s
        time.sleep(POLL)


def new_identifier() -> str:
    import uuid

    return uuid.uuid4().hex[:16]


def drifted(client: Client, stack: str) -> list[dict]:
    """The services not healthy now (`overcloud status`'s checks); none when the stack has
    no outputs to check yet (a create that failed)."""
    from undercloud.cli.overcloud import service_health

    try:
        rows = service_health(client, stack)
    except UndercloudError:
        return []
    return [r for r in rows if r["health"] != "healthy" and not r["health"].startswith("not checked")]


def power_on_stopped(client: Client, drift: list[dict]) -> None:
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
            note(f"node {name} is {server['status']} and was not powered on: {exc.message}")
            continue
        note(f"repaired: node {name} was {server['status']}: powered on")


def report_repairs(client: Client, stack: str) -> None:
    """What the steps' runs repaired (the stack output Repairs), one line each."""
    said = 0
    for _role, steps in sorted((outputs(client, stack).get("Repairs") or {}).items()):
        for _step, nodes in sorted((steps or {}).items()):
            for node, items in sorted((nodes or {}).items()):
                for item in items or []:
                    pod, _, what = str(item).partition(": ")
                    note(f"repaired: {pod} on {node}: {what}")
                    said += 1
    if not said:
        note("repaired: nothing needed it when the steps ran again (each service was running and ready)")


def scale_in(client: Client, stack: str, body: dict, library, yes: bool, secrets: dict):
    """The nodes this update removes (the engine's dry run), compute nodes drained first:
    their instances refused unless `yes`, else deleted, then their nova-compute records.
    Returns (connection to the overcloud or None, the compute nodes drained)."""
    from undercloud.overcloud import scale
    from undercloud.overcloud.clouds import admin_password

    dry = client.patch(f"/v1/stacks/{stack}", json={**body, "dry_run": True})
    removed = scale.removed_nodes(stack, dry, client.get)
    if not removed:
        return None, []
    note(f"scale-in: removing {', '.join(sorted(removed))}")
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
        overcloud_call(f"drain {n}", scale.drain, conn, n, note)
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


def outputs(client: Client, stack: str) -> dict:
    return {o["output_key"]: o.get("output_value") for o in client.get(f"/v1/stacks/{stack}/outputs")}


def finish(client: Client, stack: str, secrets: dict) -> None:
    from undercloud.overcloud.clouds import write_clouds_yaml
    from undercloud.overcloud.deploy import ENDPOINT_WAIT, wait_for_endpoints

    out = outputs(client, stack)
    endpoints = out.get("EndpointMap") or {}
    failing = wait_for_endpoints(endpoints)
    if failing:
        raise DeployFailed("; ".join(f"{svc} at {endpoints[svc]} does not answer through the virtual IP "
                                     f"after {ENDPOINT_WAIT:.0f} s ({why})" for svc, why in sorted(failing.items())),
                           "deploy")
    for service, url in sorted(endpoints.items()):
        click.echo(f"{service:<10} {url}")
    if not endpoints.get("keystone"):
        note("no keystone in this overcloud: no clouds.yaml")
        return
    path = write_clouds_yaml(client.home.path, stack, endpoints["keystone"], secrets)
    note(f"clouds.yaml: {path} (admin credentials; `openstack --os-cloud {stack} ...` with "
         f"OS_CLIENT_CONFIG_FILE={path}, or `undercloud overcloud clouds-yaml`)")


@click.command()
@click.option("--example", type=click.Choice(["minimal", "ha", "hypervisor-host"]),
              help="A shipped example: minimal (a controller with every control-plane service and a "
                   "compute node; the default when neither --roles nor -e is given), ha (three "
                   "controllers behind haproxy, their MariaDBs a Galera cluster and their RabbitMQs a "
                   "cluster, and a compute node) or hypervisor-host (a node that becomes a hypervisor "
                   "host of this undercloud for container servers; needs a PostgreSQL store, given as "
                   "UndercloudStoreUrl in an environment).")
@click.option("--roles", type=click.Path(dir_okay=False), help="Your roles_data.yaml (TripleO format).")
@click.option("-e", "--environment", "environments", multiple=True, type=click.Path(dir_okay=False),
              help="An environment file (parameter_defaults such as ControllerCount, resource_registry "
                   "mapping a service to OS::Heat::None...); repeat to merge several, in order.")
@click.option("--hypervisor", default="container", show_default=True, callback=check_hypervisor,
              metavar="container|vm|baremetal|openstack:CLOUD",
              help="How nodes are realised (the flavor of every role). openstack:CLOUD: servers of "
                   "that cloud (`undercloud cloud add`), on its network OvercloudNetwork, with its "
                   "flavor Overcloud<Role>Flavor (default m1.small), both set in an environment.")
@click.option("--stack", default="overcloud", show_default=True, help="The stack's name.")
@click.option("--timeout", type=float, default=60, show_default=True, metavar="MINUTES",
              help="Fail what is still in progress after this long.")
@click.option("-y", "--yes", is_flag=True,
              help="Scale-in: delete the instances on the compute nodes being removed (without it, a "
                   "removal that would take instances with it is refused, naming them).")
def deploy(example, roles, environments, hypervisor, stack, timeout, yes):
    """Deploy the overcloud, or bring it to what the roles and environments now say.

    Builds the images that are missing (node image, one image per service the roles run),
    renders the overcloud templates from the roles (TripleO's roles_data.yaml: per role a
    group of servers, its services and deploy steps 1..5) and what each service template
    declares (databases, Keystone entries, endpoints, haproxy frontends, secrets), then
    creates or updates the stack.
    Progress per role, step and service goes to stderr; a step starts only when the
    previous one is healthy on every node. At the end: the endpoints (stdout) and the path
    of a generated clouds.yaml. Before anything else it checks every service of a deployed
    stack (as `overcloud status`): one not healthy (stopped, missing, failing its check)
    makes every step run again, which starts or re-creates what drifted and says what it
    repaired. Run again with no change and every service healthy, it does nothing and says so.
    Scale-in (a lower <Role>Count, removal_policies): the nodes to remove are found first;
    a compute node's instances are refused (named) unless --yes, which deletes them, then
    its nova-compute service record, then the node.

    \b
    Examples:
      undercloud deploy                          # the `minimal` example, container nodes
      undercloud deploy --example ha
      undercloud deploy --example hypervisor-host --stack hosts --hypervisor vm -e store.yaml
          # store.yaml: {parameter_defaults: {UndercloudStoreUrl: postgresql://...}}
      undercloud deploy --roles my_roles.yaml -e counts.yaml   # e.g. {ComputeCount: 2}
      undercloud deploy -e one-compute.yaml --yes   # scale in, deleting the removed node's instances
      openstack --os-cloud overcloud server list   # with OS_CLIENT_CONFIG_FILE=<path shown>
      undercloud deploy --hypervisor openstack:host --stack inner -e inner.yaml
          # nodes are servers of cloud `host`; inner.yaml: {parameter_defaults:
          #   {OvercloudNetwork: lab, OvercloudControllerFlavor: m1.small, ...}}
    """
    from undercloud.orchestration.template import Bundle
    from undercloud.overcloud import deployed
    from undercloud.overcloud import plan as op
    from undercloud.overcloud.roles import load_roles, roles_file_for
    from undercloud.overcloud.secrets import secrets_given, stack_dir
    from undercloud.overcloud.state import StackState

    start = time.monotonic()
    if not example and not roles and not environments:
        example = "minimal"
    # What can be refused here is refused before the service is asked anything (or started).
    stack_dir(Path("."), stack)
    role_list = load_roles(roles_file_for(example, roles))
    env_paths = [Path(e) for e in environments]
    for e in env_paths:
        if not e.is_file():
            raise UndercloudError("environment file not found", str(e))
    library = op.resolve(role_list, op.environments_for(example, env_paths))
    op.check_required(library, op.environments_for(example, env_paths))
    client = Client(timeout=600)
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
    note(f"images: building what is missing for {hypervisor} nodes")
    current_set = deployed.load(state).get("current")
    images, records = build_images(client, hypervisor, library, current_set)
    # The images a role runs instead (`overcloud update --role`) stay, as the set's do.
    overrides = deployed.kept_overrides(current_set, images, [r.name for r in role_list])
    images.update(deployed.override_parameters(images, overrides, list(overrides)))
    if "ServiceImageSources" in images:
        images["ServiceImageSources"].update(deployed.sources(i for over in overrides.values() for i in over.values()))
    images.update(network_parameters(client, stack, hypervisor))
    images.update(lab_network_parameters(client, library))
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
        note(f"stack {stack}: creating ({', '.join(f'{r.name}' for r in role_list)})")
        client.post("/v1/stacks", json={"name": stack, **body})
    else:
        status = current["stack_status"]
        unchanged = (last.get("digest") == digest and last.get("stack_id") == current["id"]
                     and status in ("CREATE_COMPLETE", "UPDATE_COMPLETE"))
        if unchanged and not drift:
            note(f"stack {stack}: no change since the last deploy ({status}) and every service is healthy; "
                 f"nothing to do")
            finish(client, stack, secrets)
            return
        if status.endswith("_IN_PROGRESS"):
            raise UndercloudError(f"stack {stack} is {status}: wait for it or `undercloud stack cancel {stack}`",
                                  "deploy")
        if drift:
            note(f"stack {stack}: {len(drift)} service(s) not healthy: "
                 + "; ".join(f"{r['service']} on {r['node']} ({r['health']})" for r in drift)
                 + ("; every step runs again to repair them" if unchanged else ""))
        if drift:
            power_on_stopped(client, drift)
        if not unchanged:
            drained = scale_in(client, stack, body, library, yes, secrets)
        note(f"stack {stack}: updating ({status} before{', no change to the stack' if unchanged else ''})")
        client.patch(f"/v1/stacks/{stack}", json=body)
    s = wait(client, stack, plan, start, before)
    conn, gone = drained
    for node in gone:  # now that the node is gone, its agents cannot register again
        from undercloud.overcloud.scale import forget_agents
        overcloud_call(f"forget the Neutron agents of {node}", forget_agents, conn, node, note)
    state.put("last-deploy", {"digest": digest, "stack_id": s["id"], "deploy_identifier": identifier})
    deployed.record(state, {**deployed.make_set(library, records, hypervisor), "overrides": overrides})
    now = time.monotonic()
    note(f"stack {stack}: {s['stack_status']} in {now - stack_start:.1f} s ({now - start:.1f} s with the images)")
    if drift:
        report_repairs(client, stack)
    finish(client, stack, secrets)
