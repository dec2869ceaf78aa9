"""The overcloud's workflows (deploy, update, rollback, replace, scale and delete),
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
from undercloud.server_types import BAREMETAL, CONTAINER

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
    named = [input.get("roles"), *(input.get("environments") or [])] if kind == "deploy" else []
    for p in named:
        if isinstance(p, str) and p:
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
    if hypervisor == BAREMETAL:
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


def build_images(client, out: Output, hypervisor: str, library, current: dict | None = None,
                 release: str | None = None) -> tuple[dict, dict]:
    """Build what is missing (node image, the service images of `release` the enabled
    services declare and the deployed set has not); returns (the image parameters, the
    records by name)."""
    from undercloud.cli.image import build_targets
    from undercloud.images import catalog
    from undercloud.overcloud import deploy as od

    have = deployed_records(client, library, current)
    targets = node_targets(hypervisor) + [t for name in od.service_images(library) if name not in have
                                          for t in catalog.targets(name, release=release)]
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


def scale_in(client, out: Output, stack: str, body: dict, library, yes: bool, secrets: dict,
             ca_file: str | None = None):
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
    found = outputs(client, stack)
    keystone = (found.get("PublicEndpointMap") or found.get("EndpointMap") or {}).get("keystone")
    if not computes or not keystone:
        return None, []
    conn = scale.connect(keystone, admin_password(secrets, stack), ca_file)
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


def finish(client, out: Output, stack: str, secrets: dict, ca_file: str | None = None) -> dict:
    """Waits for the public endpoints (verified with `ca_file` where they are https), prints
    them, writes clouds.yaml; returns {endpoints, clouds_yaml}."""
    from undercloud.overcloud.clouds import write_clouds_yaml
    from undercloud.overcloud.deploy import ENDPOINT_WAIT, wait_for_endpoints

    found = outputs(client, stack)
    endpoints = found.get("PublicEndpointMap") or found.get("EndpointMap") or {}
    failing = wait_for_endpoints(endpoints, ca_file=ca_file)
    if failing:
        raise DeployFailed("; ".join(f"{svc} at {endpoints[svc]} does not answer through the virtual IP "
                                     f"after {ENDPOINT_WAIT:.0f} s ({why})" for svc, why in sorted(failing.items())),
                           "deploy")
    for service, url in sorted(endpoints.items()):
        out.echo(f"{service:<10} {url}")
    if not endpoints.get("keystone"):
        out.note("no keystone in this overcloud: no clouds.yaml")
        return {"endpoints": endpoints, "clouds_yaml": None}
    path = write_clouds_yaml(client.home.path, stack, endpoints["keystone"], secrets, cacert=ca_file)
    out.note(f"clouds.yaml: {path} (admin credentials; `openstack --os-cloud {stack} ...` with "
             f"OS_CLIENT_CONFIG_FILE={path}, or `undercloud overcloud clouds-yaml`)")
    return {"endpoints": endpoints, "clouds_yaml": str(path)}


def public_certificate(client, out: Output, stack: str, library, environments: list[Path], vip: str | None):
    """The public endpoints' certificate for this deploy (overcloud/public_tls.py), said in
    one line; None when the overcloud has none (no API endpoint, or no VIP known before the
    deploy)."""
    from undercloud.overcloud import public_tls

    if not any(s.endpoints for s in library.enabled):
        return None
    public = public_tls.ensure(client.home.path, client.home.tls_dir, stack, environments, vip)
    if public is None:
        out.note("public endpoints: plain HTTP (the virtual IP is known only once the nodes exist: give "
                 "SSLCertificate and SSLKey for TLS)")
    else:
        whose = "a certificate of the undercloud's CA" if public.issued else "your certificate"
        out.note(f"public endpoints: TLS, {whose}, valid until {public.expires:%Y-%m-%d}")
    return public


def internal_certificate(client, out: Output, stack: str, environments: list[Path], vip: str | None):
    """The internal certificate with EnableInternalTLS (overcloud/internal_tls.py), said in
    one line; None without."""
    from undercloud.overcloud import internal_tls

    internal = internal_tls.ensure(client.home.path, client.home.tls_dir, stack, environments, vip)
    if internal is not None:
        out.note(f"internal endpoints, MariaDB and RabbitMQ: TLS, a certificate of the undercloud's CA, "
                 f"valid until {internal.expires:%Y-%m-%d}")
    return internal


def library_environment(path: str) -> str:
    """An environment's path: where you are, else the undercloud's library's
    (`environments/tls-everywhere.yaml`) when it has that file."""
    import os

    from undercloud.overcloud.library import LIBRARY

    if not os.path.exists(path) and not os.path.isabs(path) and (LIBRARY / path).is_file():
        return str(LIBRARY / path)
    return path


def deploy_input(example: str | None, roles: str | None, environments, hypervisor: str, timeout: float,
                 yes: bool) -> dict:
    """The deploy's input as the service takes it (paths absolute: the service reads them)."""
    import os

    if not example and not roles and not environments:
        example = "minimal"
    return {"example": example, "roles": os.path.abspath(roles) if roles else None,
            "environments": [os.path.abspath(library_environment(e)) for e in environments],
            "hypervisor": hypervisor,
            "timeout": float(timeout), "yes": bool(yes)}


