"""nova_libvirt for real: the service-nova-compute image run by the kube hook (netns mode,
through the host's podman API) exactly as the nova-libvirt service template renders it,
joined to a container node's network and UTS namespaces, unprivileged but for NET_ADMIN
and /dev/net/tun. libvirtd + virtlogd in it start guest-tiny under TCG the way Nova does
(qcow2 on virtio, virtio NIC on a bridge, serial port on a loopback TCP socket logged by
virtlogd): the tap lands on a bridge in the node's namespace, never on the host, and the
guest's console reaches console.log in the instances volume. Destroy is prompt (tini reaps
qemu). Both images are built in a home of the test's own (layers cached by content).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import need, need_root, run_cli
from tests.unit.agent_support import deployment
from undercloud.agent import hooks

BUILD_TIMEOUT = 1800
TEMPLATE = Path(__file__).resolve().parents[2] / "undercloud/overcloud/services/nova-libvirt.yaml"
DOMAIN = """<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>128</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>
  <features><acpi/><apic/></features>
  <clock offset='utc'><timer name='pit' tickpolicy='delay'/><timer name='hpet' present='no'/></clock>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/><source file='{disk}'/><target dev='vda' bus='virtio'/>
    </disk>
    <interface type='bridge'><source bridge='br-test'/><model type='virtio'/></interface>
    <serial type='tcp'>
      <source mode='bind' host='127.0.0.1' service='10007'/><protocol type='raw'/>
      <log file='{log}' append='off'/><target port='0'/>
    </serial>
  </devices>
</domain>
"""


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    from undercloud.host import podman as hp
    return hp.podman(*args, check=check, timeout=timeout)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """(service-nova-compute podman reference, guest-tiny qcow2), built in a home of our own."""
    need_root()
    need("podman")
    from undercloud import daemon
    from undercloud.config import Home
    from undercloud.host import podman as hp

    reason = hp.available()
    if reason:
        pytest.skip(f"podman does not work here: {reason}")
    home = tmp_path_factory.mktemp("uc") / "home"
    env = {"UNDERCLOUD_HOME": str(home)}
    try:
        for name in ("service-nova-compute", "guest-tiny"):
            r = run_cli("image", "build", name, env=env, timeout=BUILD_TIMEOUT)
            assert r.returncode == 0, r.stderr[-2000:]
        shown = json.loads(run_cli("image", "show", "service-nova-compute", "-f", "json", env=env).stdout)
        qcow2 = home.parent / "guest-tiny.qcow2"
        d = run_cli("image", "download", "guest-tiny", "-o", str(qcow2), env=env, timeout=300)
        assert d.returncode == 0, d.stderr
        yield shown["properties"]["podman_image"], qcow2
    finally:
        daemon.stop(Home(home))


@pytest.fixture
def node(images, tmp_path, monkeypatch):
    """A container node (own network namespace, own hostname) with bridge br-test in its
    namespace, and the agent's environment for netns mode."""
    from undercloud.host import podman as hp

    image, _ = images
    sock = hp.api_service()
    name = f"uc-virt-node-{uuid.uuid4().hex[:6]}"
    podman("run", "-d", "--name", name, "--hostname", name, "--network", "none", image, "sleep", "3600")
    pid = podman("inspect", name, "--format", "{{.State.Pid}}").stdout.strip()
    for cmd in (["link", "add", "br-test", "type", "bridge"], ["addr", "add", "10.99.0.1/24", "dev", "br-test"],
                ["link", "set", "br-test", "up"]):
        subprocess.run(["nsenter", "-t", pid, "-n", "ip", *cmd], check=True, timeout=30)
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{sock}")
    monkeypatch.setenv("UNDERCLOUD_NODE_NETNS", f"container:{name}")
    state = tmp_path / "state"
    state.mkdir()
    yield name, pid, dict(os.environ, UNDERCLOUD_AGENT_STATE=str(state))
    for c in podman("ps", "-a", "--filter", f"label=undercloud.node={name}", "--format", "{{.Names}}").stdout.split():
        podman("rm", "-f", "-t", "0", c, check=False)
    podman("rm", "-f", "-t", "0", name, check=False)
    for claim in ("nova-libvirt-run", "nova-instances"):
        podman("volume", "rm", "-f", f"{name}-{claim}", check=False)


