"""The compute node's services: what nova-libvirt.yaml and nova-compute.yaml render
(configs, Pods, declarations) and nova_compute's readiness probe (uc-nova-compute-ready)
against a stand-in Keystone + Compute API on a local port."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from tests.unit import service_support
from tests.unit.service_support import SERVICES, ini
from undercloud.images import elements

BIN = elements.SHIPPED / "nova-compute" / "static" / "usr" / "local" / "bin"
NODES = {"rabbitmq": ["10.0.0.2", "10.0.0.3"], "mysql": ["10.0.0.2"], "nova_compute": ["10.0.0.9"]}
ENDPOINTS = {"keystone": "http://10.0.0.250:5000/v3", "network": "http://10.0.0.250:9696"}
SECRETS = {"NovaPassword": "nova-secret", "NeutronPassword": "neutron-secret", "RabbitPassword": "rabbit-secret"}


def render(name: str) -> tuple[dict, dict, dict]:
    """(config files, Pod, role_data declarations) of a service template with test values."""
    return service_support.render(name, {"ServiceNodes": NODES, "EndpointMap": ENDPOINTS, **SECRETS},
                                  "localhost/undercloud/service-nova-compute:1")


def mounts(pod: dict) -> dict:
    """mount path -> volume, for the Pod's only container."""
    (c,) = pod["spec"]["containers"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    return {m["mountPath"]: volumes[m["name"]] for m in c["volumeMounts"]}


def test_nova_compute_config():
    files, pod, rd = render("nova-compute")
    conf = ini(files["nova.conf"])
    assert conf["DEFAULT"]["transport_url"] == \
        "rabbit://openstack:rabbit-secret@10.0.0.2:5672,openstack:rabbit-secret@10.0.0.3:5672/"
    assert conf["DEFAULT"]["compute_driver"] == "libvirt.LibvirtDriver"
    assert "host" not in conf["DEFAULT"]  # the node's hostname: the container shares its UTS namespace
    assert (conf["libvirt"]["virt_type"], conf["libvirt"]["cpu_mode"]) == ("qemu", "none")
    assert conf["vnc"]["enabled"] == "false"
    # console log: a TCP serial port on loopback only, logged to console.log by virtlogd
    assert (conf["serial_console"]["enabled"], conf["serial_console"]["proxyclient_address"]) == ("true", "127.0.0.1")
    assert (conf["placement"]["username"], conf["placement"]["password"]) == ("nova", "nova-secret")
    assert (conf["neutron"]["username"], conf["neutron"]["password"]) == ("neutron", "neutron-secret")
    assert conf["neutron"]["endpoint_override"] == ENDPOINTS["network"]
    assert conf["glance"]["valid_interfaces"] == "internal"
    # No database credentials on a compute node: the bootstrap scheduler maps hosts to cells.
    assert not {"database", "api_database"} & set(conf.sections())
    cfg = json.loads(files["config.json"])
    assert cfg["command"] == ["/usr/local/bin/uc-nova-compute-start"]
    assert cfg["config_files"][0]["owner"] == "nova:nova" and cfg["config_files"][0]["perm"] == "0640"


def test_the_two_pods_share_the_libvirt_socket_and_instances_per_node_and_nothing_else():
    _, compute, _ = render("nova-compute")
    _, libvirt, _ = render("nova-libvirt")
    for pod in (compute, libvirt):
        assert pod["spec"]["hostNetwork"] is True  # the node's namespace (taps) and hostname
    shared = {"/run/libvirt": "nova-libvirt-run", "/var/lib/nova/instances": "nova-instances"}
    # nova-compute's own: its state_path, where it keeps its node's identity (compute_id)
    for pod, own in ((compute, {"/var/lib/nova/state": "nova-compute-state"}), (libvirt, {})):
        got = {path: v["persistentVolumeClaim"]["claimName"] for path, v in mounts(pod).items()
               if "persistentVolumeClaim" in v}
        assert got == {**shared, **own}
    conf = service_support.ini(render("nova-compute")[0]["nova.conf"])["DEFAULT"]
    assert conf["state_path"] == "/var/lib/nova/state" and conf["instances_path"] == "/var/lib/nova/instances"
    # libvirt: unprivileged but NET_ADMIN and the tun device (taps); nova-compute: privileged
    # (privsep's capabilities, os-vif's /proc/sys/net writes).
    (lv,), (nc,) = libvirt["spec"]["containers"], compute["spec"]["containers"]
    assert lv["securityContext"] == {"capabilities": {"add": ["NET_ADMIN"]}}
    assert mounts(libvirt)["/dev/net/tun"] == {"name": "tun", "hostPath": {"path": "/dev/net/tun", "type": "CharDevice"}}
    assert nc["securityContext"] == {"privileged": True}
    assert lv["readinessProbe"]["exec"]["command"][0] == "virsh"
    assert nc["readinessProbe"]["exec"]["command"] == ["/usr/local/bin/uc-nova-compute-ready"]
    assert nc["readinessProbe"]["periodSeconds"] == 5 and nc["readinessProbe"]["timeoutSeconds"] >= 10


def test_libvirt_config_suits_a_container():
    files, _, _ = render("nova-libvirt")
    qemu = dict(line.split(" = ", 1) for line in files["qemu.conf"].splitlines() if " = " in line and
                not line.startswith("#"))
    assert qemu == {"user": '"root"', "group": '"root"', "security_driver": '"none"', "dynamic_ownership": "0",
                    "remember_owner": "0", "cgroup_controllers": "[ ]"}
    assert 'auth_unix_rw = "none"' in files["libvirtd.conf"] and 'unix_sock_rw_perms = "0770"' in files["libvirtd.conf"]
    assert "listen_tcp" not in files["libvirtd.conf"]  # sockets only


@pytest.mark.parametrize("name, service_type, service_name, secrets", [
    ("nova-libvirt", "OS::TripleO::Services::NovaLibvirt", "nova_libvirt", {}),
    ("nova-compute", "OS::TripleO::Services::NovaCompute", "nova_compute",
     {"NovaPassword": "password", "NeutronPassword": "password", "RabbitPassword": "password"}),
])
def test_declarations(name, service_type, service_name, secrets):
    _, _, rd = render(name)
    params = yaml.safe_load((SERVICES / f"{name}.yaml").read_text())["parameters"]
    assert (rd["service_type"], rd["service_name"], rd["step"]) == (service_type, service_name, 5)
    assert rd["secrets"] if secrets else not rd.get("secrets")
    assert (rd.get("secrets") or {}) == secrets
    assert {p for p, spec in params.items() if spec.get("hidden")} == set(secrets)
    assert set(rd["images"].values()) == {"service-nova-compute"} and all(p in params for p in rd["images"])


# ---- uc-nova-compute-ready ---------------------------------------------------------------

class FakeCloud:
    """Keystone (discovery + password tokens) and the Compute API's hypervisor list."""

    def __init__(self):
        self.hypervisors: list = []
        self.services: list = []
        self.calls: list = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, status, body, headers=()):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                fake.calls.append(("GET", self.path))
                if self.path.rstrip("/") == "/v3":
                    return self.reply(200, {"version": {"id": "v3.14", "status": "stable", "links": [
                        {"rel": "self", "href": f"{fake.url}/v3/"}]}})
                if self.path.startswith("/compute/v2.1/os-hypervisors/detail"):
                    return self.reply(200, {"hypervisors": fake.hypervisors})
                if self.path.startswith("/compute/v2.1/os-services?binary=nova-compute&host="):
                    host = self.path.rsplit("=", 1)[1]
                    return self.reply(200, {"services": [x for x in fake.services if x["host"] == host]})
                return self.reply(404, {})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.calls.append(("POST", self.path, body["auth"]["identity"]["password"]["user"]["name"]))
                catalog = [{"type": "compute", "name": "nova", "id": "c", "endpoints": [
                    {"id": "e", "interface": "internal", "region": "RegionOne", "region_id": "RegionOne",
                     "url": f"{fake.url}/compute/v2.1"}]}]
                token = {"methods": ["password"], "expires_at": "2099-01-01T00:00:00.000000Z", "catalog": catalog,
                         "user": {"id": "u", "name": "nova", "domain": {"id": "default", "name": "Default"}},
                         "project": {"id": "p", "name": "service", "domain": {"id": "default", "name": "Default"}},
                         "roles": [{"id": "r", "name": "admin"}], "issued_at": "2026-01-01T00:00:00.000000Z"}
                self.reply(201, {"token": token}, [("X-Subject-Token", "tok")])

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def cloud(tmp_path):
    pytest.importorskip("keystoneauth1")
    fake = FakeCloud()
    conf = tmp_path / "nova.conf"
    conf.write_text(f"[DEFAULT]\nhost = novacompute-0\n[placement]\nauth_url = {fake.url}/v3\nauth_type = password\n"
                    "project_domain_name = Default\nuser_domain_name = Default\nproject_name = service\n"
                    "username = nova\npassword = s3cret-pw\nregion_name = RegionOne\n")
    yield fake, conf
    fake.server.shutdown()
    fake.server.server_close()