def check_deploy(stack: str, input: dict, kept_release: str | None = None):
    """What can be refused before anything is asked of the service, in `undercloud deploy`'s
    words: (roles, environment paths, library). `kept_release`: the overcloud's own, whose
    network mechanism it keeps unless the environments name another release."""
    from undercloud.overcloud import plan as op
    from undercloud.overcloud import release as overcloud_release
    from undercloud.overcloud.roles import load_roles, roles_file_for
    from undercloud.overcloud.secrets import stack_dir

    stack_dir(Path("."), stack)
    example, roles = input.get("example"), input.get("roles")
    # an API client's input, in the options' words (the CLI's options are checked by click)
    if example not in (None, "minimal", "ha", "hypervisor-host"):
        raise InvalidInput(f"{str(example)[:64]!r}: one of minimal, ha, hypervisor-host", "--example")
    if not (roles is None or isinstance(roles, str)) or not isinstance(input.get("environments") or [], list) \
            or not all(isinstance(e, str) for e in input.get("environments") or []):
        raise InvalidInput("roles: a path; environments: a list of paths", "input")
    hypervisor = input.get("hypervisor") or CONTAINER
    if hypervisor not in op.HYPERVISOR_FLAVORS and not op.node_cloud(hypervisor):
        raise InvalidInput(f"{hypervisor!r}: one of {', '.join(op.HYPERVISOR_FLAVORS)}, or openstack:<cloud>",
                           "--hypervisor")
    role_list = load_roles(roles_file_for(example, roles))
    env_paths = [Path(library_environment(e)) for e in input.get("environments") or []]
    for e in env_paths:
        if not e.is_file():
            raise UndercloudError("environment file not found", str(e))
    overcloud_release.given(op.environments_for(example, env_paths))  # a release we do not deploy: refused here
    library = op.resolve(role_list, op.environments_for(example, env_paths, kept_release))
    op.check_required(library, op.environments_for(example, env_paths, kept_release))
    return role_list, env_paths, library


