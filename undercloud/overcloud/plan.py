"""The overcloud plan: roles_data.yaml + the service library -> a stack's files.

As TripleO did, `overcloud.j2.yaml` is rendered with Jinja2 from the roles (one server
group, service chain and deploy steps 1..5 per role) into a *plan* directory kept in the
home, `$UNDERCLOUD_HOME/overcloud/<stack>/plan/`, beside the service templates and the
registry generated from them; generated environments carry the images, flavors and
secrets. What the services declare (library.py) becomes the registry, the secrets (hidden
parameters of the top-level template), the endpoint map, and `ServiceData`: the databases
MariaDB makes, the users and catalog entries keystone registers, haproxy's frontends.

Secrets are given twice: as stack parameters (hidden in the top-level template, so the
engine masks them in every property, attribute and message) and, for the service
templates, as parameter_defaults in `secrets.yaml` (mode 600). Never printed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from undercloud.agent.files import write_atomic
from undercloud.errors import InvalidInput
from undercloud.orchestration.template.source import TemplateError
from undercloud.overcloud import library as lib
from undercloud.overcloud.library import LIBRARY, STEPS, Service
from undercloud.overcloud.roles import HAPROXY, Role, example_dir
from undercloud.overcloud.secrets import secrets_given, stack_dir
from undercloud.server_types import BAREMETAL, CONTAINER, OPENSTACK, VM

STEP_NAMES = {1: "load balancer", 2: "database and messaging", 3: "bootstrap", 4: "API services",
              5: "compute and agents"}
# The environment a deploy starts from (yours come later and win), per OpenStack release:
# the network mechanism (Neutron 26, in 2025.1, has no linuxbridge).
RELEASE_ENVIRONMENTS = {"zed": "environments/neutron-linuxbridge.yaml", "2025.1": "environments/neutron-ovs.yaml"}
# The node flavor of every role per hypervisor (an environment may set Overcloud<Role>Flavor).
HYPERVISOR_FLAVORS = {CONTAINER: "container", VM: "vm-control", BAREMETAL: "baremetal"}
# Nodes as servers of another OpenStack cloud (`openstack:<cloud>`): Overcloud<Role>Flavor
# names a flavor of that cloud (this one unless an environment says otherwise), and
# OvercloudNetwork one of its networks.
CLOUD_FLAVOR = "m1.small"


def node_cloud(hypervisor: str) -> str | None:
    """The cloud of `openstack:<cloud>`, else None."""
    kind, sep, cloud = hypervisor.partition(":")
    return cloud if kind == OPENSTACK and sep else None


def node_kind(hypervisor: str) -> str:
    """The kind of node image a hypervisor runs: servers of another cloud run the VM one."""
    return VM if node_cloud(hypervisor) else hypervisor


@dataclass
class Library:
    """The services of a set of roles, as your environments map them."""

    registry: dict[str, Path]             # the library's own: type -> template
    per_role: dict[str, list[Service]]    # role -> its services in order (disabled: name "")
    known_names: list[str]                # every service name of the library and the roles

    @property
    def enabled(self) -> list[Service]:
        """Every service some role runs with a template, once each."""
        out: dict[tuple, Service] = {}
        for services in self.per_role.values():
            for s in services:
                if s.template is not None:
                    out.setdefault((s.type, s.template), s)
        return list(out.values())

    def images(self) -> dict[str, str]:
        return {p: image for s in self.enabled for p, image in s.images.items()}

    def secrets(self) -> dict[str, str]:
        return {n: k for s in self.enabled for n, k in s.secrets.items()}

    def service_names(self, role: str | None = None) -> list[str]:
        roles = [role] if role else list(self.per_role)
        return list(dict.fromkeys(s.name for r in roles for s in self.per_role[r] if s.name))

    def services_at(self, role: str, step: int) -> list[str]:
        return [s.name for s in self.per_role[role] if s.name and s.step == step]


# Services that cannot run on a container node, and why.
NOT_ON_CONTAINER_NODES = {
    "undercloud_worker": "a hypervisor host's worker drives its node's own podman and bridges, which a container "
                         "node shares with this host: deploy it on vm or baremetal nodes",
}


def container_roles(library: Library, roles: list[Role], environments: list[Path], hypervisor: str,
                    flavor_type) -> list[str]:
    """One line per role whose nodes would be containers but that runs a service that cannot
    (NOT_ON_CONTAINER_NODES); `flavor_type(name)` says a flavor's hypervisor type."""
    if node_cloud(hypervisor):
        return []
    flavors = secrets_given(environments, {f"Overcloud{r.name}Flavor" for r in roles})
    out = []
    for r in roles:
        bad = [n for n in library.service_names(r.name) if n in NOT_ON_CONTAINER_NODES]
        flavor = flavors.get(f"Overcloud{r.name}Flavor", HYPERVISOR_FLAVORS.get(hypervisor, hypervisor))
        if bad and flavor_type(flavor) == CONTAINER:
            out.append(f"role {r.name} (flavor {flavor}: container nodes) runs {bad[0]}: "
                       f"{NOT_ON_CONTAINER_NODES[bad[0]]}")
    return out


