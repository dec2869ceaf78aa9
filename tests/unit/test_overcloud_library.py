"""The service library's declarations: read before the stack exists, checked one line per
problem, and everything the plan derives from them (registry, images, secrets, databases,
keystone registrations, endpoints, haproxy frontends)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from undercloud.orchestration.template import Bundle, TemplateError, load
from undercloud.overcloud import library
from undercloud.overcloud import plan as op
from undercloud.overcloud.roles import load_roles
from undercloud.overcloud.secrets import missing_secrets

COMMON = """\
  ServiceNodes: {type: json, default: {}}
  VirtualIP: {type: string, default: ""}
  EndpointMap: {type: json, default: {}}
  ServiceData: {type: json, default: {}}
  RoleName: {type: string, default: ""}
"""

# A service of the user's own, declared the way the library's are.
FOO = """\
heat_template_version: wallaby
parameters:
""" + COMMON + """\
  ContainerFooImage: {type: string}
  FooPassword: {type: string, hidden: true}
  FooDbPassword: {type: string, hidden: true}
resources:
  Pod:
    type: OS::Heat::Value
    properties:
      type: json
      value: {apiVersion: v1, kind: Pod, metadata: {name: foo},
              spec: {containers: [{name: foo, image: {get_param: ContainerFooImage}}]}}
outputs:
  role_data:
    value:
      service_type: OS::TripleO::Services::Foo
      service_name: foo_api
      step: 4
      health_check: "HTTP GET :19999/"
      images: {ContainerFooImage: service-foo}
      secrets: {FooPassword: password, FooDbPassword: password}
      databases: [{name: foo, user: foo, password: FooDbPassword}]
      keystone: [{user: foo, password: FooPassword, service: foo, type: widget, description: Widgets, endpoint: widget}]
      endpoints: {widget: {port: 9999, path: /v1}}
      haproxy: [{name: foo_api, port: 9999, backend_port: 19999, check: GET /}]
      kube: [{get_attr: [Pod, value]}]
