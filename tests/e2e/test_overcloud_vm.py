"""The overcloud on VM and bare-metal nodes (`undercloud deploy --hypervisor vm|baremetal`).

vm (an extended case: see its skip reason; UNDERCLOUD_TEST_EXTENDED=1 runs it): `minimal`'s
identity service on one libvirt VM (TCG here; the message queue and placement
left out, as emulated they add minutes and prove nothing more): the node's own podman loads
each service image from the image store the first time a Pod needs it; the real `openstack`
client reaches the virtual IP on the lab network through the host's link to it (`token
issue`, `endpoint list`); a no-op re-deploy; delete leaves no domain, disk or link behind.
baremetal (an extended case too): a lab node behind the Redfish emulator, deployed the Ironic direct way, runs the
load balancer (its virtual IP held by keepalived) and the cache (the other services mapped to OS::Heat::None, to keep the test
short: the services are the same Pods as on VMs), reachable from the host.

Needs root, libvirt/qemu, podman, debootstrap and the OpenStack client (skips otherwise).
"""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request

import pytest

from tests.conftest import extended, run_cli
from tests.e2e.test_overcloud import (  # noqa: F401
    LIGHT_CONTROL_PLANE,
    deploy,
    need_overcloud_tools,
    openstack,
    overcloud_home,
)
from tests.integration.test_server_baremetal import lab  # noqa: F401  (the one-node Redfish lab fixture)

pytestmark = pytest.mark.timeout(2400)

# Identity only: the load balancer, the database, the cache and keystone.
IDENTITY = LIGHT_CONTROL_PLANE + """\
  OS::TripleO::Services::RabbitMQ: OS::Heat::None
  OS::TripleO::Services::Placement: OS::Heat::None
"""
# haproxy, keepalived and memcached only: the same Pods as on VMs, a short CI run.
LIGHT = IDENTITY + """\
  OS::TripleO::Services::MySQL: OS::Heat::None
  OS::TripleO::Services::Keystone: OS::Heat::None
"""


def need_lab() -> None:
    from undercloud.lab.lab import available

    why = available()
    if why:
        pytest.skip(f"VM nodes cannot run here: {why}")


def domains(instance: str) -> list[str]:
    p = subprocess.run(["virsh", "-c", "qemu:///system", "list", "--all", "--name"], capture_output=True, text=True)
    return [n for n in p.stdout.split() if n.startswith(f"{instance}-server-")]


def host_link_exists(instance: str) -> bool:
    return subprocess.run(["ip", "link", "show", f"{instance}-h"], capture_output=True).returncode == 0


@extended("the bare-metal overcloud below (a node's podman loading the service images from the image "
          "store, its VIP on the lab network, reached from the host, delete leaving nothing) and "
          "tests/integration/test_server_vm.py (VM servers: create, check-in, power, rebuild, delete)")
