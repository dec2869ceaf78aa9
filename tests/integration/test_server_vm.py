"""VM servers for real: a libvirt domain (TCG) booting an overlay of the built `overcloud-full`
qcow2, its agent checking in over the lab network, and nothing left after delete.

Needs root, libvirt/qemu and the lab's tools (skips otherwise, naming what is missing).
The image comes from the image builder (cached after the first build). A TCG boot to the
agent takes 30-120 s on a shared 2-core machine: waits are bounded, and the fixture removes
every domain, file and lab address of this undercloud instance even when a test fails.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import lab_addresses, need_root, run_cli
from undercloud.host.accel import accelerator

IMAGES = Path("/var/lib/libvirt/images")
BOOT_TIMEOUT = 600  # stack create -> agent check-in, under TCG

SERVER = """\
heat_template_version: wallaby
resources:
  node:
    type: OS::Nova::Server
    properties:
      name: vm0
      image: overcloud-full
      flavor: vm
      networks: [{network: ctlplane, fixed_ip: FIXED_IP}]
      metadata: {role: test}
outputs:
  ip: {value: {get_attr: [node, first_address]}}
"""


def virsh(*args: str):
    from undercloud.lab.lab import virsh as _virsh

    return _virsh(*args, check=False, timeout=60)


def domains(instance: str) -> list[str]:
    return [n for n in virsh("list", "--all", "--name").stdout.split() if n.startswith(f"{instance}-server-")]


def files(instance: str) -> list[str]:
    return sorted(p.name for p in IMAGES.glob(f"{instance}-server-*"))


def bridge_exists(home) -> bool:
    from undercloud.lab.lab import libvirtd_pid

    pid = libvirtd_pid()
    return pid is not None and subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "ip", "link", "show",
                                               f"br-{home.instance}"], capture_output=True).returncode == 0


@pytest.fixture
def uc(uc_home):
    need_root()
    from undercloud.lab.lab import Lab, available

    why = available()
    if why:
        pytest.skip(f"VM servers cannot run here: {why}")
    instance = uc_home.instance
    try:
        r = run_cli("image", "build", "overcloud-full", "--type", "qcow2", timeout=1800)
        assert r.returncode == 0, r.stderr[-2000:]
        yield uc_home
    finally:
        run_cli("service", "stop")
        for name in domains(instance):
            virsh("destroy", name)
            virsh("undefine", name)
        for p in IMAGES.glob(f"{instance}-server-*"):
            p.unlink()
        Lab(uc_home).down()  # the lab network (bridge, namespace name) the servers used


def show(ref: str) -> dict:
    r = run_cli("server", "show", ref, "-f", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def wait_checked_in(ref: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        srv = show(ref)
        if srv["agent_checked_in"]:
            return srv
        assert srv["status"] != "ERROR", f"server {ref} failed: {srv['fault']}"
        if time.monotonic() > deadline:
            console = run_cli("server", "console", ref).stdout[-3000:]
            pytest.fail(f"agent of {ref} did not check in within {timeout:.0f} s: {srv}\nconsole:\n{console}")
        time.sleep(2)


def fixed_ip(home) -> str:
    from undercloud.lab.lab import Lab

    return f"{Lab(home).subnet}.123"  # each home's lab has its own /24


def test_vm_server_check_in_power_rebuild_restart_and_delete_leaves_nothing(uc, tmp_path):
    """One emulated boot for every check of a VM server's life: its domain, disk and config
    drive at check-in, power off and on, rebuild, the agent finding a restarted undercloud,
    and nothing left after delete."""
    ip = fixed_ip(uc)
    tpl = tmp_path / "vm.yaml"
    tpl.write_text(SERVER.replace("FIXED_IP", ip))
    t0 = time.monotonic()
    r = run_cli("stack", "create", "v2", "-t", str(tpl), "--wait", timeout=BOOT_TIMEOUT)
    assert r.returncode == 0, r.stderr[-2000:]
    srv = wait_checked_in("vm0", BOOT_TIMEOUT)
    print(f"stack create -> agent check-in: {time.monotonic() - t0:.1f} s")
    assert srv["status"] == "ACTIVE" and srv["hypervisor_type"] == "vm"
    assert srv["addresses"] == {"ctlplane": [ip]}
    name = f"{uc.instance}-server-{srv['id']}"
    assert srv["instance_name"] == name
    assert domains(uc.instance) == [name]
    assert virsh("domstate", name).stdout.strip() == "running"
    xml = virsh("dumpxml", name).stdout
    domain_type = accelerator().type  # qemu (TCG) unless a KVM probe boot worked on this machine
    assert f"<domain type='{domain_type}'" in xml and f"br-{uc.instance}" in xml  # on this home's lab bridge
    # A copy-on-write overlay on the image: the store's file is never written.
    info = json.loads(subprocess.run(
        ["qemu-img", "info", "--output=json", "-U", str(IMAGES / f"{name}.qcow2")],
        capture_output=True, text=True).stdout)
    assert info["backing-filename"] == str(IMAGES / f"{name}-base.qcow2")
    assert files(uc.instance) == sorted(f"{name}{s}" for s in ("-base.qcow2", ".qcow2", "-config.iso", "-console.log"))
    # The config drive reached the guest: hostname, static address, agent configuration.
    console = run_cli("server", "console", "vm0").stdout
    assert f"first boot of vm0 ({srv['id']}) applied" in console
    assert f"address {ip}/24" in console
    token_file = Path(uc.path) / "servers" / srv["id"] / "first-boot" / "config.json"
    assert json.loads(token_file.read_text())["token"] not in console  # the token never shows
    out = json.loads(run_cli("stack", "output", "show", "v2", "--all", "-f", "json").stdout)
    assert {o["output_key"]: o["output_value"] for o in out}["ip"] == ip
    assert lab_addresses(uc) == {ip: srv["id"]}

    r = run_cli("server", "power", "off", "vm0", "-f", "json", timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "SHUTOFF"
    assert virsh("domstate", name).stdout.strip() == "shut off"
    r = run_cli("server", "power", "on", "vm0", "-f", "json", timeout=120)
    assert json.loads(r.stdout)["status"] == "ACTIVE"
    # Rebuild: a new overlay from the image, same address. A fresh disk has the image's small
    # root file system, which the node grows at boot: a second resize on the console shows it
    # (the power cycle above booted the same, already grown disk).
    r = run_cli("server", "rebuild", "vm0", "-f", "json", timeout=300)
    assert r.returncode == 0, r.stderr
    # Restart the undercloud: the guest reaches it again at the same lab address and port.
    assert run_cli("service", "stop").returncode == 0
    restarted = time.time()  # the agent's calls from now on are the rebuilt guest's, to the new service
    deadline = time.monotonic() + BOOT_TIMEOUT
    while ((now := show("vm0"))["agent_last_seen"] or 0) <= restarted:  # `show` starts the service again
        assert time.monotonic() < deadline, f"the rebuilt VM's agent did not check in again: {now}"
        time.sleep(2)
    assert now["status"] == "ACTIVE" and now["addresses"] == {"ctlplane": [ip]}
    shown = run_cli("server", "console", "vm0", "--lines", "10000")
    console = shown.stdout
    assert console.count("resizing filesystem from") == 2, console[-3000:] + shown.stderr
    r = run_cli("stack", "delete", "v2", "--wait", timeout=300)
    assert r.returncode == 0, r.stderr
    assert domains(uc.instance) == []
    assert files(uc.instance) == []
    assert lab_addresses(uc) == {}
    assert not bridge_exists(uc)  # the lab network went with the last server (no lab is up)
    assert json.loads(run_cli("server", "list", "-f", "json").stdout) == []
    assert srv["id"] not in run_cli("agent", "list", "-f", "json").stdout


def test_vm_fixed_ip_outside_the_lab_network_fails_in_one_line_and_leaves_nothing(uc, tmp_path):
    tpl = tmp_path / "vm.yaml"
    tpl.write_text(SERVER.replace("FIXED_IP", "10.9.9.9"))
    r = run_cli("stack", "create", "bad", "-t", str(tpl), "--wait", timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    subnet = fixed_ip(uc).rsplit(".", 1)[0]
    assert f"fixed_ip 10.9.9.9 is not a free host address of ctlplane ({subnet}.0/24" in r.stderr
    assert domains(uc.instance) == []
    run_cli("stack", "delete", "bad", "--wait", timeout=300)
    assert json.loads(run_cli("server", "list", "-f", "json").stdout) == []
    assert files(uc.instance) == [] and lab_addresses(uc) == {}
