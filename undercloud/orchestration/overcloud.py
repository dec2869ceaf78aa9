"""The overcloud plan: roles_data.yaml + the service library -> a stack's files.

As TripleO did, `overcloud.j2.yaml` is rendered with Jinja2 from the roles (one server
group, service chain and deploy steps 1..5 per role) into a *plan* directory kept in the
home, `$UNDERCLOUD_HOME/overcloud/<stack>/plan/`, beside the service templates and the
registry; generated environments carry the images, flavors and secrets. The CLI turns the
plan into a Bundle and creates or updates the stack (cli/deploy.py).

Secrets (passwords, fernet and credential keys) are generated once per stack and kept in
`secrets.json` (mode 600) so re-deploys keep them. They are hidden parameters of the
top-level template, given as stack parameters (so the engine masks them wherever they
were passed on to: resource properties, attributes, messages) and, for the service
templates, as parameter_defaults in `secrets.yaml` (mode 600). Never printed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets as _secrets
import shutil
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from undercloud.errors import InvalidInput
from undercloud.orchestration.template.source import Map, Seq, TemplateError, line_of, parse_yaml, problem

LIBRARY = Path(__file__).resolve().parent.parent / "overcloud"
EXAMPLES = ("minimal", "ha")
STEPS = (1, 2, 3, 4, 5)
STEP_NAMES = {1: "load balancer", 2: "database and messaging", 3: "bootstrap", 4: "API services",
              5: "post-deploy"}
SERVICE_PREFIX = "OS::TripleO::Services::"
ROLE_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")
# Image parameter of each service template -> the service image that fills it.
SERVICE_IMAGES = {
    "ContainerHaproxyImage": "service-haproxy",
    "ContainerMysqlImage": "service-mariadb",
    "ContainerRabbitmqImage": "service-rabbitmq",
    "ContainerMemcachedImage": "service-memcached",
    "ContainerKeystoneImage": "service-keystone",
    "ContainerPlacementImage": "service-placement",
}
# The node flavor of every role per hypervisor (an environment may set Overcloud<Role>Flavor).
HYPERVISOR_FLAVORS = {"container": "container", "vm": "vm-control", "baremetal": "baremetal"}
PASSWORDS = ("AdminPassword", "KeystoneDbPassword", "PlacementPassword", "PlacementDbPassword", "RabbitPassword")
KEYS = ("KeystoneFernetKey0", "KeystoneFernetKey1", "KeystoneCredentialKey0", "KeystoneCredentialKey1")
SECRETS = PASSWORDS + KEYS


@dataclass
class Role:
    name: str
    count: int
    hostname_format: str
    services: list[str]  # OS::TripleO::Services::X
    description: str = ""
    tags: list[str] = field(default_factory=list)

    @property
    def service_names(self) -> list[str]:
        """Service names (as the templates' role_data names them) of this role."""
        return [SERVICE_NAMES.get(s, s.removeprefix(SERVICE_PREFIX).lower()) for s in self.services]


# service type -> service_name in its role_data (for the ServiceNodes map).
SERVICE_NAMES = {
    "OS::TripleO::Services::HAproxy": "haproxy",
    "OS::TripleO::Services::MySQL": "mysql",
    "OS::TripleO::Services::RabbitMQ": "rabbitmq",
    "OS::TripleO::Services::Memcached": "memcached",
    "OS::TripleO::Services::Keystone": "keystone",
    "OS::TripleO::Services::Placement": "placement",
}


def example_dir(name: str) -> Path:
    if name not in EXAMPLES:
        raise InvalidInput(f"unknown example {name!r} (examples: {', '.join(EXAMPLES)})", "--example")
    return LIBRARY / "examples" / name


def roles_file_for(example: str | None, roles: str | None) -> Path:
    """--roles wins; else the example's own roles_data.yaml; else the library's."""
    if roles:
        return Path(roles)
    if example and (example_dir(example) / "roles_data.yaml").exists():
        return example_dir(example) / "roles_data.yaml"
    return LIBRARY / "roles_data.yaml"


def load_roles(path: Path) -> list[Role]:
    """Read a roles_data.yaml; any problem is one `file:line: path: message` error."""
    name = str(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidInput(f"cannot read roles file: {exc.strerror}", name) from None
    data = parse_yaml(text, name)

    def bad(p: list, msg: str) -> TemplateError:
        return TemplateError([problem(name, line_of(data, p), ".".join(str(x) for x in p) or "roles", msg)])

    if not isinstance(data, Seq) or not data:
        raise bad([], "expected a list of roles (TripleO roles_data.yaml)")
    roles, seen = [], set()
    for i, r in enumerate(data):
        if not isinstance(r, Map):
            raise bad([i], "each role is a map with name, ServicesDefault, ...")
        rname = r.get("name")
        if not isinstance(rname, str) or not ROLE_NAME.match(rname):
            raise bad([i, "name"], "a role name is a CamelCase identifier (e.g. Controller)")
        if rname in seen:
            raise bad([i, "name"], f"role {rname} is defined twice")
        seen.add(rname)
        count = r.get("CountDefault", 0)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise bad([i, "CountDefault"], "expected a number >= 0")
        fmt = r.get("HostnameFormatDefault", f"%stackname%-{rname.lower()}-%index%")
        if not isinstance(fmt, str) or "%index%" not in fmt:
            raise bad([i, "HostnameFormatDefault"], "expected a string with %index% (e.g. %stackname%-ctl-%index%)")
        services = r.get("ServicesDefault") or []
        if not isinstance(services, list):
            raise bad([i, "ServicesDefault"], "expected a list of OS::TripleO::Services::NAME")
        for j, s in enumerate(services):
            if not isinstance(s, str) or not s.startswith(SERVICE_PREFIX) or len(s) == len(SERVICE_PREFIX):
                raise bad([i, "ServicesDefault", j], "expected OS::TripleO::Services::NAME")
        if len(set(services)) != len(services):
            raise bad([i, "ServicesDefault"], "a service is listed twice")
        for key in r:
            if key not in ("name", "description", "CountDefault", "HostnameFormatDefault", "ServicesDefault",
                           "tags", "networks", "uses_deprecated_params", "deprecated_param_flavor",
                           "deprecated_param_image", "deprecated_nic_config_name", "update_serial",
                           "default_route_networks", "disable_upgrade_deployment", "RoleParametersDefault",
                           "deprecated_server_resource_name", "deprecated_param_extraconfig",
                           "deprecated_param_metadata", "deprecated_param_scheduler_hints",
                           "deprecated_param_ips", "ServicesDefault"):
                raise bad([i, key], f"unknown role key {key!r}")
        roles.append(Role(rname, count, fmt, list(services), str(r.get("description") or "").strip(),
                          list(r.get("tags") or [])))
    if not any("OS::TripleO::Services::HAproxy" in r.services for r in roles):
        raise bad([], "no role runs OS::TripleO::Services::HAproxy: the API services need it in front")
    return roles


def service_steps(registry_files: list[Path]) -> dict[str, tuple[str, int | None, str]]:
    """service type -> (service_name, step, health_check) read from the library templates
    (for progress lines; the stack itself reads them from role_data)."""
    out: dict[str, tuple[str, int | None, str]] = {}
    for env in registry_files:
        try:
            reg = (yaml.safe_load(env.read_text()) or {}).get("resource_registry") or {}
        except (OSError, yaml.YAMLError):
            continue
        for typ, target in reg.items():
            if not str(typ).startswith(SERVICE_PREFIX):
                continue
            if target == "OS::Heat::None":
                out[typ] = ("", None, "")
                continue
            try:
                t = yaml.safe_load((env.parent / str(target)).read_text())
                rd = t["outputs"]["role_data"]["value"]
                step = rd.get("step") if isinstance(rd.get("step"), int) else None
                out[typ] = (str(rd.get("service_name", typ)), step, str(rd.get("health_check", "")))
            except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
                out[typ] = (typ.removeprefix(SERVICE_PREFIX).lower(), None, "")
    return out


# ---- secrets ---------------------------------------------------------------------------

def _password(n: int = 24) -> str:
    alphabet = string.ascii_letters + string.digits
    return "".join(_secrets.choice(alphabet) for _ in range(n))


def _fernet_key() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


def write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600), "w") as f:
        f.write(text)
    tmp.replace(path)


