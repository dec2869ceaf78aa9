"""The release that is not the default (an extended case: see its skip reason;
UNDERCLOUD_TEST_EXTENDED=1 runs it): a minimal overcloud of it on container nodes, from
its own service images (the other Debian), with its own network mechanism (Zed:
linuxbridge; 2025.1: Open vSwitch), an instance booted on a tenant network that takes its
address by DHCP and its instance id from Nova's metadata service; then deleted.

Needs root, podman, debootstrap and the OpenStack client (skips otherwise).
"""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import extended, run_cli
from tests.e2e.test_overcloud import (  # noqa: F401
    L2_AGENTS,
    MICROVERSION,
    address_of,
    boot,
    console,
    deploy,
    need_overcloud_tools,
    ok_json,
    overcloud_home,
)
from undercloud.images.catalog import DEFAULT_RELEASE, RELEASES
from undercloud.overcloud.library import LIBRARY

pytestmark = pytest.mark.timeout(3000)

OTHER = next(r for r in RELEASES if r != DEFAULT_RELEASE)


@extended("the shared deployment in test_overcloud.py: the same services, mechanism code and checks, on the "
          "default release")
def test_a_minimal_overcloud_of_the_other_release_boots_an_instance(overcloud_home, tmp_path):  # noqa: F811
    need_overcloud_tools()
    start = time.monotonic()
    r = deploy("-e", str(LIBRARY / "environments" / f"release-{OTHER}.yaml"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"OpenStack {OTHER}" in r.stderr
    print(f"minimal {OTHER} deploy: {time.monotonic() - start:.0f} s")
    clouds = str(overcloud_home.path / "overcloud" / "overcloud" / "clouds.yaml")
    compute = ok_json(clouds, "versions", "show", "--service", "compute", "--status", "CURRENT")
    assert [v["Max Microversion"] for v in compute] == [MICROVERSION[OTHER]], compute
    agents = ok_json(clouds, "network", "agent", "list")
    assert {a["Binary"] for a in agents} == {L2_AGENTS[OTHER][3], "neutron-dhcp-agent", "neutron-metadata-agent"}
    assert all(a["Alive"] for a in agents), agents

    built = run_cli("image", "build", "guest-tiny", timeout=900)
    assert built.returncode == 0, built.stderr[-2000:]
    guest = tmp_path / "guest-tiny.qcow2"
    assert run_cli("image", "download", "guest-tiny", "-o", str(guest)).returncode == 0
    ok_json(clouds, "image", "create", "guest", "--file", str(guest), "--disk-format", "qcow2",
            "--container-format", "bare", timeout=600)
    ok_json(clouds, "network", "create", "net1")
    ok_json(clouds, "subnet", "create", "--network", "net1", "--subnet-range", "192.168.77.0/24", "sub1")
    ok_json(clouds, "flavor", "create", "tiny", "--vcpus", "1", "--ram", "128", "--disk", "1")
    vm = boot(clouds, "vm1")
    addr = address_of(ok_json(clouds, "server", "show", "vm1"))
    log = console(clouds, "vm1", "guest-tiny: up")
    assert f"guest-tiny: address {addr}/24" in log  # DHCP across the tunnel from the controller
    assert f"guest-tiny: instance-id {vm['id']}" in log  # Nova's metadata service
    print(f"vm1 ({OTHER}): ACTIVE after {vm['seconds_to_active']:.1f} s")

    gone = run_cli("overcloud", "delete", "--yes", timeout=900)
    assert gone.returncode == 0, gone.stderr
    assert json.loads(run_cli("stack", "list", "-f", "json").stdout or "[]") == []