def test_minimal_on_vm_nodes(overcloud_home, tmp_path):  # noqa: F811
    uc_home = overcloud_home
    need_overcloud_tools()
    need_lab()
    # Identity on one VM (compute in a TCG VM would emulate twice).
    light = tmp_path / "identity.yaml"
    light.write_text(IDENTITY)
    r = deploy("--hypervisor", "vm", "-e", str(light))
    assert r.returncode == 0, r.stderr[-3000:]
    for words in ("step 3 (bootstrap) on Controller: keystone", "step 4 on Controller: healthy on every node",
                  "CREATE_COMPLETE"):
        assert words in r.stderr, r.stderr[-3000:]
    endpoints = dict(line.split() for line in r.stdout.splitlines())
    from undercloud.lab.lab import Lab
    subnet = Lab(uc_home).subnet
    assert set(endpoints) == {"keystone"}
    assert endpoints["keystone"].startswith(f"http://{subnet}.25")  # the VIP: kept for it on the lab network
    clouds = str(uc_home.path / "overcloud" / "overcloud" / "clouds.yaml")

    # The service images came from the image store into the VM's own podman: step 1's own
    # (later steps' are loaded by the background prefetch, so their steps may say nothing).
    step1 = json.loads(run_cli("stack", "resource", "show", "overcloud",
                               "ControllerDeployment_Step1.overcloud-controller-0", "-f", "json").stdout)
    out = step1["attributes"]["deploy_stdout"]
    assert "image localhost/undercloud/service-haproxy:" in out and "loaded from the undercloud" in out, out

    token = openstack(clouds, "token", "issue", "-f", "json")
    assert token.returncode == 0, token.stderr
    assert json.loads(token.stdout)["id"]
    eps = openstack(clouds, "endpoint", "list", "-f", "json")
    assert eps.returncode == 0, eps.stderr
    assert ("identity", "public", endpoints["keystone"]) in {
        (e["Service Type"], e["Interface"], e["URL"]) for e in json.loads(eps.stdout)}
    rows = json.loads(run_cli("overcloud", "status", "-f", "json").stdout)
    assert {x["service"] for x in rows} == {"haproxy", "mysql", "memcached", "keystone"}
    assert all(x["health"] == "healthy" for x in rows), rows

    again = deploy("--hypervisor", "vm", "-e", str(light))
    assert again.returncode == 0, again.stderr[-2000:]
    assert "no change since the last deploy" in again.stderr

    assert domains(uc_home.instance) and host_link_exists(uc_home.instance)
    gone = run_cli("overcloud", "delete", "--yes", timeout=600)
    assert gone.returncode == 0, gone.stderr
    assert domains(uc_home.instance) == []
    assert not host_link_exists(uc_home.instance)  # the lab network went with the last server


@extended("tests/integration/test_server_baremetal.py (a Redfish node deployed the Ironic direct way, "
          "its agent checked in, cleaned and back in the pool at delete), the hypervisor host and "
          "QuintupleO (a qcow2 node's podman loading service images from the image store, its Pods "
          "healthy in `overcloud status`), the shared deployment and `ha` (haproxy, keepalived's VIP) "
          "and test_image_boot (the deploy ISO and the disk under SeaBIOS)")
def test_services_on_bare_metal_nodes(lab, tmp_path):  # noqa: F811
    need_overcloud_tools()
    uc_home = lab["home"]
    env = tmp_path / "light.yaml"
    env.write_text(LIGHT)
    try:
        r = deploy("--hypervisor", "baremetal", "-e", str(env))
        assert r.returncode == 0, r.stderr[-3000:]
        assert "step 2 on Controller: healthy on every node" in r.stderr
        rows = json.loads(run_cli("overcloud", "status", "-f", "json").stdout)
        assert {x["service"] for x in rows} == {"haproxy", "memcached"}
        assert all(x["health"] == "healthy" for x in rows), rows
        address = rows[0]["address"]
        assert address.startswith(lab["lab"].subnet + ".")
        # The virtual IP: an address of its own on the lab network, held by keepalived.
        assert r.stdout.strip() == ""  # no API service, no endpoint (and no clouds.yaml)
        assert "no keystone in this overcloud: no clouds.yaml" in r.stderr
        vip = json.loads(run_cli("stack", "output", "show", "overcloud", "VirtualIP", "-f", "json").stdout)[
            "output_value"]
        assert vip.startswith(lab["lab"].subnet + ".") and vip != address
        # From the host, over its link to the lab network: haproxy's health page on the VIP, memcached.
        with urllib.request.urlopen(f"http://{vip}:1936/healthz", timeout=10) as resp:
            assert resp.status == 200
        with socket.create_connection((address, 11211), timeout=10) as s:
            s.sendall(b"version\r\n")
            assert s.recv(100).startswith(b"VERSION")
        node = run_cli("node", "show", lab["node"], "-f", "json")
        assert json.loads(node.stdout)["provision_state"] == "active"
    finally:
        gone = run_cli("overcloud", "delete", "--yes", timeout=900)
    assert gone.returncode == 0, gone.stderr
    node = json.loads(run_cli("node", "show", lab["node"], "-f", "json").stdout)
    assert node["provision_state"] == "available"  # cleaned and back in the pool
    assert run_cli("stack", "list", "-f", "json").stdout.strip() in ("", "[]")
    assert not (uc_home.path / "overcloud" / "overcloud").exists()  # plan, secrets, VIP freed
