"""The service library: what each service template declares, read before the stack exists.

A service template (`undercloud/overcloud/services/*.yaml`, or yours, mapped in an
environment's resource_registry) carries in `outputs.role_data.value`, besides what the
stack computes (`config_files`, `pod`, `kube`), literal declarations:

    service_type: OS::TripleO::Services::GlanceApi   # the registry maps it to this file
    service_name: glance_api        # key of ServiceNodes (addresses of the nodes running it)
    step: 4                         # deploy step 1..5
    images: {ContainerGlanceApiImage: service-glance}   # parameter -> service image
    secrets: {GlancePassword: password}                 # generated once; password | fernet
                                    # (store-key: the undercloud's own store key, for a
                                    # service that joins its workers)
    databases: [{name: glance, user: glance, password: GlanceDbPassword}]
    keystone: [{user: glance, password: GlancePassword, service: glance, type: image,
                description: Image service, endpoint: image}]
    endpoints: {image: {path: ""}}  # EndpointMap.image = http://VIP:9292 (port: the one
                                    # haproxy frontend's, unless given)
    haproxy: [{name: glance_api, port: 9292}]   # backend_port: the readiness probe's, unless given
                                    # also mode: tcp, check_port (the check's, else backend_port),
                                    # check: GET /path, backup: true (one server at a time: the
                                    # others are backups)
    internal_tls_client: false      # (memcached, nova_libvirt, haproxy) it calls nothing over
                                    # internal TLS: its Pods are not handed the CA, so turning
                                    # tls-everywhere on or off leaves them running

A service's health is declared once, as the readiness probe of its Pod (the first container
that has one; `resources.Pod.properties.value`, an OS::Heat::Value): the agent runs it,
`overcloud status` shows it as the health_check (`pod_spec.probe_text`), and a frontend without
a `check` whose check port is the probe's HTTP port checks the probe's path. A template
whose Pod is computed may still declare health_check and check.

From them the plan derives the resource registry, the images to build, the secrets, the
databases MariaDB makes, what keystone registers, the endpoint map and haproxy's
frontends: adding a service touches its template, its image element and the roles that
list it. Every problem is one `file:line: path: message`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from undercloud.agent import pod_spec
from undercloud.orchestration.template.source import TemplateError, kind, line_of, parse_yaml, problem

LIBRARY = Path(__file__).resolve().parent  # the templates beside this code
SERVICE_PREFIX = "OS::TripleO::Services::"
STEPS = (1, 2, 3, 4, 5)
SECRET_KINDS = ("password", "fernet", "store-key")
ROLE_DATA = ("outputs", "role_data", "value")
# The parameters every service template takes (the plan passes each of them).
COMMON_PARAMETERS = ("ServiceNodes", "VirtualIP", "EndpointMap", "ServiceData", "RoleName")
PUBLIC_TLS_BASE = 13000  # see public_port


def public_port(port: int) -> int:
    """Where an endpoint is served over TLS on the VIP (haproxy): 13000 + the last three
    digits of its port, as TripleO numbers its public TLS ports (5000 -> 13000, 9292 -> 13292)."""
    return PUBLIC_TLS_BASE + port % 1000
IDENT = re.compile(r"^[a-z][a-z0-9_]*$")
PARAM = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
DB_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
IMAGE = re.compile(r"^service-[a-z0-9][a-z0-9-]*$")


@dataclass
class Service:
    """One service template's declarations (`template` None: a type without a template,
    such as OS::Heat::None, which declares nothing)."""

    type: str
    template: Path | None
    name: str
    step: int | None = None
    health_check: str = ""  # declared, else the readiness probe's (`readiness`) text
    readiness: dict | None = None  # the Pod's readiness probe, when the template gives it literally
    images: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    databases: list[dict] = field(default_factory=list)
    keystone: list[dict] = field(default_factory=list)
    endpoints: dict[str, dict] = field(default_factory=dict)
    haproxy: list[dict] = field(default_factory=list)
    parameters: frozenset[str] = frozenset()
    # parameters of yours: no default, and none the plan passes (common, images, secrets)
    required: dict[str, str] = field(default_factory=dict)  # name -> its description


class _Reader:
    """Checks one template's declarations, collecting `file:line: path: message` problems."""

    def __init__(self, path: Path, doc: Any):
        self.path, self.doc, self.problems = path, doc, []

    def bad(self, keys: tuple, message: str) -> None:
        path = ".".join(str(k) for k in ROLE_DATA + keys)
        self.problems.append(problem(str(self.path), line_of(self.doc, ROLE_DATA + keys), path, message))

    def typed(self, value: Any, keys: tuple, want: type, what: str) -> bool:
        if isinstance(value, want) and not (want is int and isinstance(value, bool)):
            return True
        self.bad(keys, f"expected {what}, not {kind(value)}" + (" (declarations are literal: no intrinsic "
                                                              "functions)" if isinstance(value, dict) else ""))
        return False

    def entries(self, rd: dict, key: str, fields: dict[str, tuple[type, bool]]) -> list[dict]:
        """A list of maps with the given fields (name -> (type, required))."""
        value = rd.get(key, [])
        if not self.typed(value, (key,), list, "a list"):
            return []
        out = []
        for i, item in enumerate(value):
            if not self.typed(item, (key, i), dict, "a map"):
                continue
            ok = True
            for f, (want, required) in fields.items():
                if f not in item:
                    if required:
                        self.bad((key, i), f"{f} is required")
                        ok = False
                elif not self.typed(item[f], (key, i, f), want,
                                    {int: "a number", bool: "true or false"}.get(want, "a string")):
                    ok = False
            for f in item:
                if f not in fields:
                    self.bad((key, i, f), f"unknown key {f!r} (known: {', '.join(fields)})")
                    ok = False
            if ok:
                out.append(dict(item))
        return out