def deploy(client, out: Output, stack: str, input: dict) -> dict:
    """`undercloud deploy`: plans the roles, builds the images that are missing, asks for
    the VIP, keeps the secrets, renders the plan, creates or updates the stack, follows it,
    waits for the endpoints and writes clouds.yaml. Returns {stack, stack_status, endpoints,
    clouds_yaml, changed}."""
    from undercloud.orchestration.template import Bundle
    from undercloud.overcloud import deployed
    from undercloud.overcloud import plan as op
    from undercloud.overcloud import release as overcloud_release
    from undercloud.overcloud.secrets import secrets_given
    from undercloud.overcloud.state import StackState

    if input.get("dry_run"):
        return dry_run(client, out, stack, input)
    start = time.monotonic()
    state = StackState(client, stack)
    current_set = deployed.load(state).get("current")
    role_list, env_paths, library = check_deploy(stack, input, overcloud_release.of_set(current_set))
    example, hypervisor = input.get("example"), input.get("hypervisor") or CONTAINER
    timeout, yes = float(input.get("timeout") or 60), bool(input.get("yes"))
    home = client.home.path
    release = overcloud_release.choose(stack, op.environments_for(example, env_paths), current_set)
    envs = op.environments_for(example, env_paths, release)
    wrong = op.container_roles(library, role_list, envs, hypervisor,
                               lambda name: client.get(f"/v1/flavors/{name}")["hypervisor_type"])
    if wrong:
        raise UndercloudError(wrong[0], "deploy")
    if op.node_cloud(hypervisor):
        try:
            client.get(f"/v1/clouds/{op.node_cloud(hypervisor)}")  # known here, before any work
        except NotFound as exc:
            raise UndercloudError(exc.message, f"--hypervisor {hypervisor}") from None
    # The virtual IP and the public certificate first: a bad certificate is refused before
    # any image is built.
    net = network_parameters(client, stack, hypervisor)
    public = public_certificate(client, out, stack, library, envs, net.get("PublicVirtualIP"))
    ca_file = str(public.ca_file) if public and public.ca_file else None
    internal = internal_certificate(client, out, stack, envs, net.get("PublicVirtualIP"))
    out.note(f"images: building what is missing for {hypervisor} nodes, OpenStack {release}")
    images, records = build_images(client, out, hypervisor, library, current_set, release)
    images[overcloud_release.PARAMETER] = release
    # The images a role runs instead (`overcloud update --role`) stay, as the set's do.
    overrides = deployed.kept_overrides(current_set, images, [r.name for r in role_list])
    images.update(deployed.override_parameters(images, overrides, list(overrides)))
    if "ServiceImageSources" in images:
        images["ServiceImageSources"].update(deployed.sources(i for over in overrides.values() for i in over.values()))
    images.update(net)
    images.update(lab_network_parameters(client, out, library))
    kinds = library.secrets()
    secrets = state.secrets(kinds, secrets_given(env_paths, set(kinds)))
    plan = op.render(home, stack, role_list, library, images, hypervisor, example, env_paths, secrets,
                     {**(public.parameters if public else {}), **(internal.parameters if internal else {})})
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
            return {"stack": stack, "stack_status": status, "changed": False,
                    **finish(client, out, stack, secrets, ca_file)}
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
            drained = scale_in(client, out, stack, body, library, yes, secrets, ca_file)
        out.note(f"stack {stack}: updating ({status} before{', no change to the stack' if unchanged else ''})")
        client.patch(f"/v1/stacks/{stack}", json=body)
    s = wait(client, out, stack, plan, start, before)
    conn, gone = drained
    for node in gone:  # now that the node is gone, its agents cannot register again
        from undercloud.overcloud.scale import forget_agents
        overcloud_call(f"forget the Neutron agents of {node}", forget_agents, conn, node, out.note)
    state.put("last-deploy", {"digest": digest, "stack_id": s["id"], "deploy_identifier": identifier,
                              "public_ca": ca_file})
    deployed.record(state, {**deployed.make_set(library, records, hypervisor, release), "overrides": overrides})
    now = time.monotonic()
    out.note(f"stack {stack}: {s['stack_status']} in {now - stack_start:.1f} s ({now - start:.1f} s with the images)")
    if drift:
        report_repairs(client, out, stack)
    return {"stack": stack, "stack_status": s["stack_status"], "changed": True,
            **finish(client, out, stack, secrets, ca_file)}


