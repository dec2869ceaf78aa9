"""A lab node turned hypervisor host (issue 19), with real parts: a PostgreSQL store that the
undercloud and the node share (listening on the host's address on the lab network too, a
password for the node), one libvirt VM (TCG here) deployed with the `hypervisor-host`
example (`undercloud deploy --hypervisor vm`), whose UndercloudWorker service runs an
undercloud worker in a container on the node, driving the node's podman through its API.

In order, on one deployment: the node registers as a container hypervisor host with its
own capacity (`server hypervisors`) and as a hypervisor-only worker; neither the store's
password nor its key shows in any output or log; a stack of a role whose flavor pins that
host gets its container server made there by the node's worker (not on this machine), with
its agent checking in with the node's worker and its service (memcached, its image loaded
from the undercloud's store into the host's podman) healthy in `overcloud status`, and the
host's node refused deletion under it;
with the node powered off, the server's stack is deleted at once (Nova's local delete) and the
node's worker, back, removes the container; deleting the host leaves no server or domain
behind, and the retired host can then be forgotten.

Needs root, podman, libvirt/qemu, debootstrap and Debian's PostgreSQL server (skips otherwise).
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests import hypervisor_support
from tests.conftest import address_table, need, run_cli
from tests.hypervisor_support import PASSWORD, domains
from tests.integration.test_workers import wait_for

pytestmark = pytest.mark.timeout(2400)
HOST = "hosts-hypervisor-0"  # the node's name, %stackname%-hypervisor-%index%
PINNED = """\
- name: Remote
  description: A node on the hypervisor host its flavor pins, running one service.
  CountDefault: 1
  HostnameFormatDefault: '%stackname%-remote-%index%'
  ServicesDefault: [OS::TripleO::Services::Memcached]
"""


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    r = run_cli(*args, timeout=timeout)
    assert r.returncode == 0, f"undercloud {' '.join(args)}: {r.stderr[-3000:]}"
    return r


def cli_json(*args: str):
    return json.loads(cli(*args, "-f", "json").stdout)


@pytest.fixture(scope="module")
def hv(tmp_path_factory):
    """An undercloud on a PostgreSQL store the lab network reaches, and its lab network."""
    need("podman")
    need("debootstrap")
    why = hypervisor_support.why_not()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("hv")
    with hypervisor_support.lab_store(root, stacks=("probe", "spanned", "remote", "hosts")) as ls:
        yield {"home": ls.home, "root": root, "lab": ls.lab, "store_env": ls.store_env}


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
    assert workers[HOST]["url"] == f"https://{address}:8990"  # its address on its route to the store, over TLS
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
    # Its service's health comes from its agent (on the host, through the node's worker's
    # network), as for any node: the CLI runs nothing on the host.
    rows = cli_json("overcloud", "status", "--stack", "remote", "--wait", "30")
    assert [(x["node"], x["service"], x["health"]) for x in rows] == [("remote-remote-0", "memcached", "healthy")], rows
    # Made by the node's worker, in the node's podman: nothing of it on this machine.
    here = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
    assert "remote-remote-0" not in here  # neither the node nor its service's container
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


def test_servers_here_and_on_that_host_share_the_lab_network(hv, tmp_path):
    """The host's servers joined this host's container lab network (`deploy` gave its worker
    UndercloudLabNetwork): a server here serves 300 kB, a server on the host fetches it over
    the VXLAN between the two bridges; both got their addresses from the one address table."""
    from tests.integration.test_server_container import SPANNED

    template = tmp_path / "spanned.yaml"
    template.write_text(SPANNED.replace("host-b", HOST))
    start = time.monotonic()
    cli("stack", "create", "spanned", "-t", str(template), "--wait", timeout=900)
    print(f"servers here and on {HOST}, one fetching from the other: {time.monotonic() - start:.1f} s")
    out = {o["output_key"]: o["output_value"] for o in cli_json("stack", "output", "list", "spanned")}
    assert len(out["served"]) == 64 and out["fetched"] == out["served"], out
    # Its agent called the host's worker, which stores such marks at its next heartbeat.
    wait_for("span-b's agent to show as checked in", lambda: cli_json("server", "show", "span-b")["agent_checked_in"],
             timeout=30, every=1)
    there, here = cli_json("server", "show", "span-b"), cli_json("server", "show", "span-a")
    assert there["host"] == HOST and here["host"] != HOST and there["agent_checked_in"]
    held = address_table(hv["home"]).on(f"{hv['home'].instance}-lab")
    assert held[out["a"]] == here["id"] and held[out["b"]] == there["id"] and f"host:{HOST}" in held.values()
    cli("stack", "delete", "spanned", "--wait", timeout=300)


PROBE = """\
heat_template_version: wallaby
parameters:
  server: {type: string}
resources:
  config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      config: |
        #!/bin/sh
        podman ps -a --format '{{.Names}}'
        systemctl is-enabled apt-daily.timer e2scrub_reap.service podman-auto-update.timer || true  # 1 when masked
  look:
    type: OS::Heat::SoftwareDeployment
    properties: {config: {get_resource: config}, server: {get_param: server}}
outputs:
  containers: {value: {get_attr: [look, deploy_stdout]}}
"""


def host_row() -> dict:
    return next(h for h in cli_json("server", "hypervisors") if h["name"] == HOST)


def test_a_host_that_went_down_holds_up_no_delete_and_removes_the_machine_when_back(hv):
    """Nova's local delete: the stack of a server on a host that is down is deleted at once;
    the host's worker, back, removes the container (asked of the node through its agent)."""
    cli("server", "power", "off", HOST, timeout=300)
    wait_for(f"{HOST} to be down", lambda: host_row()["state"] == "down", timeout=120)
    gone = run_cli("overcloud", "delete", "--stack", "remote", "--yes", timeout=300)
    assert gone.returncode == 0, gone.stderr
    assert "remote-remote-0" not in cli("server", "list", "-f", "json").stdout
    assert host_row()["leftovers"] == 1  # its machine, to be removed there
    cli("server", "power", "on", HOST, timeout=300)
    wait_for(f"{HOST}'s worker to be back", lambda: host_row()["state"] == "up", timeout=600, every=2)
    wait_for(f"{HOST}'s worker to remove the machine", lambda: host_row()["leftovers"] == 0, timeout=300, every=2)
    template = hv["root"] / "probe.yaml"
    template.write_text(PROBE)
    node_id = cli_json("server", "show", HOST)["id"]
    cli("stack", "create", "probe", "-t", str(template), "-P", f"server={node_id}", "--wait", timeout=600)
    containers = cli_json("stack", "output", "show", "probe", "containers")["output_value"]
    assert "undercloud-worker" in containers and "remote-remote-0" not in containers, containers
    # A node runs nothing on a timer (the node-boot and container-host elements mask them).
    assert containers.split().count("masked") == 3, containers
    cli("stack", "delete", "probe", "--wait", timeout=300)


def test_deleting_the_host_leaves_nothing_and_the_host_can_be_forgotten(hv):
    gone = run_cli("overcloud", "delete", "--stack", "hosts", "--yes", timeout=900)
    assert gone.returncode == 0, gone.stderr
    assert domains(hv["home"].instance) == []

    def down():
        rows = [h for h in cli_json("server", "hypervisors") if h["name"] == HOST]
        return rows and all(h["state"] == "down" for h in rows)

    wait_for(f"{HOST} to be down (its worker stopped heart-beating)", down, timeout=60)
    cli("server", "hypervisors", "--forget", HOST)
    assert HOST not in {h["name"] for h in cli_json("server", "hypervisors")}