def ready(conf: Path, started: Path | None = None) -> subprocess.CompletedProcess:
    """The probe; `started` defaults to a start time long before the fake reports."""
    if started is None:
        started = conf.parent / "started-long-ago"
        started.write_text("1000000000\n")
    return subprocess.run([sys.executable, str(BIN / "uc-nova-compute-ready"), str(conf), str(started)],
                          capture_output=True, text=True, timeout=60)


def hyp(host: str, state: str) -> dict:
    return {"id": "h", "hypervisor_hostname": host, "state": state, "status": "enabled",
            "service": {"id": "s", "host": host, "disabled_reason": None}}


def svc(host: str, updated_at: str | None) -> dict:
    return {"id": "s", "binary": "nova-compute", "host": host, "zone": "nova", "status": "enabled",
            "state": "up", "updated_at": updated_at, "disabled_reason": None, "forced_down": False}


def test_ready_only_when_this_hosts_hypervisor_is_listed_and_up(cloud):
    fake, conf = cloud
    fake.services = [svc("novacompute-0", "2026-11-25T14:02:06.000000")]
    fake.hypervisors = [hyp("novacompute-1", "up")]  # another host's: not ours (ours is not mapped yet)
    r = ready(conf)
    assert r.returncode == 1
    assert r.stderr.strip() == ("uc-nova-compute-ready: no hypervisor of host novacompute-0 in the Compute API yet "
                                "(not mapped to a cell yet?)")
    fake.hypervisors.append(hyp("novacompute-0", "down"))
    r = ready(conf)
    assert (r.returncode, r.stderr.strip()) == (1, "uc-nova-compute-ready: the hypervisor novacompute-0 of host "
                                                   "novacompute-0 is down")
    fake.hypervisors[-1]["state"] = "up"
    r = ready(conf)
    assert r.returncode == 0, r.stderr
    # It asked as the nova user of [placement], through the catalog's internal compute endpoint.
    assert ("POST", "/v3/auth/tokens", "nova") in fake.calls
    assert any(c[1].startswith("/compute/v2.1/os-hypervisors/detail") for c in fake.calls)
    assert "s3cret-pw" not in r.stdout + r.stderr


