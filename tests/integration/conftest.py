"""How scripts/test runs this tier: two pytest-xdist workers, a file each at a time
(`--dist loadfile`: a module's fixtures, a lab or a booted VM, are built once), the files
that take longest first so that neither worker is left with a long one at the end; then the
files marked `serial`, alone: they time health checks, probes and takeovers (another file's
emulated boot on the other core makes those late), or change what the whole machine shares
(image tags in podman, mounts in the build cache)."""

from __future__ import annotations

import pytest

SERIAL = frozenset({"test_agent_watchdog.py", "test_agent_kube.py", "test_image_build.py", "test_workers.py",
                    "test_engine_crash.py"})
# the longest first (measured: scripts/test prints each test's cost; the rehearsal of
# 2026-12-07, in seconds: 445, 218, 195, 190, 168, 163, 149, ...). scripts/test passes
# --no-loadscope-reorder, else xdist orders the files by their number of tests instead.
LONGEST = ("test_server_baremetal.py", "test_server_baremetal_pxe.py", "test_image_boot.py", "test_server_container.py",
           "test_server_vm.py", "test_install.py", "test_rabbitmq_cluster.py", "test_lab.py", "test_podman_api_watch.py",
           "test_nova_libvirt.py", "test_image_guest.py")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SERIAL:
            item.add_marker(pytest.mark.serial)
    rank = {name: i for i, name in enumerate(LONGEST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST)))  # stable: a file's order kept