def check_required(library: Library, environments: list[Path]) -> None:
    """Each parameter an enabled service needs from you (no default) is set in an environment:
    one line naming it, its service and what it is, before anything is built."""
    needed = {n: (s, what) for s in library.enabled for n, what in s.required.items()}
    given = secrets_given(environments, set(needed))
    for name, (svc, what) in sorted(needed.items()):
        if name not in given:
            role = next(r for r, services in library.per_role.items() if svc in services)
            raise InvalidInput(f"{svc.type.removeprefix(lib.SERVICE_PREFIX)} (role {role}) needs parameter {name}: "
                               f"{what.rstrip('.') or 'no default'}; set it in an environment's parameter_defaults",
                               "deploy")


def resolve(roles: list[Role], environments: list[Path], library: Path = LIBRARY) -> Library:
    """Read the declarations of every service of `roles`, through the library's registry
    and then `environments` (yours, in order). Problems: `file:line: path: message`."""
    builtin = lib.builtin_registry(library)
    pairs = [(role.resource(t), t) for role in roles for t in role.services]
    targets = lib.effective_types(pairs, builtin, environments)
    read: dict[tuple, Service] = {}
    per_role = {}
    for role in roles:
        per_role[role.name] = []
        for t in role.services:
            target = targets[(role.resource(t), t)]
            key = (t, str(target))
            if key not in read:
                read[key] = lib.declared_or_plain(t, target)
            per_role[role.name].append(read[key])
    # ServiceNodes has a key (maybe []) for every service a template could ask about, enabled
    # or not: a template reading [ServiceNodes, rabbitmq] must get a list, never null.
    names = [lib.read_service(t, p).name for t, p in builtin.items()]
    names += [s.name for services in per_role.values() for s in services if s.name]
    out = Library(builtin, per_role, sorted(set(names)))
    problems = lib.conflicts(out.enabled) + lib.endpoint_problems(out.enabled)
    if problems:
        raise TemplateError(problems)
    return out


@dataclass
class Plan:
    dir: Path
    template: Path
    environments: list[Path]
    roles: list[Role]
    library: Library

    @property
    def secret_names(self) -> list[str]:
        return sorted(self.library.secrets())

    def services_at(self, role: Role, step: int) -> list[str]:
        return self.library.services_at(role.name, step)


def service_data(enabled: list[Service]) -> dict:
    """`ServiceData`, every service template's view of what the others declared, with
    secrets as get_param (their values never appear in the plan's files). A catalog entry
    has its internal `url` (EndpointMap) and its `public_url` (PublicEndpointMap: over TLS
    when the overcloud has a certificate); an http frontend serving an endpoint has the
    `public_port` haproxy serves it on over TLS (0: none)."""
    databases = [{"name": d["name"], "user": d["user"], "password": {"get_param": d["password"]}}
                 for s in enabled for d in s.databases]
    keystone = []
    for s in enabled:
        for k in s.keystone:
            entry: dict[str, Any] = {"user": k["user"], "password": {"get_param": k["password"]}}
            if "type" in k:
                entry.update(name=k.get("service", k["type"]), type=k["type"],
                             description=k.get("description", ""),
                             url={"get_attr": ["EndpointMap", "value", k["endpoint"]]},
                             public_url={"get_attr": ["PublicEndpointMap", "value", k["endpoint"]]})
            keystone.append(entry)
    served = {spec["port"] for s in enabled for spec in s.endpoints.values()}
    haproxy = [{"name": f["name"], "port": f["port"], "backend_port": f["backend_port"],
                "mode": f.get("mode", "http"), "check": f.get("check", ""),
                "check_port": f.get("check_port", f["backend_port"]), "backup": f.get("backup", False),
                "public_port": lib.public_port(f["port"]) if f.get("mode", "http") == "http" and f["port"] in served
                else 0,
                "servers": {"get_attr": ["ServiceNodes", "value", s.name]}}
               for s in enabled for f in s.haproxy]
    return {"databases": sorted(databases, key=lambda d: d["name"]),
            "keystone": sorted(keystone, key=lambda k: k["user"]),
            "haproxy": sorted(haproxy, key=lambda f: f["port"]),
            "public_endpoints": {"get_attr": ["PublicEndpointMap", "value"]}}


