"""A lab node turned hypervisor host (issue 19), with real parts: a PostgreSQL store that the
undercloud and the node share (listening on the host's address on the lab network too, a
password for the node), one libvirt VM (TCG here) deployed with the `hypervisor-host`
example (`undercloud deploy --hypervisor vm`), whose UndercloudWorker service runs an
undercloud worker in a container on the node, driving the node's podman through its API.

In order, on one deployment: the node registers as a container hypervisor host with its
own capacity (`server hypervisors`) and as a hypervisor-only worker; neither the store's
password nor its key shows in any output or log; a stack of a role whose flavor pins that
host gets its container server made there by the node's worker (not on this machine), with
its agent checking in with the node's worker; deleting both stacks leaves no server, domain
or podman container behind (the host's node is refused while it runs a server), and the
retired host can then be forgotten.

Needs root, podman, libvirt/qemu, debootstrap and Debian's PostgreSQL server (skips otherwise).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests import pg_support
from tests.conftest import need, need_root, run_cli

pytestmark = pytest.mark.timeout(2400)
PASSWORD = "lab-store-pw-7f3a"  # the node's PostgreSQL password: must show nowhere
HOST = "hosts-hypervisor-0"  # the node's name, %stackname%-hypervisor-%index%
PINNED = """\
- name: Remote
  description: Servers only, on the hypervisor host its flavor pins.
  CountDefault: 1
  HostnameFormatDefault: '%stackname%-remote-%index%'
  ServicesDefault: []
