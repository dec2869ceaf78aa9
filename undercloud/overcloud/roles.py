"""Roles in TripleO's roles_data.yaml format, and the shipped examples."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from undercloud.errors import InvalidInput
from undercloud.orchestration.template.source import Map, Seq, TemplateError, line_of, parse_yaml, problem
from undercloud.overcloud.library import LIBRARY, SERVICE_PREFIX

EXAMPLES = ("minimal", "ha", "hypervisor-host")
ROLE_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")
HAPROXY = SERVICE_PREFIX + "HAproxy"
# Keys of TripleO's roles_data.yaml that are accepted (most only matter to TripleO itself).
ROLE_KEYS = frozenset((
    "name", "description", "CountDefault", "HostnameFormatDefault", "ServicesDefault", "tags", "networks",
    "uses_deprecated_params", "deprecated_param_flavor", "deprecated_param_image", "deprecated_nic_config_name",
    "update_serial", "default_route_networks", "disable_upgrade_deployment", "RoleParametersDefault",
    "deprecated_server_resource_name", "deprecated_param_extraconfig", "deprecated_param_metadata",
    "deprecated_param_scheduler_hints", "deprecated_param_ips"))


@dataclass
class Role:
    name: str
    count: int
    hostname_format: str
    services: list[str]  # OS::TripleO::Services::X, in the order their Pods start within a step
    description: str = ""
    tags: list[str] = field(default_factory=list)

    def resource(self, service_type: str) -> str:
        """The stack resource of one of this role's services (ControllerGlanceApi)."""
        return self.name + service_type.removeprefix(SERVICE_PREFIX)


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
            if key not in ROLE_KEYS:
                raise bad([i, key], f"unknown role key {key!r}")
        roles.append(Role(rname, count, fmt, list(services), str(r.get("description") or "").strip(),
                          list(r.get("tags") or [])))
    return roles