"""


def test_every_library_template_declares_itself_consistently():
    registry = library.builtin_registry()
    assert {"OS::TripleO::Services::HAproxy", "OS::TripleO::Services::Keystone"} <= set(registry)
    services = [library.read_service(t, p) for t, p in registry.items()]
    assert library.conflicts(services) == []
    assert library.endpoint_problems(services) == []
    for s in services:
        assert s.name and s.step in library.STEPS and s.health_check and s.readiness, s.type
        assert s.images and all(v.startswith("service-") for v in s.images.values()), s.type
    # The element behind every declared image exists (service-X is built from element X).
    elements = Path(library.LIBRARY).parent / "images" / "elements"
    for s in services:
        for image in s.images.values():
            assert (elements / image.removeprefix("service-")).is_dir(), image


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("change, where, message", [
    (("step: 4", "step: 9"), "outputs.role_data.value.step", "deploy steps are 1..5"),
    (("images: {ContainerFooImage: service-foo}", "images: {ContainerBarImage: service-foo}"),
     "outputs.role_data.value.images.ContainerBarImage", "not a parameter of this template"),
    (("images: {ContainerFooImage: service-foo}", "images: {ContainerFooImage: foo}"),
     "outputs.role_data.value.images.ContainerFooImage", "service-<element>"),
    (("FooPassword: {type: string, hidden: true}", "FooPassword: {type: string}"),
     "outputs.role_data.value.secrets.FooPassword", "declare it hidden: true"),
    (("FooPassword: password,", "FooPassword: secret,"), "outputs.role_data.value.secrets.FooPassword",
     "unknown secret kind 'secret'"),
    (("password: FooDbPassword}]", "password: KeystoneDbPassword}]"), "outputs.role_data.value.databases.0.password",
     "not one of this template's secrets"),
    (("service_name: foo_api", "service_name: {get_param: RoleName}"), "outputs.role_data.value.service_name",
     "no intrinsic functions"),
    (("backend_port: 19999,", ""), "outputs.role_data.value.haproxy.0.backend_port",
     "none given, and no readiness probe port to take it from"),
    (("endpoints: {widget: {port: 9999, path: /v1}}\n      haproxy: [{name: foo_api, port: 9999, backend_port: 19999, "
      "check: GET /}]", "endpoints: {widget: {path: /v1}}\n      haproxy: []"),
     "outputs.role_data.value.endpoints.widget.port", "no one haproxy frontend to take it from"),
    (("backend_port: 19999,", "backend_port: 19999, backup: yes please,"), "outputs.role_data.value.haproxy.0.backup",
     "expected true or false, not"),
    (("backend_port: 19999,", "backend_port: 19999, check_port: '9200',"),
     "outputs.role_data.value.haproxy.0.check_port", "expected a number"),
    (("type: widget, description: Widgets, endpoint: widget}", "type: widget}"),
     "outputs.role_data.value.keystone.0", "needs both type and endpoint"),
    (("endpoints: {widget: {port: 9999, path: /v1}}", "endpoints: {widget: {port: 99999}}"),
     "outputs.role_data.value.endpoints.widget.port", "expected a port number"),
    (("databases: [{name: foo,", "databases: [{name: Foo-DB,"), "outputs.role_data.value.databases.0.name",
     "lower-case identifier"),
    (("  ServiceData: {type: json, default: {}}\n", ""), "parameters", "missing: ServiceData"),
    (("service_type: OS::TripleO::Services::Foo", "service_type: OS::TripleO::Services::Bar"),
     "outputs.role_data.value.service_type", "registry maps OS::TripleO::Services::Foo to it"),
])
def test_a_bad_declaration_is_one_line_naming_file_line_and_path(tmp_path, change, where, message):
    assert change[0] in FOO
    path = write(tmp_path, "foo.yaml", FOO.replace(*change))
    with pytest.raises(TemplateError) as exc:
        library.read_service("OS::TripleO::Services::Foo", path)
    line = exc.value.problems[0]  # one line per problem (a renamed key is two: unknown, and one missing)
    assert len(exc.value.problems) <= 2
    assert line.startswith(f"{path}:") and f": {where}: " in line and message in line, line
    lineno = int(line.split(":")[1])
    assert lineno > 0


def test_role_data_must_carry_the_declarations(tmp_path):
    path = write(tmp_path, "foo.yaml", "heat_template_version: wallaby\nparameters: {}\nresources: {}\n")
    with pytest.raises(TemplateError, match="outputs.role_data.value: a service template outputs role_data"):
        library.read_service("OS::TripleO::Services::Foo", path)


def roles_with(tmp_path: Path, *extra: str) -> list:
    services = ["HAproxy", "MySQL", "RabbitMQ", "Memcached", "Keystone", "Placement", *extra]
    text = "- name: Controller\n  CountDefault: 1\n  ServicesDefault:\n" + "".join(
        f"    - OS::TripleO::Services::{s}\n" for s in services)
    return load_roles(write(tmp_path, "roles_data.yaml", text))


def test_a_service_of_your_own_is_wired_by_its_declarations_alone(tmp_path):
    write(tmp_path, "foo.yaml", FOO)
    env = write(tmp_path, "env.yaml", "resource_registry:\n  OS::TripleO::Services::Foo: foo.yaml\n")
    roles = roles_with(tmp_path, "Foo")
    lib = op.resolve(roles, [env])
    assert lib.images()["ContainerFooImage"] == "service-foo"
    assert lib.secrets()["FooDbPassword"] == "password"
    assert lib.services_at("Controller", 4) == ["placement", "foo_api"]
    images = {k: f"localhost/undercloud/{v}:1" for k, v in lib.images().items()}
    secrets = missing_secrets({}, lib.secrets())
    plan = op.render(tmp_path / "home", "overcloud", roles, lib, images, "container", None, [env], secrets)
    assert secrets["FooPassword"] and secrets["FooDbPassword"] != secrets["FooPassword"]
    rendered = yaml.safe_load(plan.template.read_text())
    assert rendered["parameters"]["FooDbPassword"]["hidden"] is True
    assert "widget" in rendered["resources"]["EndpointMap"]["properties"]["value"]
    assert "foo_api" in rendered["resources"]["ServiceNodes"]["properties"]["value"]
    # The whole plan validates with the new service in it (the engine's own loader).
    tmpl = load(Bundle.from_paths(str(plan.template), env_paths=[str(e) for e in plan.environments]),
                {k: secrets[k] for k in plan.secret_names}, stack_name="overcloud", partial=True)
    assert tmpl.resources["ControllerFoo"].type == "OS::TripleO::Services::Foo"
    # ServiceData names the secrets (get_param); their values are in secrets.yaml only.
    assert {"name": "foo", "user": "foo", "password": {"get_param": "FooDbPassword"}} in \
        rendered["resources"]["ServiceData"]["properties"]["value"]["databases"]
    assert [d["name"] for d in rendered["resources"]["ServiceData"]["properties"]["value"]["databases"]] == \
        ["foo", "keystone", "placement"]
    frontends = rendered["resources"]["ServiceData"]["properties"]["value"]["haproxy"]
    # Its endpoint's frontend is served over TLS too, on 13000 + its port's last three digits.
    assert {"name": "foo_api", "port": 9999, "backend_port": 19999, "mode": "http", "check": "GET /",
            "check_port": 19999, "backup": False, "public_port": 13999,
            "servers": {"get_attr": ["ServiceNodes", "value", "foo_api"]}} in frontends
    assert next(f for f in frontends if f["name"] == "mysql")["public_port"] == 0  # tcp, no endpoint: none
    widget = rendered["resources"]["PublicEndpointMap"]["properties"]["value"]["widget"]["if"]
    assert widget[0] == "public_tls" and widget[1]["str_replace"]["template"] == "https://VIP:13999/v1"
    for f in plan.dir.rglob("*"):
        if f.is_file() and f.name != "secrets.yaml":
            assert secrets["FooDbPassword"] not in f.read_text(), f


def test_disabled_services_declare_nothing(tmp_path):
    env = write(tmp_path, "off.yaml", "resource_registry:\n  OS::TripleO::Services::Placement: OS::Heat::None\n"
                "  OS::TripleO::Services::RabbitMQ: OS::Heat::None\n")
    roles = roles_with(tmp_path)
    lib = op.resolve(roles, [env])
    assert "placement" not in lib.service_names()
    assert "ContainerPlacementImage" not in lib.images() and "PlacementPassword" not in lib.secrets()
    assert lib.services_at("Controller", 4) == []
    # Yet every service's name is a key of ServiceNodes (a list, maybe empty): a template
    # asking for [ServiceNodes, rabbitmq] (nova's transport URL) gets [], never null.
    plan = op.render(tmp_path / "home", "overcloud", roles, lib, {k: "x:1" for k in lib.images()}, "container",
                     None, [env], missing_secrets({}, lib.secrets()))
    nodes = yaml.safe_load(plan.template.read_text())["resources"]["ServiceNodes"]["properties"]["value"]
    assert {"rabbitmq", "placement", "nova_compute", "neutron_dhcp"} <= set(nodes)
    assert nodes["rabbitmq"] == {"list_concat": [[]]}


def test_two_services_cannot_claim_one_port_or_endpoint(tmp_path):
    write(tmp_path, "foo.yaml", FOO.replace("port: 9999, backend_port", "port: 5000, backend_port"))
    env = write(tmp_path, "env.yaml", "resource_registry:\n  OS::TripleO::Services::Foo: foo.yaml\n")
    with pytest.raises(TemplateError, match=r"foo.yaml: outputs.role_data.value: haproxy port 5000 is also declared "
                                            r"by .*keystone.yaml"):
        op.resolve(roles_with(tmp_path, "Foo"), [env])
    write(tmp_path, "foo.yaml", FOO.replace("endpoint: widget}]", "endpoint: gadget}]"))
    with pytest.raises(TemplateError, match="no enabled service declares the endpoint 'gadget'"):
        op.resolve(roles_with(tmp_path, "Foo"), [env])
    # Its endpoint's public TLS port (13000 + the last three digits) taken by keystone's (5000).
    write(tmp_path, "foo.yaml", FOO.replace("{widget: {port: 9999", "{widget: {port: 8000")
          .replace("port: 9999, backend_port", "port: 8000, backend_port"))
    with pytest.raises(TemplateError, match=r"foo.yaml: outputs.role_data.value: public TLS port 13000 \(endpoint "
                                            r"widget\) is also declared by .*keystone.yaml"):
        op.resolve(roles_with(tmp_path, "Foo"), [env])


def test_a_library_template_is_registered_by_its_own_service_type(tmp_path):
    (tmp_path / "services").mkdir()
    write(tmp_path / "services", "foo.yaml", FOO)
    assert library.builtin_registry(tmp_path) == {"OS::TripleO::Services::Foo": tmp_path / "services" / "foo.yaml"}
    write(tmp_path / "services", "bar.yaml", FOO)
    with pytest.raises(TemplateError, match="foo.yaml: .*OS::TripleO::Services::Foo is also declared by bar.yaml"):
        library.builtin_registry(tmp_path)


INIT_SQL = Path(library.LIBRARY).parent / "images/elements/mariadb/static/usr/local/bin/uc-mariadb-init-sql"


def test_mariadb_init_sql_is_idempotent_and_quotes_passwords(tmp_path):
    dbs = write(tmp_path, "dbs.json", json.dumps([{"name": "nova_api", "user": "nova", "password": "a'b\\c"}]))
    out = subprocess.run([sys.executable, str(INIT_SQL), str(dbs)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "CREATE DATABASE IF NOT EXISTS `nova_api`;",
        "CREATE USER IF NOT EXISTS 'nova'@'%' IDENTIFIED BY 'a\\'b\\\\c';",
        "ALTER USER 'nova'@'%' IDENTIFIED BY 'a\\'b\\\\c';",
        "GRANT ALL PRIVILEGES ON `nova_api`.* TO 'nova'@'%';"]
    bad = write(tmp_path, "bad.json", json.dumps([{"name": "x`; DROP", "user": "u", "password": "secret-pw"}]))
    out = subprocess.run([sys.executable, str(INIT_SQL), str(bad)], capture_output=True, text=True)
    assert out.returncode == 1 and "databases[0].name: expected a lower-case identifier" in out.stderr
    assert "secret-pw" not in out.stderr


def test_health_is_declared_once_as_the_pods_readiness_probe(tmp_path):
    """No library template repeats its probe as a health_check or a frontend's check: both
    come from the Pod's readiness probe. A frontend checks the probe's path when its check
    port is the probe's (MariaDB: check_port 9200, its clustercheck), and a template whose
    Pod is computed still declares its own."""
    registry = library.builtin_registry()
    for p in registry.values():
        rd = yaml.safe_load(p.read_text())["outputs"]["role_data"]["value"]
        assert "health_check" not in rd and all("check" not in f for f in rd.get("haproxy", [])), p.name
    keystone = library.read_service("OS::TripleO::Services::Keystone", registry["OS::TripleO::Services::Keystone"])
    assert keystone.health_check == "HTTP GET :15000/v3"
    assert [(f["backend_port"], f["check"]) for f in keystone.haproxy] == [(15000, "GET /v3")]
    mysql = library.read_service("OS::TripleO::Services::MySQL", registry["OS::TripleO::Services::MySQL"])
    assert [(f["mode"], f["check_port"], f["check"]) for f in mysql.haproxy] == [("tcp", 9200, "GET /")]
    memcached = library.read_service("OS::TripleO::Services::Memcached", registry["OS::TripleO::Services::Memcached"])
    assert memcached.health_check == "TCP :11211" and memcached.haproxy == []
    # A template whose Pod gives no probe (or the stack computes it) declares its own: kept as given.
    own = tmp_path / "foo.yaml"
    own.write_text(FOO.replace("backend_port: 19999, check: GET /}", "backend_port: 19999}"))
    foo = library.read_service("OS::TripleO::Services::Foo", own)
    assert foo.readiness is None and foo.health_check == "HTTP GET :19999/" and "check" not in foo.haproxy[0]


def test_ports_are_declared_once_the_probe_gives_the_backend_and_the_frontend_the_endpoint():
    """A library template writes its backend port in its service's configuration and its
    probe, its frontend port in haproxy's entry: the frontend's backend_port is the probe's,
    the endpoint's port the one frontend's, unless given (MariaDB's backend is not its probe's)."""
    registry = library.builtin_registry()
    services = {t: library.read_service(t, p) for t, p in registry.items()}
    for t, p in registry.items():
        rd = yaml.safe_load(p.read_text())["outputs"]["role_data"]["value"]
        assert all("port" not in e for e in rd.get("endpoints", {}).values()), p.name
        for f in services[t].haproxy:
            probe = services[t].readiness["httpGet"]
            assert f["backend_port"] == probe["port"] or t == "OS::TripleO::Services::MySQL", p.name
    glance = services["OS::TripleO::Services::GlanceApi"]
    assert glance.endpoints == {"image": {"port": 9292, "path": ""}}
    assert [(f["port"], f["backend_port"], f["check"]) for f in glance.haproxy] == [(9292, 19292, "GET /healthcheck")]
    mysql = services["OS::TripleO::Services::MySQL"]
    assert [(f["port"], f["backend_port"], f["check_port"]) for f in mysql.haproxy] == [(3306, 13306, 9200)]
