"""podman as this project uses it: runc as runtime and explicit ulimits.

crun fails on hosts with hybrid cgroups and the default nofile limit cannot be raised on
every host (see ../shared/ENVIRONMENT.md), so every podman call gets CONTAINERS_CONF
pointing at the file below.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from undercloud.host.run import require, run

CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
"""
CONF_PATH = Path("/tmp/undercloud-containers.conf")


def env() -> dict:
    """The environment for podman (and `podman kube play`) calls."""
    if not CONF_PATH.exists() or CONF_PATH.read_text() != CONF:
        tmp = CONF_PATH.with_suffix(f".{os.getpid()}")
        tmp.write_text(CONF)
        tmp.replace(CONF_PATH)
    return dict(os.environ, CONTAINERS_CONF=str(CONF_PATH))


def podman(*args: str, check: bool = True, input: str | bytes | None = None,
           timeout: float | None = 300, text: bool = True) -> subprocess.CompletedProcess:
    require("podman", "podman")
    return run(["podman", *args], check=check, input=input, timeout=timeout, env=env(), text=text)


def available() -> str | None:
    """None when podman works here, else the reason it does not (for skips and errors)."""
    try:
        podman("info", "--format", "{{.Host.OCIRuntime.Name}}", timeout=30)
    except Exception as exc:  # noqa: BLE001 - any failure is a reason
        return str(exc)
    return None


def image_exists(ref: str) -> bool:
    return podman("image", "exists", ref, check=False).returncode == 0


def argv(*args: str) -> Sequence[str]:
    return ["podman", *args]


API_SOCKET = Path("/run/podman/podman.sock")


def api_service(socket_path: Path = API_SOCKET, timeout: float = 30) -> Path:
    """Make sure podman's API service answers on `socket_path` (started with this module's
    containers.conf, detached, when it does not); container nodes drive it (kube hook)."""
    import socket
    import time

    def answers() -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(2)
                s.connect(str(socket_path))
                s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
                return b" 200 " in s.recv(64)
        except OSError:
            return False

    if answers():
        return socket_path
    require("podman", "podman")
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    # Several undercloud services (homes) may start at once: one starts it, the others wait.
    with open(socket_path.parent / f"{socket_path.name}.undercloud-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if answers():
            return socket_path
        subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{socket_path}"], env=env(),
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while not answers():
            if time.monotonic() > deadline:
                raise RuntimeError(f"podman system service did not answer on {socket_path} within {timeout:g} s")
            time.sleep(0.2)
    return socket_path