def stack_dir(home: Path, stack: str) -> Path:
    if not re.match(r"^[A-Za-z][A-Za-z0-9_.-]*$", stack):
        raise InvalidInput("a stack name starts with a letter and has letters, digits, _ . - only", "--stack")
    return home / "overcloud" / stack


def load_secrets(home: Path, stack: str, given: dict[str, str] | None = None) -> dict[str, Any]:
    """The stack's secrets, generated on first use and kept (mode 600) for re-deploys.
    `given` (set in your environments) win and are kept, so every user of a secret
    (services, clouds.yaml) agrees."""
    path = stack_dir(home, stack) / "secrets.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    changed = False
    for k, v in (given or {}).items():
        if data.get(k) != v:
            data[k], changed = v, True
    for k in PASSWORDS:
        if not data.get(k):
            data[k], changed = _password(), True
    for k in KEYS:
        if not data.get(k):
            data[k], changed = _fernet_key(), True
    if changed:
        write_private(path, json.dumps(data, indent=2, sort_keys=True))
    return data


def secrets_given(environments: list[Path]) -> dict[str, str]:
    """Secrets your environments set (parameters or parameter_defaults; the last wins)."""
    out: dict[str, str] = {}
    for e in environments:
        try:
            doc = yaml.safe_load(e.read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue  # the template loader reports it with file and line
        if not isinstance(doc, dict):
            continue
        for section in ("parameter_defaults", "parameters"):
            values = doc.get(section) or {}
            if isinstance(values, dict):
                out.update({k: str(v) for k, v in values.items() if k in SECRETS and v not in (None, "")})
    return out


# ---- the virtual IP --------------------------------------------------------------------

def choose_virtual_ip(home: Path, stack: str, candidates: list[str]) -> str:
    """The stack's virtual IP: one of `candidates` (the addresses the nodes' network keeps
    for VIPs, which no node gets), the same at every deploy (kept in the stack's directory,
    so deleting the overcloud frees it) and never one another stack of this home holds."""
    import fcntl

    base = home / "overcloud"
    mine = stack_dir(home, stack) / "virtual-ip"
    mine.parent.mkdir(parents=True, exist_ok=True)
    with open(base / ".virtual-ip.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = mine.read_text().strip() if mine.exists() else ""
        if kept in candidates:
            return kept
        held = {p.read_text().strip(): p.parent.name for p in base.glob("*/virtual-ip") if p != mine}
        free = [a for a in candidates if a not in held]
        if not free:
            raise InvalidInput(f"the virtual IPs of the nodes' network ({', '.join(candidates) or 'none'}) are all "
                               f"held by other overclouds ({', '.join(sorted(set(held.values())))}): delete one",
                               "--stack")
        mine.write_text(free[0] + "\n")
        return free[0]


def virtual_router_id(instance: str, vip: str) -> int:
    """keepalived's VRRP virtual_router_id (1-255) for a stack's VIP: derived from this
    home's instance and the VIP, so the stacks of one home (their VIPs differ in the last
    octet) never share one, and homes are spread over the range."""
    h = int(hashlib.sha256(instance.encode()).hexdigest()[:8], 16)
    return 1 + (h + int(vip.rsplit(".", 1)[-1])) % 255


# ---- the plan --------------------------------------------------------------------------

@dataclass
class Plan:
    dir: Path
    template: Path
    environments: list[Path]
    roles: list[Role]
    steps: dict[str, tuple[str, int | None, str]]  # service type -> (name, step, health check)

    def services_at(self, role: Role, step: int) -> list[str]:
        return [self.steps.get(s, (s, None, ""))[0] for s in role.services
                if self.steps.get(s, ("", None, ""))[1] == step and self.steps.get(s, ("",))[0]]


def render(home: Path, stack: str, roles: list[Role], images: dict[str, str], hypervisor: str,
           example: str | None, environments: list[Path]) -> Plan:
    """Write the plan directory; returns the template and environments, in merge order:
    registry, deploy parameters (images, flavors), secrets, the example, yours."""
    import jinja2

    if hypervisor not in HYPERVISOR_FLAVORS:
        raise InvalidInput(f"unknown hypervisor type {hypervisor!r} ({', '.join(HYPERVISOR_FLAVORS)})",
                           "--hypervisor")
    for e in environments:
        if not e.is_file():
            raise InvalidInput("environment file not found", str(e))
    base = stack_dir(home, stack)
    plan = base / "plan"
    tmp = base / f".plan.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        shutil.copytree(LIBRARY / "services", tmp / "services")
        shutil.copy(LIBRARY / "overcloud-resource-registry.yaml", tmp / "overcloud-resource-registry.yaml")
        service_names = sorted({n for r in roles for n in r.service_names} | set(SERVICE_NAMES.values()))
        haproxy_role = next(r.name for r in roles if "OS::TripleO::Services::HAproxy" in r.services)
        j2 = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                loader=jinja2.FileSystemLoader(str(LIBRARY)))
        text = j2.get_template("overcloud.j2.yaml").render(
            roles=roles, service_names=service_names, haproxy_role=haproxy_role, steps=STEPS,
            secrets=SECRETS)
        (tmp / "overcloud.yaml").write_text(text)
        params: dict[str, Any] = dict(images)
        for r in roles:
            params[f"Overcloud{r.name}Flavor"] = HYPERVISOR_FLAVORS[hypervisor]
        registry = {f"OS::TripleO::{r.name}Server": "OS::Nova::Server" for r in roles}
        (tmp / "deploy-parameters.yaml").write_text(
            "# Generated by `undercloud deploy`: node servers, service images, node flavors, the virtual IP.\n"
            + yaml.safe_dump({"resource_registry": registry, "parameter_defaults": params}, sort_keys=True))
        secrets = load_secrets(home, stack, secrets_given(environments))
        write_private(tmp / "secrets.yaml", "# Generated secrets (hidden parameters), kept across re-deploys.\n"
                       + yaml.safe_dump({"parameter_defaults": secrets}, sort_keys=True))
        shutil.rmtree(plan, ignore_errors=True)
        os.rename(tmp, plan)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    envs = [plan / "overcloud-resource-registry.yaml", plan / "deploy-parameters.yaml", plan / "secrets.yaml"]
    if example:
        envs.append(example_dir(example) / "environment.yaml")
    envs += [e.resolve() for e in environments]
    steps = service_steps([plan / "overcloud-resource-registry.yaml",
                           *[e for e in environments if e.suffix in (".yaml", ".yml")]])
    return Plan(plan, plan / "overcloud.yaml", envs, roles, steps)


def digest(bundle_json: dict) -> str:
    return hashlib.sha256(json.dumps(bundle_json, sort_keys=True).encode()).hexdigest()


def clouds_yaml(stack: str, auth_url: str, password: str, region: str = "RegionOne") -> str:
    return yaml.safe_dump({"clouds": {stack: {
        "auth": {"auth_url": auth_url, "username": "admin", "password": password, "project_name": "admin",
                 "user_domain_name": "Default", "project_domain_name": "Default"},
        "region_name": region, "identity_api_version": 3, "interface": "public"}}}, sort_keys=False)


def write_clouds_yaml(home: Path, stack: str, auth_url: str) -> Path:
    secrets = load_secrets(home, stack)
    path = stack_dir(home, stack) / "clouds.yaml"
    write_private(path, clouds_yaml(stack, auth_url, secrets["AdminPassword"]))
    return path