def read_service(service_type: str, path: Path) -> Service:
    """The declarations of the template at `path`, which the registry maps `service_type` to."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise TemplateError([problem(str(path), 0, "", f"cannot read service template: {exc.strerror}")]) from None
    doc = parse_yaml(text, str(path))
    r = _Reader(path, doc)
    rd: Any = doc
    for k in ROLE_DATA:
        rd = rd.get(k) if isinstance(rd, dict) else None
    if not isinstance(rd, dict):
        raise TemplateError([problem(str(path), line_of(doc, ROLE_DATA), ".".join(ROLE_DATA),
                                     "a service template outputs role_data with its declarations "
                                     "(service_name, step, ...)")])
    params = doc.get("parameters") if isinstance(doc.get("parameters"), dict) else {}
    svc = Service(service_type, path, "", parameters=frozenset(params))

    declared = rd.get("service_type", service_type)
    if declared != service_type and r.typed(declared, ("service_type",), str, "a string"):
        r.bad(("service_type",), f"this template is {declared}, but the registry maps {service_type} to it")
    name = rd.get("service_name")
    if r.typed(name, ("service_name",), str, "a string") and not IDENT.match(name):
        r.bad(("service_name",), "expected a lower-case identifier (e.g. glance_api)")
    svc.name = name if isinstance(name, str) else ""
    step = rd.get("step")
    if r.typed(step, ("step",), int, "a number") and step not in STEPS:
        r.bad(("step",), f"deploy steps are {STEPS[0]}..{STEPS[-1]}")
    svc.step = step if isinstance(step, int) else None
    svc.readiness = _readiness(doc, rd)
    check = rd.get("health_check", "")
    if r.typed(check, ("health_check",), str, "a string"):
        svc.health_check = check or (pod_spec.probe_text(svc.readiness) if svc.readiness else "")

    for key in ("images", "secrets", "endpoints"):
        value = rd.get(key, {})
        if r.typed(value, (key,), dict, "a map"):
            getattr(svc, key).update(value)
    for param, image in svc.images.items():
        if param not in params:
            r.bad(("images", param), f"{param} is not a parameter of this template")
        if not isinstance(image, str) or not IMAGE.match(image):
            r.bad(("images", param), f"expected a service image name service-<element>, not {image!r}")
    for name_, kind_ in svc.secrets.items():
        if kind_ not in SECRET_KINDS:
            r.bad(("secrets", name_), f"unknown secret kind {kind_!r} ({' or '.join(SECRET_KINDS)})")
        p = params.get(name_)
        if not isinstance(p, dict):
            r.bad(("secrets", name_), f"{name_} is not a parameter of this template")
        elif p.get("hidden") is not True:
            r.bad(("secrets", name_), f"parameter {name_} holds a secret: declare it hidden: true")
    svc.databases = r.entries(rd, "databases", {"name": (str, True), "user": (str, True), "password": (str, True)})
    for i, db in enumerate(svc.databases):
        for f in ("name", "user"):
            if not DB_NAME.match(db[f]):
                r.bad(("databases", i, f), "expected a lower-case identifier of at most 64 characters")
    svc.keystone = r.entries(rd, "keystone", {"user": (str, True), "password": (str, True), "service": (str, False),
                                              "type": (str, False), "description": (str, False),
                                              "endpoint": (str, False)})
    for i, k in enumerate(svc.keystone):
        if ("type" in k) != ("endpoint" in k):
            r.bad(("keystone", i), "a catalog entry needs both type and endpoint (a user alone needs neither)")
    svc.haproxy = r.entries(rd, "haproxy", {"name": (str, True), "port": (int, True), "backend_port": (int, False),
                                            "check": (str, False), "mode": (str, False),
                                            "check_port": (int, False), "backup": (bool, False)})
    http = (svc.readiness or {}).get("httpGet")
    probed = next((p.get("port") for p in ((svc.readiness or {}).get(k) for k in ("httpGet", "tcpSocket"))
                   if isinstance(p, dict)), None)
    for i, f in enumerate(svc.haproxy):
        if "backend_port" not in f:  # the port the readiness probe checks, declared there once
            if not isinstance(probed, int) or isinstance(probed, bool):
                r.bad(("haproxy", i, "backend_port"), "expected a port number (none given, and no readiness "
                      "probe port to take it from)")
                continue
            f["backend_port"] = probed
        if "check" not in f and isinstance(http, dict) and http.get("port") == f.get("check_port", f["backend_port"]):
            f["check"] = f"GET {http.get('path', '/')}"
        if f.get("mode", "http") not in ("http", "tcp"):
            r.bad(("haproxy", i, "mode"), "expected http or tcp")
        if not IDENT.match(f["name"]):
            r.bad(("haproxy", i, "name"), "expected a lower-case identifier")
    for ep, spec in svc.endpoints.items():
        if not isinstance(ep, str) or not IDENT.match(ep):
            r.bad(("endpoints", ep), "an endpoint name is a lower-case identifier (e.g. image)")
        if not r.typed(spec, ("endpoints", ep), dict, "a map with port (and path)"):
            continue
        if "port" not in spec and len(svc.haproxy) == 1:  # the frontend's, declared there once
            svc.endpoints[ep] = spec = {**spec, "port": svc.haproxy[0]["port"]}
        port, path_ = spec.get("port"), spec.get("path", "")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            r.bad(("endpoints", ep, "port"), "expected a port number" + (
                "" if "port" in spec else " (none given, and no one haproxy frontend to take it from)"))
        if not isinstance(path_, str) or (path_ and not path_.startswith("/")):
            r.bad(("endpoints", ep, "path"), "expected a path starting with / (or none)")
        unknown = set(spec) - {"port", "path"}
        if unknown:
            r.bad(("endpoints", ep), f"unknown key {sorted(unknown)[0]!r} (known: port, path)")
    for key, what in (("databases", "password"), ("keystone", "password")):
        for i, item in enumerate(getattr(svc, key)):
            if item[what] not in svc.secrets:
                r.bad((key, i, what), f"{item[what]} is not one of this template's secrets")
    given = set(COMMON_PARAMETERS) | set(svc.images) | set(svc.secrets)
    svc.required = {n: " ".join(str(p.get("description") or "").split()) for n, p in params.items()
                    if isinstance(p, dict) and "default" not in p and n not in given}
    missing = [p for p in COMMON_PARAMETERS if p not in params]
    if missing:
        r.problems.append(problem(str(path), line_of(doc, ("parameters",)), "parameters",
                                  f"a service template takes {', '.join(COMMON_PARAMETERS)} (missing: "
                                  f"{', '.join(missing)})"))
    if r.problems:
        raise TemplateError(r.problems)
    return svc


def _readiness(doc: Any, rd: dict) -> dict | None:
    """The readiness probe of the first container that has one in the Pod that role_data.pod
    names ({get_attr: [R, value]}, R an OS::Heat::Value whose value is written out), else None."""
    ref = rd.get("pod")
    ref = ref.get("get_attr") if isinstance(ref, dict) else None
    if not (isinstance(ref, list) and len(ref) == 2 and ref[1] == "value"):
        return None
    res = (doc.get("resources") or {}).get(ref[0]) if isinstance(doc.get("resources"), dict) else None
    pod = ((res or {}).get("properties") or {}).get("value") if isinstance(res, dict) else None
    containers = ((pod or {}).get("spec") or {}).get("containers") if isinstance(pod, dict) else None
    for c in containers if isinstance(containers, list) else []:
        probe = c.get("readinessProbe") if isinstance(c, dict) else None
        if isinstance(probe, dict):
            return probe
    return None


def builtin_registry(library: Path = LIBRARY) -> dict[str, Path]:
    """service type -> template, for the templates of the library (their `service_type`)."""
    out: dict[str, Path] = {}
    for path in sorted((library / "services").glob("*.yaml")):
        try:
            doc = parse_yaml(path.read_text(), str(path)) or {}
            declared = doc["outputs"]["role_data"]["value"]["service_type"]
        except (OSError, KeyError, TypeError):
            declared = None
        if not isinstance(declared, str) or not declared.startswith(SERVICE_PREFIX):
            raise TemplateError([problem(str(path), 0, ".".join(ROLE_DATA + ("service_type",)),
                                         f"a library template declares its type ({SERVICE_PREFIX}NAME)")])
        if declared in out:
            raise TemplateError([problem(str(path), 0, ".".join(ROLE_DATA + ("service_type",)),
                                         f"{declared} is also declared by {out[declared].name}")])
        out[declared] = path
    return out


def library_images(library: Path = LIBRARY) -> list[str]:
    """Every service image the library's templates declare (`image build --all`)."""
    return sorted({image for t, p in builtin_registry(library).items() for image in read_service(t, p).images.values()})