def plan_bundle_aside(home: Path, stack: str, *args) -> dict:
    """The bundle of the plan `op.render(home, stack, *args)` makes, rendered in a temporary
    directory (the home's plan stays as the last deploy left it) and named as the deploy
    names its files: the engine compares the template paths of nested stacks."""
    import tempfile

    from undercloud.orchestration.template import Bundle
    from undercloud.overcloud import plan as op
    from undercloud.overcloud.secrets import stack_dir

    with tempfile.TemporaryDirectory(prefix="undercloud-dry-run-") as aside:
        plan = op.render(Path(aside), stack, *args)
        bundle = Bundle.from_paths(str(plan.template), env_paths=[str(p) for p in plan.environments]).to_json()
        real = json.dumps(str(stack_dir(home, stack) / "plan"))[1:-1]
        return json.loads(json.dumps(bundle).replace(json.dumps(str(plan.dir))[1:-1], real))


def dry_run(client, out: Output, stack: str, input: dict) -> dict:
    """`undercloud deploy --dry-run`: the deploy's planning (roles, library, image parameters,
    plan, secrets) with every step that writes skipped or simulated, then the engine's dry
    run of the update; returns {stack, rows} (overcloud/dryrun.py). Writes nothing: no image
    is built ("would build NAME"), no VIP is claimed for a stack that holds none yet, no
    secret is made (a missing one is a placeholder), the plan is rendered into a temporary
    directory, and the stack is only asked what it would do."""
    from undercloud.overcloud import deploy as od
    from undercloud.overcloud import deployed, dryrun, internal_tls, public_tls
    from undercloud.overcloud import plan as op
    from undercloud.overcloud import release as overcloud_release
    from undercloud.overcloud.secrets import secrets_given
    from undercloud.overcloud.state import StackState

    state = StackState(client, stack)
    current_set = deployed.load(state).get("current")
    role_list, env_paths, library = check_deploy(stack, input, overcloud_release.of_set(current_set))
    example, hypervisor = input.get("example"), input.get("hypervisor") or CONTAINER
    try:
        current = client.get(f"/v1/stacks/{stack}")
    except NotFound:
        current = None
    if current is not None and current["stack_status"].endswith("_IN_PROGRESS"):
        raise UndercloudError(f"stack {stack} is {current['stack_status']}: wait for it or "
                              f"`undercloud stack cancel {stack}`", "deploy")
    release = overcloud_release.choose(stack, op.environments_for(example, env_paths), current_set)
    envs = op.environments_for(example, env_paths, release)
    records = deployed_records(client, library, current_set)
    for name in od.service_images(library):
        if name not in records:
            out.note(f"images: would build {name} (OpenStack {release})")
            records[name] = {"id": f"would-build-{name}", "properties": {"podman_image": f"(would build {name})"}}
    images = od.image_parameters(library, records)
    images[overcloud_release.PARAMETER] = release
    overrides = deployed.kept_overrides(current_set, images, [r.name for r in role_list])
    images.update(deployed.override_parameters(images, overrides, list(overrides)))
    if "ServiceImageSources" in images:
        images["ServiceImageSources"].update(deployed.sources(i for over in overrides.values() for i in over.values()))
    if current is not None:  # the VIP the stack holds already (asking again claims nothing new)
        images.update(network_parameters(client, stack, hypervisor))
    # your certificate checked, the kept one as it is (a renewal the deploy would make: not shown)
    public = public_tls.ensure(client.home.path, client.home.tls_dir, stack, envs,
                               images.get("PublicVirtualIP"), write=False)
    images.update(lab_network_parameters(client, out, library))
    kinds = library.secrets()
    kept = dict(state.get("secrets", {}))
    kept.update(secrets_given(env_paths, set(kinds)))
    secrets = {k: kept.get(k, f"(would generate {k})") for k in kinds}
    if current is None:
        if not input.get("rows_only"):
            out.echo(f"stack {stack}: not deployed yet: a deploy would create it")
        return {"stack": stack, "rows": []}
    internal = internal_tls.ensure(client.home.path, client.home.tls_dir, stack,
                                   envs, images.get("PublicVirtualIP"), write=False)
    bundle = plan_bundle_aside(client.home.path, stack, role_list, library, images, hypervisor, example,
                               env_paths, secrets,
                               {**(public.parameters if public else {}), **(internal.parameters if internal else {})})
    last = state.get("last-deploy", {})
    params = {**{k: secrets[k] for k in sorted(kinds)},
              "DeployIdentifier": last.get("deploy_identifier") or new_identifier()}
    body = {"bundle": bundle, "parameters": params}
    return dry_run_rows(client, out, stack, body, dryrun.service_resources(library, role_list), secrets,
                        bool(input.get("rows_only")))


