"""A build killed mid-way (SIGKILL, or SIGTERM to a CLI that was building) leaves its
`<key>.tmp-<pid>` directory, and possibly an overlay mounted in it: the next build of that key
removes it (mounts first), and leaves alone what a running build or another key owns."""

from __future__ import annotations

import os
import subprocess

import pytest

from undercloud.images.rootfs import clear_abandoned


def dead_pid() -> int:
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid += 1
    return pid


def test_only_a_dead_build_of_the_same_key_is_removed(tmp_path):
    dead, alive = tmp_path / f"k1.tmp-{dead_pid()}", tmp_path / f"k1.tmp-{os.getpid()}"
    other_key, not_a_pid = tmp_path / f"k2.tmp-{dead_pid()}", tmp_path / "k1.tmp-x7q"
    for d in (dead, alive, other_key, not_a_pid):
        (d / "work").mkdir(parents=True)
    clear_abandoned(tmp_path, "k1")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (alive, other_key, not_a_pid))
    clear_abandoned(tmp_path / "missing", "k1")  # nothing there: nothing to do, no error


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_a_mount_left_in_it_is_undone_first(tmp_path):
    dead = tmp_path / f"k1.tmp-{dead_pid()}"
    point = dead / "work" / "root"
    point.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(point)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    (point / "file").write_text("x")
    clear_abandoned(tmp_path, "k1")
    mounts = open("/proc/mounts").read()
    assert str(point) not in mounts and not dead.exists()