def registry_lines(registry: dict[str, Path], base: Path) -> str:
    """The library's resource_registry as an environment file (paths relative to `base`)."""
    body = {"resource_registry": {t: str(p.relative_to(base)) for t, p in sorted(registry.items())}}
    return ("# The service library, generated by `undercloud deploy` from each template's service_type.\n"
            "# Map a service to OS::Heat::None in your own environment to disable it.\n"
            + yaml.safe_dump(body, sort_keys=False))


def effective_types(service_types: list[tuple[str, str]], builtin: dict[str, Path],
                    environments: list[Path]) -> dict[tuple[str, str], Any]:
    """(resource name, service type) -> the template Path it resolves to, or the type name
    (e.g. OS::Heat::None), through the library registry and then your environments in
    order, by the engine's own registry rules (globs, per-resource entries, null)."""
    from undercloud.orchestration.resources import registry as plugins
    from undercloud.orchestration.template.environment import FileRef, check_env, merge
    from undercloud.orchestration.template.source import FnError

    docs: list[tuple[str, dict]] = [("library", {"resource_registry": {t: FileRef(str(p)) for t, p in builtin.items()}})]
    for env in environments:
        text = env.read_text()
        doc = parse_yaml(text, str(env))

        def resolve(value: str, path: tuple, base: Path = env.parent) -> str:
            return str((base / value).resolve())

        try:
            checked = check_env(doc, resolve)
        except FnError as exc:
            raise TemplateError([problem(str(env), line_of(doc, exc.path), ".".join(map(str, exc.path)),
                                         exc.message)]) from None
        docs.append((str(env), {"resource_registry": checked.get("resource_registry") or {}}))
    merged, _ = merge(docs, {})
    builtin_types = frozenset(plugins.known_types())
    out: dict[tuple[str, str], Any] = {}
    for resource, stype in service_types:
        try:
            target, _ = merged.registry.lookup(stype, resource, builtin_types)
        except ValueError as exc:
            raise TemplateError([problem("resource_registry", 0, stype, str(exc))]) from None
        out[(resource, stype)] = Path(str(target)) if isinstance(target, FileRef) else target
    return out