# kind -> the function that runs it: (client, out, stack, input) -> result
KINDS = {"deploy": deploy}


# --- overcloud update, rollback, replace, delete (`undercloud overcloud ...`) ---

def stack_outputs(client, stack: str) -> dict:
    try:
        rows = client.get(f"/v1/stacks/{stack}/outputs")
    except NotFound:
        raise NotFound(f"no overcloud stack {stack!r}: run `undercloud deploy`", "--stack") from None
    return {o["output_key"]: o.get("output_value") for o in rows}


def idle_stack(client, stack: str) -> dict:
    """The overcloud's stack; refuses one that is missing or busy."""
    try:
        s = client.get(f"/v1/stacks/{stack}")
    except NotFound:
        raise NotFound(f"no overcloud stack {stack!r}: run `undercloud deploy`", "--stack") from None
    if s["stack_status"].endswith("_IN_PROGRESS"):
        raise UndercloudError(f"stack {stack} is {s['stack_status']}: wait for it or "
                              f"`undercloud stack cancel {stack}`", "--stack")
    return s


def deployed_sets(client, stack: str) -> dict:
    """The stack's recorded deployed sets; refuses a stack that is missing or busy."""
    from undercloud.overcloud import deployed
    from undercloud.overcloud.state import StackState

    idle_stack(client, stack)
    sets = deployed.load(StackState(client, stack))
    if not sets.get("current"):
        raise UndercloudError(f"no deployed set recorded for stack {stack}: run `undercloud deploy` first",
                              "--stack")
    return sets


def replace_target(client, stack: str, node: str) -> tuple[str, str]:
    """(role, address) of `node` in the overcloud; refuses a busy stack or an unknown node."""
    idle_stack(client, stack)
    out = stack_outputs(client, stack)
    roles = {n: (role, address) for role, members in (out.get("RoleNodes") or {}).items()
             for n, address in (members or {}).items()}
    if node not in roles:
        raise NotFound(f"no node {node!r} in overcloud {stack} (its nodes: {', '.join(sorted(roles)) or 'none'})",
                       "NODE")
    return roles[node]


