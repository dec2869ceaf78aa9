"""The overcloud plan: roles_data.yaml checks, rendering, validation, secrets, deploy's bad input."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli
from undercloud.errors import InvalidInput
from undercloud.images.catalog import DEFAULT_RELEASE
from undercloud.orchestration.template import Bundle, TemplateError, load
from undercloud.overcloud import clouds, library
from undercloud.overcloud import plan as op
from undercloud.overcloud import roles as oroles
from undercloud.overcloud import secrets as osecrets


class oc:  # noqa: N801 - the package's functions under one short name, as the tests read them
    load_roles, roles_file_for, STEPS = oroles.load_roles, oroles.roles_file_for, library.STEPS
    clouds_yaml, digest = clouds.clouds_yaml, op.digest


def made_secrets(lib: op.Library, envs=()) -> dict:
    """What the kept state gives a first deploy: a new value for each secret, yours first."""
    kinds = lib.secrets()
    return {**osecrets.missing_secrets({}, kinds), **osecrets.secrets_given(list(envs), set(kinds))}


def images_for(lib: op.Library) -> dict:
    return {k: f"localhost/undercloud/{v}:0123456789abcdef" for k, v in lib.images().items()}


def roles_file(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "roles_data.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, where, message", [
    ("- name: controller\n  ServicesDefault: [OS::TripleO::Services::HAproxy]\n", ":1: 0.name:", "CamelCase"),
    ("- name: Controller\n  CountDefault: -1\n", ":2: 0.CountDefault:", ">= 0"),
    ("- name: Controller\n  ServicesDefault:\n    - OS::TripleO::Services::HAproxy\n    - Keystone\n",
     ":4: 0.ServicesDefault.1:", "OS::TripleO::Services::NAME"),
    ("- name: Controller\n  HostnameFormatDefault: ctl\n", ":2: 0.HostnameFormatDefault:", "%index%"),
    ("- name: Controller\n  ServicesDefault: [OS::TripleO::Services::HAproxy]\n- name: Controller\n",
     ":3: 1.name:", "defined twice"),
    ("- name: Controller\n  Colour: blue\n", ":2: 0.Colour:", "unknown role key"),
    ("name: Controller\n", "roles:", "list of roles"),
    ("- name: [\n", ":2:", "invalid YAML"),
])
def test_bad_roles_are_one_line_with_file_and_line(tmp_path, text, where, message):
    path = roles_file(tmp_path, text)
    with pytest.raises(TemplateError) as exc:
        oc.load_roles(path)
    assert len(exc.value.problems) == 1
    line = exc.value.problems[0]
    assert line.startswith(str(path)) and where in line and message in line, line


def test_shipped_roles():
    default = oc.load_roles(oc.roles_file_for("minimal", None))
    assert [(r.name, r.count) for r in default] == [("Controller", 1), ("Compute", 1)]
    lib = op.resolve(default, [])
    assert lib.service_names("Controller")[:6] == ["haproxy", "mysql", "rabbitmq", "memcached", "keystone",
                                                   "placement"]
    ha = oc.load_roles(oc.roles_file_for("ha", None))
    assert [(r.name, r.count) for r in ha] == [("Controller", 3), ("Compute", 1)]
    ha_lib = op.resolve(ha, op.environments_for("ha", []))
    agent = {"zed": "neutron_linuxbridge_agent", "2025.1": "neutron_ovs_agent"}
    assert ha_lib.service_names("Compute") == ["nova_libvirt", "nova_compute", agent[DEFAULT_RELEASE]]
    for release in agent:
        lib = op.resolve(ha, op.environments_for("ha", [], release))
        assert lib.service_names("Compute") == ["nova_libvirt", "nova_compute", agent[release]]
    assert "nova_compute" not in ha_lib.service_names("Controller")
    with pytest.raises(InvalidInput, match="unknown example"):
        oc.roles_file_for("huge", None)


def plan_for(tmp_path: Path, example: str, envs: list[Path] = (), secrets: dict | None = None):  # noqa: B006
    roles = oc.load_roles(oc.roles_file_for(example, None))
    lib = op.resolve(roles, op.environments_for(example, list(envs)))
    return op.render(tmp_path / "home", "overcloud", roles, lib, images_for(lib), "container", example, list(envs),
                     made_secrets(lib, envs) if secrets is None else secrets)


def loaded(plan, parameters=None):
    bundle = Bundle.from_paths(str(plan.template), env_paths=[str(e) for e in plan.environments])
    return load(bundle, parameters or {}, stack_name="overcloud", partial=True)


@pytest.mark.parametrize("example, roles, nodes", [("minimal", ["Controller", "Compute"], 2),
                                                    ("ha", ["Controller", "Compute"], 4)])
def test_rendered_plan_validates_with_steps_in_order(tmp_path, example, roles, nodes):
    plan = plan_for(tmp_path, example)
    tmpl = loaded(plan)
    res = tmpl.resources
    for r in roles:
        assert res[f"{r}Servers"].type == "OS::Heat::ResourceGroup"
        for step in oc.STEPS:
            assert res[f"{r}Deployment_Step{step}"].type == "OS::Heat::SoftwareDeploymentGroup"
    deps = tmpl.dependencies()
    # A step waits for the previous step of every role.
    for r in roles:
        for step in oc.STEPS[1:]:
            assert {f"{x}Deployment_Step{step - 1}" for x in roles} <= deps[f"{r}Deployment_Step{step}"]
    counts = {r: tmpl.parameters[f"{r}Count"].value for r in roles}
    assert sum(counts.values()) == nodes
    # Every service is mapped to its template; each template states its step.
    assert plan.services_at(oc.load_roles(oc.roles_file_for(example, None))[0], 3) == ["keystone"]


def test_nodes_as_servers_of_a_cloud_name_its_flavor_and_network(tmp_path):
    """--hypervisor openstack:<cloud>: each role's servers get `openstack:<cloud>/<flavor>`
    (Overcloud<Role>Flavor, a flavor of that cloud) and the network OvercloudNetwork."""
    roles = oc.load_roles(oc.roles_file_for("minimal", None))
    lib = op.resolve(roles, op.environments_for("minimal", []))
    plan = op.render(tmp_path / "home", "overcloud", roles, lib, images_for(lib), "openstack:my.cloud", "minimal", [],
                     made_secrets(lib))
    tmpl = loaded(plan, {"OvercloudNetwork": "lab"})
    assert tmpl.parameters["OvercloudControllerFlavor"].value == "m1.small"
    node = yaml.safe_load(plan.template.read_text())["resources"]["ControllerServers"]["properties"]["resource_def"]
    assert node["properties"]["flavor"] == {"list_join": ["", ["openstack:my.cloud/",
                                                               {"get_param": "OvercloudControllerFlavor"}]]}
    assert node["properties"]["networks"] == [{"network": {"get_param": "OvercloudNetwork"}}]
    local = yaml.safe_load(plan_for(tmp_path, "minimal").template.read_text())
    assert "networks" not in local["resources"]["ControllerServers"]["properties"]["resource_def"]["properties"]
    assert "OvercloudNetwork" not in local["parameters"]
    assert (op.node_cloud("openstack:my.cloud"), op.node_kind("openstack:my.cloud")) == ("my.cloud", "vm")
    assert (op.node_cloud("container"), op.node_kind("baremetal")) == (None, "baremetal")
    with pytest.raises(InvalidInput, match="unknown hypervisor type 'xen'"):
        op.render(tmp_path / "home", "overcloud", roles, lib, images_for(lib), "xen", "minimal", [], made_secrets(lib))


def test_disabling_a_service_with_os_heat_none(tmp_path):
    env = tmp_path / "no-rabbit.yaml"
    env.write_text("resource_registry:\n  OS::TripleO::Services::RabbitMQ: OS::Heat::None\n")
    plan = plan_for(tmp_path, "minimal", [env])
    tmpl = loaded(plan)
    assert tmpl.resources["ControllerRabbitMQ"].type == "OS::Heat::None"
    role = plan.roles[0]
    assert plan.services_at(role, 2) == ["mysql", "memcached"]


def test_secrets_are_private_and_hidden(tmp_path):
    roles = oc.load_roles(oc.roles_file_for("minimal", None))
    secrets = made_secrets(op.resolve(roles, op.environments_for("minimal", [])))
    first = plan_for(tmp_path, "minimal", secrets=secrets)
    assert set(secrets) == set(first.secret_names)
    assert {"AdminPassword", "KeystoneFernetKey0", "PlacementDbPassword", "RabbitPassword"} <= set(secrets)
    assert len(secrets["KeystoneFernetKey0"]) == 44 and len(secrets["AdminPassword"]) == 24
    assert len(set(secrets.values())) == len(secrets)
    assert stat.S_IMODE((first.dir / "secrets.yaml").stat().st_mode) == 0o600
    assert yaml.safe_load((first.dir / "secrets.yaml").read_text())["parameter_defaults"] == secrets
    tmpl = loaded(first, {k: secrets[k] for k in first.secret_names})
    for k in first.secret_names:
        assert tmpl.parameters[k].hidden
    rendered = first.template.read_text() + (first.dir / "deploy-parameters.yaml").read_text()
    assert not any(v in rendered for v in secrets.values())
    # Rendering again gives the same files (the no-op re-deploy depends on it).
    b1 = Bundle.from_paths(str(first.template), env_paths=[str(e) for e in first.environments]).to_json()
    again = plan_for(tmp_path, "minimal", secrets=secrets)
    b2 = Bundle.from_paths(str(again.template), env_paths=[str(e) for e in again.environments]).to_json()
    assert oc.digest(b1) == oc.digest(b2)


def test_clouds_yaml_names_the_cloud_after_the_stack():
    import yaml

    doc = yaml.safe_load(oc.clouds_yaml("oc1", "http://10.0.0.5:5000/v3", "pw"))
    cloud = doc["clouds"]["oc1"]
    assert cloud["auth"]["auth_url"] == "http://10.0.0.5:5000/v3"
    assert cloud["auth"]["username"] == "admin" and cloud["auth"]["password"] == "pw"


@pytest.mark.parametrize("args, message", [
    (["--roles", "{tmp}/nope.yaml"], "cannot read roles file"),
    (["--roles", "{tmp}/bad.yaml"], "bad.yaml:1: 0.name: a role name is a CamelCase identifier"),
    (["-e", "{tmp}/missing-env.yaml"], "environment file not found"),
    (["--stack", "9lives"], "a stack name starts with a letter"),
    (["--example", "huge"], "Invalid value for '--example'"),
    (["--hypervisor", "kvm"], "Invalid value for '--hypervisor'"),
    (["--hypervisor", "openstack:"], "Invalid value for '--hypervisor'"),
    (["--hypervisor", "openstack:nope"], "--hypervisor openstack:nope: no cloud 'nope' (clouds: none"),
])
def test_deploy_bad_input_is_one_line_and_creates_nothing(uc_home, tmp_path, args, message):
    (tmp_path / "bad.yaml").write_text("- name: ctl\n")
    r = run_cli("deploy", *[a.format(tmp=tmp_path) for a in args])
    assert r.returncode != 0
    assert message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("error") or "Error" in x]
    assert len(lines) == 1, r.stderr
    if "Invalid value" not in message:
        stacks = run_cli("stack", "list", "-f", "json")
        assert stacks.returncode == 0 and json.loads(stacks.stdout or "[]") == []


def test_no_clouds_yaml_without_an_admin_password(tmp_path):
    with pytest.raises(InvalidInput, match="overcloud oc has no admin password"):
        clouds.write_clouds_yaml(tmp_path, "oc", "http://10.0.0.5:5000/v3", {"RabbitPassword": "x"})
    assert not (tmp_path / "overcloud" / "oc" / "clouds.yaml").exists()


def without_tls(value):
    """A template's value as the stack evaluates it without internal TLS: each
    `if: [internal_tls, then, else]` (RabbitMQ's probe port) is its else."""
    if isinstance(value, dict):
        if list(value) == ["if"] and value["if"][0] == "internal_tls":
            return without_tls(value["if"][2])
        return {k: without_tls(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_tls(v) for v in value]
    return value


def test_role_services_give_each_service_its_readiness_probe_as_the_health_check(tmp_path):
    """A service's health is declared once, as its Pod's readiness probe: the rendered
    RoleServices expression (as the stack evaluates it) over the library's role_data, which
    declares no health_check, gives null there and the probe; `overcloud status` shows the
    probe's text (keystone: what its template declared before, "HTTP GET :15000/v3")."""
    from undercloud.orchestration.template.functions import Yaql
    from undercloud.overcloud import status

    plan = plan_for(tmp_path, "minimal")
    doc = yaml.safe_load(plan.template.read_text())
    expression = doc["outputs"]["RoleServices"]["value"]["Controller"]["yaql"]["expression"]
    role_data = []
    for p in library.builtin_registry().values():
        rd = yaml.safe_load(p.read_text())["outputs"]["role_data"]["value"]
        assert "health_check" not in rd, p.name
        pod = without_tls(yaml.safe_load(p.read_text())["resources"]["Pod"]["properties"]["value"])
        role_data.append({**{k: v for k, v in rd.items() if k != "pod"}, "pod": pod})
    parser, context = Yaql.engine()
    services = {s[0]: s for s in parser(expression).evaluate({"data": role_data}, context.create_child_context())}
    assert services["keystone"][2] is None
    assert status.health_check(services["keystone"]) == "HTTP GET :15000/v3"
    assert status.health_check(services["rabbitmq"]) == "TCP :5672"
    assert status.health_check(services["nova_conductor"]) == "exec /usr/local/bin/uc-nova-check nova-conductor"


def test_every_template_defaults_to_the_catalogs_release(tmp_path):
    """A stack made of the rendered templates without the deploy (`stack create`) runs the
    release a deploy would: each OvercloudRelease default is catalog.DEFAULT_RELEASE."""
    plan = plan_for(tmp_path, "minimal")
    defaults = {}
    for path in [plan.template, *sorted(library.LIBRARY.glob("services/*.yaml"))]:
        params = yaml.safe_load(path.read_text()).get("parameters") or {}
        if "OvercloudRelease" in params:
            defaults[path.name] = params["OvercloudRelease"]["default"]
    assert {"overcloud.yaml", "neutron-server.yaml"} <= set(defaults), defaults
    assert set(defaults.values()) == {DEFAULT_RELEASE}, defaults