def declared_or_plain(stype: str, target: Any) -> Service:
    """A service as the plan sees it: a template's declarations, or, for a plain type
    (OS::Heat::None, or a type of yours without a template), nothing declared."""
    if isinstance(target, Path):
        return read_service(stype, target)
    return Service(stype, None, "" if target == "OS::Heat::None" else stype.removeprefix(SERVICE_PREFIX).lower())


def conflicts(services: list[Service]) -> list[str]:
    """Declarations that two services cannot both make (same endpoint, port, database,
    secret of another kind, user with another password)."""
    problems: list[str] = []
    seen: dict[tuple, tuple[Service, Any]] = {}

    def claim(key: tuple, svc: Service, value: Any, what: str) -> None:
        if key in seen and seen[key][1] != value and seen[key][0] is not svc:
            other = seen[key][0]
            problems.append(problem(str(svc.template), 0, ".".join(ROLE_DATA),
                                    f"{what} is also declared by {other.template} ({other.type}) differently"))
        seen.setdefault(key, (svc, value))

    for s in services:
        for name, kind_ in s.secrets.items():
            claim(("secret", name), s, kind_, f"secret {name}")
        for name, spec in s.endpoints.items():
            claim(("endpoint", name), s, (s.type, dict(spec)), f"endpoint {name}")
            tls = public_port(spec["port"])
            claim(("port", tls), s, (s.type, f"{name} over TLS"), f"public TLS port {tls} (endpoint {name})")
        for f in s.haproxy:
            claim(("frontend", f["name"]), s, (s.type, f["port"]), f"haproxy frontend {f['name']}")
            claim(("port", f["port"]), s, (s.type, f["name"]), f"haproxy port {f['port']}")
        for db in s.databases:
            claim(("database", db["name"]), s, (db["user"], db["password"]), f"database {db['name']}")
            claim(("dbuser", db["user"]), s, db["password"], f"database user {db['user']}")
        for k in s.keystone:
            claim(("user", k["user"]), s, k["password"], f"keystone user {k['user']}")
            if "type" in k:
                claim(("catalog", k["type"]), s, (k["user"], k["endpoint"]), f"keystone service type {k['type']}")
        for param, image in s.images.items():
            claim(("image", param), s, image, f"image parameter {param}")
    return problems


def endpoint_problems(services: list[Service]) -> list[str]:
    """Catalog entries must name an endpoint some enabled service declares."""
    names = {e for s in services for e in s.endpoints}
    out = []
    for s in services:
        for i, k in enumerate(s.keystone):
            if "endpoint" in k and k["endpoint"] not in names:
                out.append(problem(str(s.template), 0, ".".join(ROLE_DATA + ("keystone", str(i), "endpoint")),
                                   f"no enabled service declares the endpoint {k['endpoint']!r}"))
    return out