def replace(client, out: Output, stack: str, input: dict) -> dict:
    """`overcloud replace NODE` (confirmed by the CLI): rebuild the node's server, wait until
    every service of it is healthy."""
    node, timeout = str(input.get("node") or ""), float(input.get("timeout") or 30)
    role, address = replace_target(client, stack, node)
    start = time.monotonic()
    client.post(f"/v1/servers/{node}/action", json={"action": "rebuild"})
    out.note(f"replace: {node} rebuilding from its image; its agent then plays its deploy steps again")
    deadline, seen, rows = start + timeout * 60, set(), []
    while time.monotonic() < deadline:
        server = client.get(f"/v1/servers/{node}")
        if server["status"] == "ERROR":
            raise UndercloudError(f"replace: {node}'s rebuild failed: {server.get('fault') or server.get('notes')}",
                                  "NODE")
        if server["status"] == "ACTIVE":
            try:
                rows = client.get(f"/v1/overclouds/{stack}/status", params={"wait": 5, "node": node})
            except NotFound as exc:
                raise NotFound(exc.message, "NODE") from None
            for r in rows:
                if r["service"] not in seen and r["health"] == "healthy":
                    seen.add(r["service"])
                    out.note(f"[{time.monotonic() - start:6.1f}s] {node}: {r['service']} {r['health']}")
            if rows and all(r["health"] == "healthy" for r in rows):
                now = (next(iter((server.get("addresses") or {}).values()), None) or [address])[0]
                took = time.monotonic() - start
                out.note(f"replace: {node} replaced in {took:.1f} s: {len(rows)} service(s) healthy, "
                         f"address {now}" + ("" if now == address else f" (was {address})"))
                return {"node": node, "role": role, "address": now, "seconds": round(took, 1),
                        "services": sorted(seen)}
        time.sleep(2)
    failing = [f"{r['service']}: {r['health']}" for r in rows if not r["health"] == "healthy"]
    raise UndercloudError(f"replace: {node} not healthy after {timeout:g} min: "
                          f"{'; '.join(failing) or 'its server is not ACTIVE'}", "--timeout")


def rollout_body(new: dict, params: list[str], batch: int, timeout: float, max_fail: int = 0) -> dict:
    """The stack update that rolls the set `new`'s images of `params` out (see rollout_set)."""
    from undercloud.overcloud import deployed

    # parameter_defaults (the image parameters belong to the service templates), over the
    # stored bundle's, with a rollback to it on any failure. A role's own images: the
    # `<Role>ImageOverrides` of every role that has or had one.
    roles = sorted({k.split(":")[0] for k in params if ":" in k} | set(new.get("overrides") or {}))
    chosen = deployed.parameters(new, [k for k in params if ":" not in k], roles)
    return {"existing": True, "rollback": True, "timeout": timeout * 60, "max_fail": max_fail,
            "environment": {"parameter_defaults": {**chosen, "UpdateBatchSize": batch}}}


def dry_run_rows(client, out: Output, stack: str, body: dict, resources: dict | None, secrets: dict,
                 quiet: bool) -> dict:
    """The engine's dry run of the stack update `body`, as rows per node and service
    (overcloud/dryrun.py), printed unless `quiet`; returns {stack, rows}."""
    from undercloud.masking import Mask
    from undercloud.overcloud import dryrun, scale

    answer = client.patch(f"/v1/stacks/{stack}", json={**body, "dry_run": True})
    removed = scale.removed_nodes(stack, answer, client.get)
    role_nodes = {role: sorted(members or {}) for role, members in (outputs(client, stack).get("RoleNodes") or {}).items()}

    def now(path: str):
        try:
            return client.get(f"/v1/stacks/{stack}/resources/{path}").get("properties")
        except NotFound:
            return None

    rows = dryrun.rows(answer, resources, role_nodes, removed, now, Mask([str(v) for v in secrets.values()]))
    if not quiet:
        for line in dryrun.lines(rows):
            out.echo(line)
    return {"stack": stack, "rows": rows}


