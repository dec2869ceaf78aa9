"""Hypervisor hosts (issue 19): the parts a node needs to become one, without the node.

Where a worker says the others reach it (`serve --listen`, UNDERCLOUD_AGENT_URL); the
`hypervisor-host` example and its UndercloudWorker service (a store URL you give, the
store key `undercloud deploy` gives, no haproxy needed); the worker image's payload; the
node's podman settings. The node itself: tests/e2e/test_hypervisor_host.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from cryptography.fernet import Fernet

from tests.conftest import run_cli
from tests.unit.test_overcloud_plan import images_for, loaded
from undercloud.agent import engine, pod_spec
from undercloud.api import context
from undercloud.api.context import Context
from undercloud.config import Home
from undercloud.errors import InvalidInput, UndercloudError
from undercloud.host.run import route_source
from undercloud.images import build, catalog, elements, payload
from undercloud.overcloud import library
from undercloud.overcloud import plan as op
from undercloud.overcloud import roles as oroles
from undercloud.overcloud import secrets as osecrets

WORKER_TEMPLATE = library.LIBRARY / "services" / "undercloud-worker.yaml"


# ---- where the others reach a worker ----------------------------------------------------
@pytest.mark.parametrize("listen, want", [("127.0.0.1", "127.0.0.1"), ("localhost", "127.0.0.1"),
                                          ("192.0.2.7", "192.0.2.7"),
                                          ("0.0.0.0", "127.0.0.1")])  # its store is on loopback here
def test_a_worker_is_reached_at_its_listen_address(tmp_path, monkeypatch, listen, want):
    monkeypatch.delenv("UNDERCLOUD_AGENT_URL", raising=False)
    ctx = Context(Home(tmp_path / "h"), f"sqlite:///{tmp_path / 'uc.db'}", listen=listen)
    port = ctx.home.api_port()
    assert ctx.api_url == f"http://{want}:{port}"  # wait-condition handles (nodes' curl has no CA)
    assert ctx.workers.url == f"https://{want}:{port}"  # what the other workers forward to, over TLS
    monkeypatch.setenv("UNDERCLOUD_AGENT_URL", "http://203.0.113.9:8990")
    assert ctx.api_url == ctx.agent_url == "http://203.0.113.9:8990"  # an operator's word wins


def test_the_route_source_is_this_hosts_address_towards_a_store():
    assert route_source(None) is None  # SQLite
    assert route_source("/var/run/postgresql") is None  # a Unix socket's directory
    assert route_source("127.0.0.1") == "127.0.0.1"  # loopback: its own address
    with pytest.raises(UndercloudError, match=r"^no route from this host to no\.such\.host\.invalid: "):
        route_source("no.such.host.invalid")


@pytest.mark.parametrize("route, want", [("10.1.2.3", "10.1.2.3"), ("127.0.1.1", "127.0.0.1"),
                                         (None, "127.0.0.1"), (UndercloudError("no route"), "127.0.0.1")])
def test_a_worker_on_every_address_is_reached_where_it_reaches_its_store(tmp_path, monkeypatch, route, want):
    # loopback, no host (SQLite, a Unix socket) or no route: no address another host reaches
    monkeypatch.delenv("UNDERCLOUD_AGENT_URL", raising=False)

    def source(host):
        if isinstance(route, Exception):
            raise route
        return route

    monkeypatch.setattr(context, "route_source", source)
    ctx = Context(Home(tmp_path / "h"), f"sqlite:///{tmp_path / 'uc.db'}", listen="0.0.0.0")
    assert ctx.api_url == f"http://{want}:{ctx.home.api_port()}"


def test_a_listener_on_a_guest_network_is_not_opened_again_when_every_address_is_served(tmp_path):
    ctx = Context(Home(tmp_path / "h"), f"sqlite:///{tmp_path / 'uc.db'}", listen="0.0.0.0")
    ctx.listeners.listen("10.200.0.1")  # would be a second socket on the API's port
    assert ctx.listeners.addresses() == []


def test_serve_refuses_what_a_worker_cannot_be_in_one_line(uc_home):
    r = run_cli("serve", "--hypervisor-only")
    assert r.returncode != 0 and "--hypervisor-only is a worker's: give --worker too" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run_cli("serve", env={"UNDERCLOUD_HYPERVISOR_TYPES": "container,xen"})
    assert r.returncode != 0 and "UNDERCLOUD_HYPERVISOR_TYPES: 'xen' is not a type a host realises" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (uc_home.path / "service.pid").exists()  # nothing started


# ---- the hypervisor-host example ----------------------------------------------------------
@pytest.fixture
def store_key(tmp_path, monkeypatch) -> str:
    key = Fernet.generate_key().decode()
    path = tmp_path / "store.key"
    path.write_text(key + "\n")
    monkeypatch.setenv("UNDERCLOUD_STORE_KEY", str(path))
    return key


def hv_plan(tmp_path: Path, envs: list[Path]):
    roles = oroles.load_roles(oroles.roles_file_for("hypervisor-host", None))
    lib = op.resolve(roles, op.environments_for("hypervisor-host", envs))
    op.check_required(lib, op.environments_for("hypervisor-host", envs))
    secrets = osecrets.missing_secrets({}, lib.secrets())
    return lib, secrets, op.render(tmp_path / "home", "hosts", roles, lib, images_for(lib), "vm", "hypervisor-host",
                                   envs, secrets)


def test_the_example_needs_your_store_url_and_says_so_before_anything_is_built(tmp_path, store_key):
    with pytest.raises(InvalidInput) as e:
        hv_plan(tmp_path, [])
    assert e.value.message.startswith("UndercloudWorker (role HypervisorHost) needs parameter UndercloudStoreUrl: "
                                      "The undercloud's PostgreSQL store as this role's nodes reach it")
    assert e.value.message.endswith("set it in an environment's parameter_defaults")
    r = run_cli("deploy", "--example", "hypervisor-host", "--stack", "hosts", "--hypervisor", "vm",
                env={"UNDERCLOUD_HOME": str(tmp_path / "cli-home")})
    assert r.returncode != 0 and "needs parameter UndercloudStoreUrl" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "cli-home").exists()  # refused before the service was even started


def test_the_example_renders_without_haproxy_and_gets_the_store_key(tmp_path, store_key):
    env = tmp_path / "store.yaml"
    url = "postgresql://undercloud:s3cret-pw@192.0.2.254:5432/undercloud"
    env.write_text(yaml.safe_dump({"parameter_defaults": {"UndercloudStoreUrl": url}}))
    lib, secrets, plan = hv_plan(tmp_path, [env])
    assert lib.service_names("HypervisorHost") == ["undercloud_worker"]
    assert lib.images() == {"ContainerUndercloudWorkerImage": "service-undercloud-worker"}
    assert lib.secrets() == {"UndercloudStoreKey": "store-key"} and secrets["UndercloudStoreKey"] == store_key
    tmpl = loaded(plan, {"UndercloudStoreKey": store_key})
    assert {"HypervisorHostServers", "HypervisorHostUndercloudWorker", "HypervisorHostDeployment_Step1"} <= set(
        tmpl.resources)
    assert not any("HAproxy" in r for r in tmpl.resources)
    assert tmpl.parameters["UndercloudStoreKey"].hidden  # masked in every property, attribute and message
    kept = yaml.safe_load((plan.dir / "secrets.yaml").read_text())["parameter_defaults"]
    assert kept == {"UndercloudStoreKey": store_key} and (plan.dir / "secrets.yaml").stat().st_mode & 0o077 == 0
    assert url not in "".join(p.read_text() for p in plan.dir.rglob("*.yaml"))  # yours stays in your file


def test_a_hypervisor_host_on_container_nodes_is_refused_naming_the_role(tmp_path, store_key):
    roles = oroles.load_roles(oroles.roles_file_for("hypervisor-host", None))
    lib = op.resolve(roles, op.environments_for("hypervisor-host", []))
    types = {"container": "container", "vm-control": "vm", "baremetal": "baremetal", "big-vm": "vm"}.get
    (line,) = op.container_roles(lib, roles, [], "container", types)
    assert line.startswith("role HypervisorHost (flavor container: container nodes) runs undercloud_worker: "
                           "a hypervisor host's worker drives its node's own podman")
    assert op.container_roles(lib, roles, [], "vm", types) == []
    assert op.container_roles(lib, roles, [], "openstack:cloud", types) == []
    flavor = tmp_path / "flavor.yaml"
    flavor.write_text("parameter_defaults: {OvercloudHypervisorHostFlavor: big-vm}\n")
    assert op.container_roles(lib, roles, [flavor], "container", types) == []  # your flavor: a VM


def test_services_in_front_of_nobody_need_no_haproxy_but_api_services_do(tmp_path):
    roles = oroles.load_roles(oroles.roles_file_for("minimal", None))
    off = tmp_path / "no-haproxy.yaml"
    off.write_text("resource_registry: {OS::TripleO::Services::HAproxy: OS::Heat::None}\n")
    lib = op.resolve(roles, [off])
    with pytest.raises(InvalidInput, match=r"no role runs OS::TripleO::Services::HAproxy .*the API services need "
                                           r"it in front \(glance_api, keystone, mysql, \.\.\.\)"):
        op.render(tmp_path / "home", "overcloud", roles, lib, images_for(lib), "container", None, [off],
                  osecrets.missing_secrets({}, lib.secrets()))


def test_a_role_without_services_renders_an_empty_chain_and_five_empty_steps(tmp_path):
    """A role of servers alone (what the e2e pins to a hypervisor host): its chain is [], not
    null (yaql's `where` over null failed the stack at its first step)."""
    path = tmp_path / "roles.yaml"
    path.write_text("- name: Remote\n  HostnameFormatDefault: '%stackname%-remote-%index%'\n  ServicesDefault: []\n")
    roles = oroles.load_roles(path)
    lib = op.resolve(roles, [])
    plan = op.render(tmp_path / "home", "remote", roles, lib, {}, "container", None, [], {})
    doc = yaml.safe_load(plan.template.read_text())
    assert doc["resources"]["RemoteServiceChain"]["properties"]["value"]["yaql"]["data"] == []
    tmpl = loaded(plan)
    assert {f"RemoteDeployment_Step{n}" for n in library.STEPS} <= set(tmpl.resources)


def test_the_store_key_kind_reads_the_undercloud_key_and_a_missing_one_is_one_line(tmp_path, store_key, monkeypatch):
    assert osecrets.missing_secrets({}, {"K": "store-key"}) == {"K": store_key}
    monkeypatch.setenv("UNDERCLOUD_STORE_KEY", str(tmp_path / "nowhere.key"))
    with pytest.raises(InvalidInput, match="cannot read the undercloud's store key .*No such file") as e:
        osecrets.missing_secrets({}, {"K": "store-key"})
    assert e.value.where == str(tmp_path / "nowhere.key")


def test_the_worker_service_declares_what_the_plan_and_the_node_need():
    svc = library.read_service("OS::TripleO::Services::UndercloudWorker", WORKER_TEMPLATE)
    assert (svc.name, svc.step, svc.health_check) == ("undercloud_worker", 1, "HTTP GET :8990/v1/health")
    assert svc.secrets == {"UndercloudStoreKey": "store-key"}
    assert set(svc.required) == {"UndercloudStoreUrl"}
    doc = yaml.safe_load(WORKER_TEMPLATE.read_text())
    assert doc["parameters"]["UndercloudStoreUrl"]["hidden"] is True  # it may hold the database password
    pod = doc["resources"]["Pod"]["properties"]["value"]
    pod_spec.validate(pod)
    (container,) = pod["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"] == {"port": 8990, "path": "/v1/health"}
    assert doc["resources"]["ConfigFiles"]["properties"]["value"]["port"] == "8990"
    # the node's podman mounts servers' files from the worker's home: the same path on both sides
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    for name in ("home", "podman-api", "networks"):
        assert volumes[name]["hostPath"]["path"] == mounts[name]


# ---- the worker image ---------------------------------------------------------------------
def test_the_worker_image_is_a_service_image_keyed_by_the_undercloud_it_carries(tmp_path, monkeypatch):
    (target,) = catalog.targets("service-undercloud-worker")
    assert target.layer_on == catalog.SERVICE_BASE and target.elements[0] == "undercloud-worker"
    assert "service-undercloud-worker" in library.library_images()  # `image build --all` builds it
    reqs = payload.requirements()
    assert not any("extra" in r for r in reqs)  # not the test or lab extras
    assert any(r.startswith("psycopg") for r in reqs) and any(r.startswith("fastapi") for r in reqs)
    before = build.Builder(target, lambda _m: None, tmp_path / "logs", False).keys["service"]
    copy = tmp_path / "undercloud"
    shutil.copytree(payload.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(payload, "PACKAGE", copy)
    assert build.Builder(target, lambda _m: None, tmp_path / "logs", False).keys["service"] == before
    (copy / "daemon.py").write_text((copy / "daemon.py").read_text() + "\n# changed\n")
    after = build.Builder(target, lambda _m: None, tmp_path / "logs", False)
    assert after.keys["service"] != before  # a code change makes a new worker image...
    # ...over the same shared layers as a service image of this host's Debian (zed's: bookworm)
    other = build.Builder(catalog.targets("service-memcached", release="zed")[0], lambda _m: None, tmp_path / "logs",
                          False)
    assert other.keys["image"] == after.keys["image"]


def test_the_nodes_podman_api_has_the_settings_of_the_agents_podman():
    element = elements.load("container-host", [elements.SHIPPED], "test")
    conf = (element.path / "static" / "etc" / "containers" / "containers.conf").read_text()
    settings = [line for line in conf.splitlines() if line and not line.startswith("#")]
    assert settings == engine.CONTAINERS_CONF.strip().splitlines()
    assert any(s.name == "50-podman-socket" for s in element.scripts("install.d"))
