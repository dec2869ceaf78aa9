"""Whole overcloud deploys on container nodes, checked with the real OpenStack client.

minimal: deploy from nothing (images built or taken from the cache), `openstack token
issue`, `endpoint list` and a placement call through the generated clouds.yaml; a no-op
re-deploy; a broken service configuration fails at its step naming node, service, health
check and log tail, and a fixed re-deploy recovers; scale out to two controllers and back;
delete leaves nothing on the host (containers, the database's volume, the network). The
database outlives its Pod: a project made before a re-deploy that changes MariaDB's
configuration (the Pod is replaced) is still there after.
ha: three controllers behind haproxy + a database node; keystone stopped on one
controller, tokens are still issued through haproxy; haproxy stopped on the controller
holding the virtual IP, keepalived moves the VIP and tokens are still issued through it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from tests.conftest import need, need_root, run_cli

pytestmark = pytest.mark.timeout(1500)


def need_overcloud_tools() -> None:
    need_root()
    need("podman")
    need("debootstrap")
    if not shutil.which("openstack"):
        pytest.skip("python-openstackclient is not installed (pip install -e .[test])")


def openstack(clouds: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["openstack", "--os-cloud", "overcloud", *args], capture_output=True, text=True,
                          env={**os.environ, "OS_CLIENT_CONFIG_FILE": clouds}, timeout=120)


def host_objects(instance: str) -> dict:
    """What this undercloud instance has on the host: containers, volumes, networks."""
    def lines(*args):
        p = subprocess.run(["podman", *args], capture_output=True, text=True)
        return [x for x in p.stdout.split() if instance in x]
    return {"containers": lines("ps", "-a", "--format", "{{.Names}}"),
            "volumes": lines("volume", "ls", "--format", "{{.Name}}"),
            "networks": lines("network", "ls", "--format", "{{.Name}}")}


def container_id(name: str) -> str:
    return subprocess.run(["podman", "inspect", "--format", "{{.Id}}", name], capture_output=True,
                          text=True).stdout.strip()


def vip_holders(instance: str, nodes: list[str], vip: str) -> list[str]:
    """The nodes whose network namespace has the virtual IP on an interface."""
    held = []
    for node in nodes:
        pid = subprocess.run(["podman", "inspect", "--format", "{{.State.Pid}}", f"{instance}-{node}"],
                             capture_output=True, text=True).stdout.strip()
        addrs = subprocess.run(["nsenter", "-t", pid, "-n", "ip", "-o", "-4", "addr", "show"],
                               capture_output=True, text=True).stdout
        if f" {vip}/" in addrs:
            held.append(node)
    return held


def virtual_ip() -> str:
    out = run_cli("stack", "output", "show", "overcloud", "VirtualIP", "-f", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["output_value"]


@pytest.fixture
def overcloud_home(uc_home):
    """uc_home, and whatever overcloud a failed test left is deleted (before the service stops)."""
    yield uc_home
    if (uc_home.path / "undercloud.db").exists():
        listed = run_cli("stack", "list", "-f", "json")
        if listed.returncode == 0 and "overcloud" in listed.stdout:
            run_cli("overcloud", "delete", "--yes", timeout=600)


def deploy(*args: str) -> subprocess.CompletedProcess:
    return run_cli("deploy", *args, timeout=1400)


def secrets_of(uc_home) -> dict:
    return json.loads((uc_home.path / "overcloud" / "overcloud" / "secrets.json").read_text())


def test_minimal_deploy_check_break_recover_delete(overcloud_home, tmp_path):
    uc_home = overcloud_home
    need_overcloud_tools()
    r = deploy()
    assert r.returncode == 0, r.stderr[-3000:]
    for words in ("step 1 (load balancer) on Controller: haproxy", "step 3 (bootstrap) on Controller: keystone",
                  "step 4 on Controller: healthy on every node", "CREATE_COMPLETE"):
        assert words in r.stderr, r.stderr[-3000:]
    endpoints = dict(line.split() for line in r.stdout.splitlines())
    assert endpoints["keystone"].endswith(":5000/v3") and endpoints["placement"].endswith(":8778")
    clouds = str(uc_home.path / "overcloud" / "overcloud" / "clouds.yaml")
    assert f"clouds.yaml: {clouds}" in r.stderr

    token = openstack(clouds, "token", "issue", "-f", "json")
    assert token.returncode == 0, token.stderr
    assert json.loads(token.stdout)["id"]
    eps = openstack(clouds, "endpoint", "list", "-f", "json")
    assert eps.returncode == 0, eps.stderr
    got = {(e["Service Type"], e["Interface"], e["URL"]) for e in json.loads(eps.stdout)}
    for iface in ("public", "internal", "admin"):
        assert ("identity", iface, endpoints["keystone"]) in got
        assert ("placement", iface, endpoints["placement"]) in got
    # The second API, authenticated by keystonemiddleware with the user it registered.
    rp = openstack(clouds, "resource", "provider", "list", "-f", "json")
    assert rp.returncode == 0, rp.stderr
    assert json.loads(rp.stdout) == []

    status = run_cli("overcloud", "status", "-f", "json")
    assert status.returncode == 0, status.stderr
    rows = json.loads(status.stdout)
    assert {x["service"] for x in rows} == {"haproxy", "mysql", "rabbitmq", "memcached", "keystone", "placement"}
    assert all(x["health"] == "healthy" for x in rows), rows
    # The endpoints are on a virtual IP of its own (kept out of the node addresses), which
    # keepalived holds on the haproxy node.
    vip = virtual_ip()
    assert endpoints["keystone"] == f"http://{vip}:5000/v3"
    assert vip not in {x["address"] for x in rows}
    assert vip_holders(uc_home.instance, ["overcloud-controller-0"], vip) == ["overcloud-controller-0"]

    # No change: nothing to do, and it says so.
    again = deploy()
    assert again.returncode == 0, again.stderr[-2000:]
    assert "no change since the last deploy" in again.stderr

    # Secrets: only `overcloud clouds-yaml` shows the admin password; nothing shows the rest.
    secrets = secrets_of(uc_home)
    cy = run_cli("overcloud", "clouds-yaml")
    assert cy.returncode == 0 and secrets["AdminPassword"] in cy.stdout
    shown = r.stdout + r.stderr + again.stdout + again.stderr + status.stdout
    for args in (["stack", "show", "overcloud", "-f", "json"], ["stack", "event", "list", "overcloud", "-f", "json"],
                 ["stack", "resource", "show", "overcloud", "ControllerConfig_Step3", "-f", "json"],
                 ["stack", "resource", "show", "overcloud", "ControllerKeystone.ConfigFiles", "-f", "json"],
                 ["stack", "output", "show", "overcloud", "--all", "-f", "json"]):
        out = run_cli(*args)
        assert out.returncode == 0, out.stderr
        shown += out.stdout + out.stderr
    shown += (uc_home.path / "service.log").read_text(errors="replace")
    leaked = [k for k, v in secrets.items() if v in shown]
    assert leaked == []

    # A broken service configuration fails at its step, naming node, service, check and log tail.
    broken = tmp_path / "broken.yaml"
    broken.write_text('parameter_defaults:\n  MemcachedMaxMemory: "lots"\n')
    bad = deploy("--example", "minimal", "-e", str(broken))
    assert bad.returncode == 1
    err = bad.stderr
    assert ("error: deploy: step 2 failed on node overcloud-controller-0 (role Controller): pod memcached: "
            "container memcached: readiness probe (TCP :11211) did not pass") in err, err[-2000:]
    assert "last lines of the service's log:" in err and "memory" in err.split("last lines")[1]
    assert "Traceback" not in err
    # Fixed: converges again (only what changed is touched).
    fixed = deploy()
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    assert "UPDATE_COMPLETE" in fixed.stderr
    assert openstack(clouds, "token", "issue", "-f", "value", "-c", "id").returncode == 0

    # Scale out to two controllers and back: every node healthy, the removed one gone. The
    # same deploys change MariaDB's configuration (its Pod is replaced, twice): the data
    # lives in the node's volume, so a project made before is still there.
    made = openstack(clouds, "project", "create", "kept-across-pods", "-f", "json")
    assert made.returncode == 0, made.stderr
    mysql = f"{uc_home.instance}-overcloud-controller-0-mysql-mysql"
    first_mysql = container_id(mysql)
    two = tmp_path / "two.yaml"
    two.write_text("parameter_defaults:\n  ControllerCount: 2\n  MysqlMaxConnections: 500\n")
    out = deploy("--example", "minimal", "-e", str(two))
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(run_cli("overcloud", "status", "-f", "json").stdout)
    assert {x["node"] for x in rows} == {"overcloud-controller-0", "overcloud-controller-1"}
    assert all(x["health"] == "healthy" for x in rows), rows
    assert container_id(mysql) not in ("", first_mysql)  # replaced
    kept = openstack(clouds, "project", "show", "kept-across-pods", "-f", "json")
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout)["id"] == json.loads(made.stdout)["id"]
    back = deploy()
    assert back.returncode == 0, back.stderr[-2000:]
    rows = json.loads(run_cli("overcloud", "status", "-f", "json").stdout)
    assert {x["node"] for x in rows} == {"overcloud-controller-0"}
    assert not [c for c in host_objects(uc_home.instance)["containers"] if "controller-1" in c]
    assert openstack(clouds, "token", "issue", "-f", "value", "-c", "id").returncode == 0
    assert openstack(clouds, "project", "show", "kept-across-pods", "-f", "value", "-c", "id").returncode == 0

    objects = host_objects(uc_home.instance)
    assert objects["containers"]
    assert f"{uc_home.instance}-overcloud-controller-0-mysql-data" in objects["volumes"]
    assert not [v for v in objects["volumes"] if "controller-1" in v]  # went with its node
    gone = run_cli("overcloud", "delete", "--yes", timeout=600)
    assert gone.returncode == 0, gone.stderr
    assert run_cli("stack", "list", "-f", "json").stdout.strip() in ("", "[]")
    assert host_objects(uc_home.instance) == {"containers": [], "volumes": [], "networks": []}
    assert not (uc_home.path / "overcloud" / "overcloud").exists()


def test_ha_token_issue_survives_a_stopped_keystone(overcloud_home):
    uc_home = overcloud_home
    need_overcloud_tools()
    r = deploy("--example", "ha")
    assert r.returncode == 0, r.stderr[-3000:]
    for role in ("Controller", "Database"):
        assert f"step 2 on {role}: healthy on every node" in r.stderr
    clouds = str(uc_home.path / "overcloud" / "overcloud" / "clouds.yaml")
    status = json.loads(run_cli("overcloud", "status", "-f", "json").stdout)
    nodes = {x["node"] for x in status}
    assert nodes == {"overcloud-controller-0", "overcloud-controller-1", "overcloud-controller-2",
                     "overcloud-database-0"}
    assert all(x["health"] == "healthy" for x in status), status
    assert openstack(clouds, "token", "issue", "-f", "value", "-c", "id").returncode == 0

    # Stop keystone on one controller: haproxy sends to the others.
    victim = f"{uc_home.instance}-overcloud-controller-0-keystone-keystone"
    stop = subprocess.run(["podman", "stop", "-t", "2", victim], capture_output=True, text=True)
    assert stop.returncode == 0, stop.stderr
    after = json.loads(run_cli("overcloud", "status", "-f", "json").stdout)
    assert [x["health"] for x in after if x["node"] == "overcloud-controller-0" and x["service"] == "keystone"] \
        != ["healthy"]
    for _ in range(3):
        t = openstack(clouds, "token", "issue", "-f", "value", "-c", "id")
        assert t.returncode == 0, t.stderr
    eps = openstack(clouds, "endpoint", "list", "-f", "value", "-c", "Service Type")
    assert eps.returncode == 0 and "placement" in eps.stdout

    # Stop haproxy on the controller holding the virtual IP: its keepalived gives the VIP
    # up (haproxy's health check fails) and another controller takes it.
    vip = virtual_ip()
    controllers = sorted(n for n in nodes if "controller" in n)
    (holder,) = vip_holders(uc_home.instance, controllers, vip)
    stop = subprocess.run(["podman", "stop", "-t", "2", f"{uc_home.instance}-{holder}-haproxy-haproxy"],
                          capture_output=True, text=True)
    assert stop.returncode == 0, stop.stderr
    holders = [holder]
    for _ in range(60):  # keepalived: 3 failed checks 2 s apart, then the others' election
        holders = vip_holders(uc_home.instance, controllers, vip)
        if len(holders) == 1 and holders != [holder]:
            break
        time.sleep(0.5)
    assert len(holders) == 1 and holders != [holder], (holder, holders)
    for _ in range(3):
        t = openstack(clouds, "token", "issue", "-f", "value", "-c", "id")
        assert t.returncode == 0, t.stderr

    assert any(v.endswith("-overcloud-database-0-mysql-data") for v in host_objects(uc_home.instance)["volumes"])
    gone = run_cli("overcloud", "delete", "--yes", timeout=600)
    assert gone.returncode == 0, gone.stderr
    assert host_objects(uc_home.instance) == {"containers": [], "volumes": [], "networks": []}