def rollout_set(client, out: Output, stack: str, new: dict, params: list[str], batch: int, timeout: float,
                what: str, max_fail: int = 0) -> None:
    """Roll the set `new`'s images of `params` out (a stack update the undercloud runs: the
    deploy steps' groups `batch` nodes at a time, rolled back by itself on a failure; up to
    `max_fail` nodes that fail are rolled back alone and the rest goes on) and follow it;
    records `new` as the deployed set once it is complete, with the nodes rolled back."""
    from undercloud.overcloud import deployed, rollout
    from undercloud.overcloud.state import StackState

    start = time.monotonic()
    after = rollout.last_event(client.get, stack)
    body = rollout_body(new, params, batch, timeout, max_fail)
    client.patch(f"/v1/stacks/{stack}", json=body)
    follow = rollout.Follow(client.get, stack, out.note, after)
    s = follow.run()
    status = s["stack_status"]
    if status == "UPDATE_COMPLETE":
        new = {k: v for k, v in new.items() if k != "rolled_back"}
        if follow.tolerated:
            new["rolled_back"] = {node: failed for node, (failed, _tail) in follow.tolerated.items()}
        deployed.record(StackState(client, stack), new)
        done = sorted(n for n, state in follow.nodes.items() if state == "updated")
        out.note(f"{what}: complete in {time.monotonic() - start:.1f} s ({len(done)} node(s) ran a changed step)")
        if follow.tolerated:
            for node, (failed, tail) in sorted(follow.tolerated.items()):
                out.note(f"{what}: {node} failed at {failed}")
                for t in tail:
                    out.note(f"  | {t}")
            nodes = sorted(follow.tolerated)
            raise UndercloudError(
                f"{len(nodes)} node(s) failed within --max-fail {max_fail} and run their previous images "
                f"and configuration again: {', '.join(nodes)}; the others are updated; `undercloud overcloud "
                f"update` again retries them", what.split()[0])
        return
    if follow.failure:
        node, failed, tail = follow.failure
        for t in tail:
            out.note(f"  | {t}")
        back = ("rolled back by itself: the nodes it reached run their previous images and configuration "
                "again" if status == "ROLLBACK_COMPLETE" else f"and its rollback ended {status}: "
                f"{s['stack_status_reason']} (see `undercloud overcloud status`)")
        raise UndercloudError(f"{what} failed on node {node}, {failed}; {back}", what.split()[0])
    raise UndercloudError(f"{what} ended {status}: {s['stack_status_reason']}", what.split()[0])


def say_changes(out: Output, what: str, old: dict, new: dict, changed: list[str]) -> None:
    from undercloud.overcloud import deployed

    before, after = deployed.refs(old), deployed.refs(new)
    for key in changed:
        role, _, param = key.rpartition(":")
        services = ", ".join((new["images"].get(param) or old["images"].get(param) or {}).get("services") or [param])
        was = before.get(key) or before.get(param)  # a role without its own image ran the set's
        now = after.get(key) or after.get(param)
        out.note(f"{what}: {services}{' on role ' + role if role else ''}: {was} -> {now}")


def would_build(client, out: Output, targets: list, no_cache: bool) -> dict[str, dict]:
    """`overcloud update --dry-run`'s images: the records a build would find up to date
    (by content key, nothing built), a placeholder for each it would build."""
    from undercloud.images.build import registered_build

    records: dict[str, dict] = {}
    for t in targets:
        found = None if no_cache else registered_build(t, client.get("/v1/images", params={"name": t.name}))
        if found:
            records.update((r["name"], r) for r in found)
            out.note(f"images: {t.label}: up to date, nothing to build")
        else:
            out.note(f"images: would build {t.name}")
            records[t.name] = {"id": f"would-build-{t.name}", "name": t.name,
                               "properties": {"podman_image": f"(would build {t.name})"}}
    return records


