"""The host's podman API service: started once even when several undercloud services
(homes) ask for it at the same moment."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

from tests.conftest import need, need_root


def _services(socket_path) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"podman system service --time=0 unix://{socket_path}"],
                         capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_concurrent_callers_start_one_api_service(tmp_path):
    need_root()
    need("podman")
    from undercloud.host import podman

    sock = tmp_path / "podman.sock"
    got, errors = [], []

    def ask():
        try:
            got.append(podman.api_service(sock, timeout=60))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and got == [sock] * 4
        assert len(_services(sock)) == 1
        assert podman.api_service(sock) == sock and len(_services(sock)) == 1  # answers: nothing started
    finally:
        for pid in _services(sock):
            os.kill(pid, signal.SIGTERM)


def test_a_service_whose_directory_was_removed_is_replaced_and_a_new_one_runs_from_root(tmp_path):
    """A service started (by an older version) in a directory since removed answers pings but
    fails every container start ("write child: broken pipe"): it is replaced."""
    need_root()
    need("podman")
    import shutil
    import time

    from undercloud.host import podman

    sock = tmp_path / "podman.sock"
    gone = tmp_path / "checkout"
    gone.mkdir()
    old = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{sock}"], env=podman.env(),
                           cwd=gone, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        for _ in range(150):
            if sock.exists():
                break
            time.sleep(0.2)
        assert podman.api_service(sock, timeout=60) == sock and _services(sock) == [old.pid]  # healthy: kept
        shutil.rmtree(gone)
        assert podman.api_service(sock, timeout=60) == sock
        assert old.wait(10) is not None  # the stale one was stopped
        (new,) = _services(sock)
        assert new != old.pid and os.readlink(f"/proc/{new}/cwd") == "/"
    finally:
        for pid in _services(sock):
            os.kill(pid, signal.SIGTERM)
        if old.poll() is None:
            old.kill()