def rendered(image: str) -> dict:
    """The template's ConfigMap + Pod, as the stack computes them (`stack preview`)."""
    r = run_cli("stack", "preview", "-t", str(TEMPLATE), "-P", f"ContainerNovaLibvirtImage={image}", "-f", "json")
    assert r.returncode == 0, r.stderr
    values = {res["name"]: res["properties"]["value"] for res in json.loads(r.stdout)}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "nova-libvirt-config"},
          "data": values["ConfigFiles"]}
    return {"apiVersion": "v1", "kind": "List", "items": [cm, values["Pod"]]}


def test_libvirt_in_a_node_namespace_boots_a_tcg_guest_with_its_tap_on_the_nodes_bridge(images, node):
    from undercloud.host import podman as hp

    image, qcow2 = images
    name, pid, env = node
    started = time.monotonic()
    r = hooks.run(deployment("lv", "nova-libvirt", "kube", rendered(image), options={"ready_timeout": 120}),
                  None, 300, env)
    ready = time.monotonic() - started
    assert r["deploy_status_code"] == 0, r
    lv = f"{name}-nova-libvirt-nova-libvirt"
    # The node's hostname (UTS namespace), unprivileged with NET_ADMIN, tini reaping as PID 1.
    assert podman("exec", lv, "virsh", "-q", "-c", "qemu:///system", "hostname").stdout.strip() == name
    assert podman("inspect", lv, "--format", "{{.HostConfig.Privileged}}").stdout.strip() == "false"
    assert podman("exec", lv, "cat", "/proc/1/comm").stdout.strip() == "tini"

    inst = "/var/lib/nova/instances/test"
    podman("exec", lv, "mkdir", "-p", inst)
    podman("cp", str(qcow2), f"{lv}:{inst}/disk")
    xml = DOMAIN.format(name="uc-test-guest", disk=f"{inst}/disk", log=f"{inst}/console.log")
    subprocess.run(["podman", "exec", "-i", lv, "virsh", "-q", "-c", "qemu:///system", "define", "/dev/stdin"],
                   input=xml, text=True, check=True, timeout=60, env=hp.env())
    t0 = time.monotonic()
    podman("exec", lv, "virsh", "-q", "-c", "qemu:///system", "start", "uc-test-guest")
    start_s = time.monotonic() - t0

    # The tap is on br-test in the node's namespace, not in the host's.
    links = subprocess.run(["nsenter", "-t", pid, "-n", "bridge", "link"], capture_output=True, text=True,
                           timeout=30).stdout
    tap = next((line.split(":")[1].strip().split("@")[0] for line in links.splitlines() if "master br-test" in line),
               None)
    assert tap, links
    assert subprocess.run(["ip", "link", "show", tap], capture_output=True, timeout=30).returncode != 0

    # The guest's serial console reaches console.log through virtlogd (what nova reads).
    deadline, log = time.monotonic() + 240, ""
    while "guest-tiny: kernel" not in log and time.monotonic() < deadline:
        time.sleep(2)
        log = podman("exec", lv, "cat", f"{inst}/console.log", check=False).stdout
    booted = time.monotonic() - t0
    assert "guest-tiny: kernel" in log, log[-2000:]
    # ... and it sends on its NIC (DHCP discovers) through the tap: its first one may come
    # some seconds after the kernel's first line (emulated).
    deadline = time.monotonic() + 90
    while True:
        stats = subprocess.run(["nsenter", "-t", pid, "-n", "ip", "-s", "-j", "link", "show", tap],
                               capture_output=True, text=True, timeout=30).stdout
        if json.loads(stats)[0]["stats64"]["rx"]["packets"] > 0 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert json.loads(stats)[0]["stats64"]["rx"]["packets"] > 0, stats

    t0 = time.monotonic()
    podman("exec", lv, "virsh", "-q", "-c", "qemu:///system", "destroy", "uc-test-guest")
    destroy_s = time.monotonic() - t0
    assert destroy_s < 10  # a qemu nobody reaps stays a zombie and libvirt waits ~40 s for it
    print(f"\nnova_libvirt: ready {ready:.1f} s after the hook started; virsh start {start_s:.2f} s; "
          f"guest kernel on the console after {booted:.1f} s; destroy {destroy_s:.2f} s")