def update(client, out: Output, stack: str, input: dict) -> None:
    """`overcloud update`: build the chosen services' images, roll them out."""
    from undercloud.cli.image import build_targets
    from undercloud.images import catalog
    from undercloud.overcloud import release as overcloud_release
    from undercloud.overcloud import rollout

    services, roles = list(input.get("services") or []), list(input.get("roles") or [])
    no_cache, elements_path = bool(input.get("no_cache")), tuple(input.get("elements_path") or [])
    batch, max_fail = int(input.get("batch") or 1), int(input.get("max_fail") or 0)
    timeout, dry_run = float(input.get("timeout") or 30), bool(input.get("dry_run"))
    current = deployed_sets(client, stack)["current"]
    retry = sorted(current.get("rolled_back") or {})
    by_role = None
    if roles:
        known = {role: {svc[0] for svc in rows or []}
                 for role, rows in (stack_outputs(client, stack).get("RoleServices") or {}).items()}
        unknown = [r for r in roles if r not in known]
        if unknown:
            raise NotFound(f"no role {', '.join(unknown)} in overcloud {stack} (its roles: "
                           f"{', '.join(sorted(known))})", "--role")
        by_role = {r: known[r] for r in roles}
    params = rollout.choose(current, services, by_role)
    names = sorted({current["images"][p]["name"] for p in params})
    targets = [t.with_elements_path(tuple(Path(p) for p in elements_path)) for n in names
               for t in catalog.targets(n, release=overcloud_release.of_set(current))]
    if dry_run:
        records = would_build(client, out, targets, no_cache)
    else:
        out.note(f"images: building {', '.join(names)}" + (" from scratch (--no-cache)" if no_cache else
                                                            " (cached by content)"))
        records = {r["name"]: r for r in build_targets(client, targets, no_cache, say=out.note, progress=out.note)}
    new = rollout.with_records(current, params, records, roles)
    changed = rollout.changed(current, new)
    if dry_run:
        from undercloud.overcloud.state import StackState

        if not changed and not retry:
            if not input.get("rows_only"):
                out.echo("nothing would change")
            return {"stack": stack, "rows": []}
        return dry_run_rows(client, out, stack, rollout_body(new, changed, batch, timeout, max_fail), None,
                            StackState(client, stack).get("secrets", {}), bool(input.get("rows_only")))
    if not changed and retry:
        out.note(f"update: retrying {', '.join(retry)}: the last update rolled them back to their previous images")
    elif not changed:
        out.note(f"update: nothing to update: {', '.join(names)} already run(s) the image just built"
                 + (f" on role {', '.join(roles)}" if roles else ""))
        return None
    say_changes(out, "update", current, new, changed)
    rollout_set(client, out, stack, new, changed, batch, timeout, "update", max_fail)
    return None


def rollback(client, out: Output, stack: str, input: dict) -> None:
    """`overcloud rollback`: roll the previous deployed set out."""
    from undercloud.overcloud import deployed, rollout

    batch, timeout = int(input.get("batch") or 1), float(input.get("timeout") or 30)
    sets = deployed_sets(client, stack)
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
        out.note("rollback: nothing to do: the previous set has the same images")
        return None
    say_changes(out, "rollback", current, previous, changed)
    rollout_set(client, out, stack, previous, changed, batch, timeout, "rollback")
    return None


def delete(client, out: Output, stack: str, input: dict) -> None:
    """`overcloud delete` (confirmed by the CLI): the stack, what the store kept of it, its
    directory in the home. A stack already gone goes on with the rest (a resumed delete)."""
    import shutil

    from undercloud.cli.stack import progress_line
    from undercloud.overcloud.secrets import stack_dir
    from undercloud.overcloud.state import StackState

    start = time.monotonic()
    try:
        s = client.delete(f"/v1/stacks/{stack}")
    except NotFound:  # gone already (a resumed delete; the CLI refused a missing one): the rest goes on
        s = None
    last = ""
    while s is not None:  # the stack's progress, a line each time it changes (as `stack delete` prints it)
        try:
            s = client.get(f"/v1/stacks/{stack}", params={"wait": POLL})
        except NotFound:
            break
        line = progress_line(s)
        if line != last:
            out.note(line)
            last = line
        if not s["stack_status"].endswith("_IN_PROGRESS"):
            if s["stack_status"].endswith("_FAILED"):
                raise UndercloudError(f"stack {s['stack_name']} {s['stack_status']}: {s['stack_status_reason']}")
            break
    StackState(client, stack).forget()
    shutil.rmtree(stack_dir(client.home.path, stack), ignore_errors=True)
    out.note(f"overcloud {stack} deleted in {time.monotonic() - start:.1f} s")
    return None


KINDS.update({"update": update, "rollback": rollback, "replace": replace, "delete": delete})