def test_not_ready_is_one_line_without_secrets_when_keystone_is_unreachable(cloud, tmp_path):
    fake, conf = cloud
    conf.write_text(conf.read_text().replace(fake.url, "http://127.0.0.1:9"))
    r = ready(conf)
    assert r.returncode == 1
    assert r.stderr.startswith("uc-nova-compute-ready: ConnectFailure: ") and r.stderr.count("\n") == 1
    assert "s3cret-pw" not in r.stderr and "Traceback" not in r.stderr
    missing = tmp_path / "none.conf"
    r = ready(missing)
    assert (r.returncode, r.stderr.strip()) == (1, f"uc-nova-compute-ready: {missing}: no [placement] section")


def test_a_replaced_container_waits_for_its_own_nova_compute_to_report(cloud, tmp_path):
    """The predecessor's last report keeps the service "up" for a minute: ready needs a
    report at or after this container's start (whole seconds, as the database keeps)."""
    import datetime
    fake, conf = cloud
    start = datetime.datetime(2026, 11, 25, 14, 2, 6, 400000, tzinfo=datetime.UTC)
    started = tmp_path / "started"
    started.write_text(f"{start.timestamp():.3f}\n")
    fake.hypervisors = [hyp("novacompute-0", "up")]
    for updated in (None, "2026-11-25T14:02:05.000000"):  # never, or the predecessor's last report
        fake.services = [svc("novacompute-0", updated)]
        r = ready(conf, started)
        assert (r.returncode, r.stderr.strip()) == (1, "uc-nova-compute-ready: nova-compute on novacompute-0 "
                                                       "has not reported since this container started")
    fake.services = [svc("novacompute-0", "2026-11-25T14:02:06.000000")]  # same second: the DB drops fractions
    assert ready(conf, started).returncode == 0
    # Before the start script recorded the start, nova-compute has not started: not ready
    # (the predecessor's report would pass for this container's).
    r = ready(conf, tmp_path / "not-written-yet")
    assert (r.returncode, r.stderr.strip()) == (1, "uc-nova-compute-ready: nova-compute has not started yet")
