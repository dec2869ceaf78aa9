"""The lab's libvirtd needs the host's virtlogd: found by its socket answering, not by a
process name (an overcloud's nova_libvirt container runs a virtlogd of its own, with its own
/run/libvirt, which once made the lab skip starting the host's: every VM failed to start)."""

from __future__ import annotations

import socket
import subprocess
import sys
from types import SimpleNamespace

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


def test_two_labs_coming_up_at_once_start_one_virtlogd_and_one_libvirtd(tmp_path, monkeypatch):
    """Two `lab up`s (two test workers) found no libvirtd at the same moment: both started a
    virtlogd, and the second failed ("Unable to obtain pidfile"). A fake host here, whose
    virtlogd refuses a second start as the real one does; the real race runs in CI's
    integration tier, where two files bring up labs at once."""
    import threading
    import time

    from undercloud.host import libvirt

    host = {"virtlogd": 0, "virtlogd_listening": False, "libvirtd": None}
    lock = threading.Lock()

    def nsenter(path, *argv, check=True):
        if argv[0] == "virtlogd":
            with lock:
                if host["virtlogd"]:
                    raise libvirt.HostError("virtlogd: error: Unable to obtain pidfile")
                host["virtlogd"] += 1
            threading.Timer(0.3, host.__setitem__, ("virtlogd_listening", True)).start()
        return subprocess.CompletedProcess(argv, 0, "", "")

    class Libvirtd:  # stands for subprocess.Popen starting libvirtd: it answers 0.3 s later
        started = 0

        def __init__(self, argv, **kwargs):
            assert argv[-1] == "libvirtd"
            Libvirtd.started += 1
            threading.Timer(0.3, host.__setitem__, ("libvirtd", 4242)).start()

    monkeypatch.setattr(libvirt, "START_LOCK", tmp_path / "start.lock")
    monkeypatch.setattr(libvirt, "NETNS_DIR", tmp_path / "netns")
    monkeypatch.setattr(libvirt, "LIBVIRTD_LOG", tmp_path / "libvirtd.log")
    monkeypatch.setattr(libvirt, "libvirtd_pid", lambda: host["libvirtd"])
    monkeypatch.setattr(libvirt, "virtlogd_running", lambda: host["virtlogd_listening"])
    monkeypatch.setattr(libvirt, "_libvirtd_answers", lambda: True)
    monkeypatch.setattr(libvirt, "nsenter", nsenter)
    monkeypatch.setattr(libvirt, "run", lambda argv, **kw: subprocess.CompletedProcess(argv, 0, "", ""))
    monkeypatch.setattr(libvirt.subprocess, "Popen", Libvirtd)
    monkeypatch.setattr(libvirt, "accelerator", lambda: SimpleNamespace(type="kvm"))
    results, errors = [], []

    def up(name):
        try:
            results.append(libvirt.ensure_libvirtd(name))
        except Exception as e:  # noqa: BLE001 - the test reports what either caller met
            errors.append(e)

    callers = [threading.Thread(target=up, args=(f"uc{i}-lab",)) for i in range(2)]
    for t in callers:
        t.start()
        time.sleep(0.05)  # the second asks while the first's virtlogd is not yet listening
    for t in callers:
        t.join(10)
    assert errors == []
    assert host["virtlogd"] == 1 and Libvirtd.started == 1
    assert sorted(results) == [str(tmp_path / "netns" / "uc0-lab"), str(tmp_path / "netns" / "uc1-lab")]
