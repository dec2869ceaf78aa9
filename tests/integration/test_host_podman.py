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