def render(home: Path, stack: str, roles: list[Role], library: Library, images: dict[str, Any],
           hypervisor: str, example: str | None, environments: list[Path], secrets: dict[str, Any],
           tls: dict[str, str] | None = None) -> Plan:
    """Write the plan directory; returns the template and environments, in merge order:
    registry, deploy parameters (images, flavors), secrets (`secrets`: a value for each
    the library's services declare; `tls`: the certificates the undercloud issued,
    SSLCertificate and SSLKey, and with internal TLS InternalTLSCertificate, InternalTLSKey
    and InternalTLSCA), the example, yours."""
    import jinja2

    cloud = node_cloud(hypervisor)
    if hypervisor not in HYPERVISOR_FLAVORS and not cloud:
        raise InvalidInput(f"unknown hypervisor type {hypervisor!r} ({', '.join(HYPERVISOR_FLAVORS)}, "
                           f"openstack:<cloud>)", "--hypervisor")
    for e in environments:
        if not e.is_file():
            raise InvalidInput("environment file not found", str(e))
    enabled = library.enabled
    haproxy_roles = [r for r in roles if any(s.type == HAPROXY and s.template for s in library.per_role[r.name])]
    fronted = sorted(s.name for s in enabled if s.endpoints or s.haproxy)
    if not haproxy_roles and fronted:
        raise InvalidInput(f"no role runs {HAPROXY} (is it mapped to OS::Heat::None?): the API services need "
                           f"it in front ({', '.join(fronted[:3])}{', ...' if len(fronted) > 3 else ''})", "roles")
    # The role whose first node's address is the virtual IP when none is given: haproxy's; in
    # an overcloud without API services (hypervisor hosts, say) nothing is served there.
    vip_role = (haproxy_roles or roles)[0]
    endpoints = sorted((name, spec["port"], spec.get("path", ""), lib.public_port(spec["port"])) for s in enabled
                       for name, spec in s.endpoints.items())
    base = stack_dir(home, stack)
    plan = base / "plan"
    tmp = base / f".plan.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        shutil.copytree(LIBRARY / "services", tmp / "services")
        (tmp / "overcloud-resource-registry.yaml").write_text(
            lib.registry_lines({t: tmp / "services" / p.name for t, p in library.registry.items()}, tmp))
        j2 = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                loader=jinja2.FileSystemLoader(str(LIBRARY)))
        data = yaml.safe_dump(service_data(enabled), sort_keys=False, default_flow_style=False, width=1000)
        text = j2.get_template("overcloud.j2.yaml").render(
            roles=roles, service_names=library.known_names, haproxy_role=vip_role.name,
            steps=STEPS, secrets=sorted(library.secrets()), endpoints=endpoints,
            role_service_names={r.name: library.service_names(r.name) for r in roles},
            service_data=data.rstrip(), node_cloud=cloud)
        (tmp / "overcloud.yaml").write_text(text)
        params: dict[str, Any] = dict(images)
        for r in roles:
            params[f"Overcloud{r.name}Flavor"] = CLOUD_FLAVOR if cloud else HYPERVISOR_FLAVORS[hypervisor]
        registry = {f"OS::TripleO::{r.name}Server": "OS::Nova::Server" for r in roles}
        (tmp / "deploy-parameters.yaml").write_text(
            "# Generated by `undercloud deploy`: node servers, service images, node flavors, the virtual IP.\n"
            + yaml.safe_dump({"resource_registry": registry, "parameter_defaults": params}, sort_keys=True))
        kinds = library.secrets()
        write_atomic(tmp / "secrets.yaml", "# Generated secrets (hidden parameters), kept across re-deploys.\n"
                      + yaml.safe_dump({"parameter_defaults": {**{k: secrets[k] for k in sorted(kinds)},
                                                                **(tls or {})}}, sort_keys=True))
        shutil.rmtree(plan, ignore_errors=True)
        os.rename(tmp, plan)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    envs = [plan / "overcloud-resource-registry.yaml", plan / "deploy-parameters.yaml", plan / "secrets.yaml"]
    envs += [e if e.is_absolute() else e.resolve() for e in environments_for(example, environments, images.get("OvercloudRelease"))]
    return Plan(plan, plan / "overcloud.yaml", envs, roles, library)


def environments_for(example: str | None, environments: list[Path], kept_release: str | None = None) -> list[Path]:
    """The environments whose registries and parameters decide the services, in order: the
    release's (its network mechanism), the example's, then yours. The release is the one
    they set, else `kept_release` (the overcloud's own), else the default."""
    from undercloud.overcloud import release as overcloud_release

    mine = ([example_dir(example) / "environment.yaml"] if example else []) + list(environments)
    release = overcloud_release.given(mine) or kept_release or overcloud_release.DEFAULT_RELEASE
    return [LIBRARY / RELEASE_ENVIRONMENTS[release]] + mine


def digest(bundle_json: dict) -> str:
    return hashlib.sha256(json.dumps(bundle_json, sort_keys=True).encode()).hexdigest()
