"""The lab's libvirtd needs the host's virtlogd: found by its socket answering, not by a
process name (an overcloud's nova_libvirt container runs a virtlogd of its own, with its own
/run/libvirt, which once made the lab skip starting the host's: every VM failed to start)."""

from __future__ import annotations

import socket
import subprocess
import sys

from undercloud.host.libvirt import virtlogd_running


def test_virtlogd_counts_only_when_its_socket_answers(tmp_path):
    path = tmp_path / "virtlogd-sock"
    assert not virtlogd_running(path)  # no socket
    # A process named virtlogd (as in a container) does not make the host's socket answer.
    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "virtlogd"])
    try:
        assert not virtlogd_running(path)
    finally:
        decoy.kill()
        decoy.wait()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        assert not virtlogd_running(path)  # bound but not listening: refused
        server.listen(1)
        assert virtlogd_running(path)
    assert not virtlogd_running(path)  # closed: a stale socket file answers nothing