"""


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    r = run_cli(*args, timeout=timeout)
    assert r.returncode == 0, f"undercloud {' '.join(args)}: {r.stderr[-3000:]}"
    return r


def cli_json(*args: str):
    return json.loads(cli(*args, "-f", "json").stdout)


def wait_for(what: str, check, timeout: float = 120, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def domains(instance: str) -> list[str]:
    p = subprocess.run(["virsh", "-c", "qemu:///system", "list", "--all", "--name"], capture_output=True, text=True)
    return [n for n in p.stdout.split() if n.startswith(f"{instance}-server-")]


@pytest.fixture(scope="module")
def hv(tmp_path_factory):
    """An undercloud on a PostgreSQL store the lab network reaches, and its lab network."""
    need_root()
    need("podman")
    need("debootstrap")
    why = pg_support.why_not()
    if why:
        pytest.skip(why)
    from undercloud import daemon
    from undercloud.config import Home
    from undercloud.host.labnet import HOST_ADDRESS, LabNetwork
    from undercloud.lab.lab import available

    why = available()
    if why:
        pytest.skip(f"VM nodes cannot run here: {why}")
    root = tmp_path_factory.mktemp("hv")
    home = Home(root / "home")
    lab = LabNetwork(home.instance)
    lab.up()  # the host's address on it must exist before the database listens there
    host_ip = f"{lab.subnet}.{HOST_ADDRESS}"
    server = pg_support.Server(Path("/tmp"), listen=("127.0.0.1", host_ip),
                               hba=(f"host undercloud undercloud {lab.subnet}.0/24 scram-sha-256",))
    server._admin(f"CREATE ROLE undercloud LOGIN PASSWORD '{PASSWORD}'")
    server._admin("CREATE DATABASE undercloud OWNER undercloud")
    saved = {k: os.environ.get(k) for k in ("UNDERCLOUD_HOME", "UNDERCLOUD_DB", "UNDERCLOUD_LISTEN")}
    os.environ.update(UNDERCLOUD_HOME=str(home.path),
                      UNDERCLOUD_DB=f"postgresql://undercloud:{PASSWORD}@127.0.0.1:{server.port}/undercloud",
                      # where the node's worker reaches this one (image content, forwarded calls)
                      UNDERCLOUD_LISTEN=host_ip)
    store_env = root / "store.yaml"
    store_env.write_text(yaml.safe_dump({"parameter_defaults": {
        "UndercloudStoreUrl": f"postgresql://undercloud:{PASSWORD}@{host_ip}:{server.port}/undercloud"}}))
    try:
        yield {"home": home, "root": root, "lab": lab, "store_env": store_env, "host_ip": host_ip}
    finally:
        for stack in ("remote", "hosts"):
            if stack in run_cli("stack", "list", "-f", "json").stdout:
                run_cli("overcloud", "delete", "--stack", stack, "--yes", timeout=900)
        daemon.stop(home)
        server.stop()
        for name in domains(home.instance):
            subprocess.run(["virsh", "-c", "qemu:///system", "destroy", name], capture_output=True)
            subprocess.run(["virsh", "-c", "qemu:///system", "undefine", name], capture_output=True)
        lab.remove()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_a_vm_node_deployed_with_the_hypervisor_host_role_becomes_a_hypervisor_host(hv):
    start = time.monotonic()
    r = run_cli("deploy", "--example", "hypervisor-host", "--stack", "hosts", "--hypervisor", "vm",
                "-e", str(hv["store_env"]), timeout=2000)
    assert r.returncode == 0, r.stderr[-3000:]
    print(f"hypervisor host deployed in {time.monotonic() - start:.1f} s")
    assert "step 1 on HypervisorHost: healthy on every node" in r.stderr and "CREATE_COMPLETE" in r.stderr
    node = cli_json("server", "show", HOST)
    address = node["addresses"]["ctlplane"][0]
    assert node["hypervisor_type"] == "vm" and address.startswith(hv["lab"].subnet + ".")
    hosts = {(h["name"], h["hypervisor_type"]): h for h in cli_json("server", "hypervisors")}
    mine = hosts[(HOST, "container")]
    assert mine["state"] == "up" and mine["servers"] == 0
    # its own capacity (flavor vm-control: 2 vCPUs, 4 GB), with Nova's allocation ratios
    assert mine["vcpus"] == 2 * 16 and 4096 < mine["memory_mb"] <= 4096 * 1.5
    assert (HOST, "vm") not in hosts  # no libvirt in the worker's container: container servers only
    workers = {w["host"]: w for w in cli_json("service", "workers")}
    assert workers[HOST]["alive"] and workers[HOST]["duties"] == "servers"
    assert workers[HOST]["url"] == f"http://{address}:8990"  # its address on its route to the store
    status = cli_json("overcloud", "status", "--stack", "hosts")
    assert [(s["service"], s["health"]) for s in status] == [("undercloud_worker", "healthy")]
    # Secrets stay secret: the database password and the store key show in no output or log.
    key = (hv["home"].path / "store.key").read_text().strip()
    shown = r.stdout + r.stderr + cli("stack", "show", "hosts", "-f", "json").stdout
    shown += (hv["home"].path / "service.log").read_text()
    assert PASSWORD not in shown and key not in shown


def test_a_server_of_a_role_pinned_to_that_host_runs_there_and_its_agent_checks_in(hv):
    cli("flavor", "create", "pinned", "--vcpus", "1", "--ram", "256", "--disk", "5",
        "--property", "hypervisor_type=container", "--property", f"capabilities:hypervisor_hostname={HOST}")
    roles = hv["root"] / "pinned_roles.yaml"
    roles.write_text(PINNED)
    env = hv["root"] / "pinned.yaml"
    env.write_text("parameter_defaults: {OvercloudRemoteFlavor: pinned}\n")
    start = time.monotonic()
    r = run_cli("deploy", "--stack", "remote", "--roles", str(roles), "-e", str(env), timeout=1500)
    assert r.returncode == 0, r.stderr[-3000:]
    print(f"pinned role deployed in {time.monotonic() - start:.1f} s")
    server = cli_json("server", "show", "remote-remote-0")
    assert server["host"] == HOST and server["status"] == "ACTIVE"
    assert server["agent_checked_in"], server
    # Made by the node's worker, in the node's podman: nothing of it on this machine.
    here = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
    assert "remote-remote-0" not in here
    assert cli_json("server", "hypervisors")  # still answers with a server on another host
    used = {h["name"]: h for h in cli_json("server", "hypervisors") if h["hypervisor_type"] == "container"}
    assert used[HOST]["servers"] == 1 and used[HOST]["vcpus_used"] == 1
    console = cli("server", "console", "remote-remote-0").stdout  # asked of the node's worker
    assert "undercloud-agent" in console
    # The host's own node is not deleted under the server it runs.
    refused = run_cli("server", "delete", HOST)
    assert refused.returncode != 0
    assert f"server {HOST} is the hypervisor host of 1 server(s) (remote-remote-0): delete them first" in refused.stderr
    assert cli_json("server", "show", HOST)["status"] == "ACTIVE"


def test_deleting_the_servers_then_the_host_leaves_nothing_and_the_host_can_be_forgotten(hv):
    gone = run_cli("overcloud", "delete", "--stack", "remote", "--yes", timeout=900)
    assert gone.returncode == 0, gone.stderr
    assert "remote-remote-0" not in cli("server", "list", "-f", "json").stdout
    gone = run_cli("overcloud", "delete", "--stack", "hosts", "--yes", timeout=900)
    assert gone.returncode == 0, gone.stderr
    assert domains(hv["home"].instance) == []

    def down():
        rows = [h for h in cli_json("server", "hypervisors") if h["name"] == HOST]
        return rows and all(h["state"] == "down" for h in rows)

    wait_for(f"{HOST} to be down (its worker stopped heart-beating)", down, timeout=60)
    cli("server", "hypervisors", "--forget", HOST)
    assert HOST not in {h["name"] for h in cli_json("server", "hypervisors")}
