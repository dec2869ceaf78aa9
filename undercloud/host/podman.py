"""podman as this project uses it: runc as runtime and explicit ulimits.

crun fails on hosts with hybrid cgroups and the default nofile limit cannot be raised on
every host (see ../shared/ENVIRONMENT.md), so every podman call gets CONTAINERS_CONF
pointing at this user's copy of the agent's settings (`conf_path()`).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from undercloud.agent.files import write_atomic
from undercloud.agent.kube import CONTAINERS_CONF
from undercloud.host.run import require, run

CONF = CONTAINERS_CONF  # the agent's, so nodes and this host run podman alike


def conf_path() -> Path:
    """This user's copy: under a directory only they write (a fixed name in the shared /tmp
    could be a symlink planted by another user)."""
    if os.geteuid() == 0:
        return Path("/run/undercloud/containers.conf")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return (Path(runtime) if runtime else Path.home() / ".cache") / "undercloud" / "containers.conf"


def env() -> dict:
    """The environment for podman (and `podman kube play`) calls."""
    path = conf_path()
    if not path.exists() or path.read_text() != CONF:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(path, CONF, 0o644)
    return dict(os.environ, CONTAINERS_CONF=str(path))


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


def network_backend() -> str:
    """podman's network backend here (or, with CONTAINER_HOST, on the host it drives):
    netavark or cni."""
    return podman("info", "--format", "{{.Host.NetworkBackend}}", timeout=30).stdout.strip()


def image_exists(ref: str) -> bool:
    return podman("image", "exists", ref, check=False).returncode == 0


def argv(*args: str) -> Sequence[str]:
    return ["podman", *args]


API_SOCKET = Path("/run/podman/podman.sock")


def _cwd_deleted(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/cwd").endswith(" (deleted)")
    except OSError:  # gone, or not ours to read
        return False


def _stale_services(socket_path: Path) -> list[int]:
    """The podman API services on `socket_path` whose working directory was removed (one an
    older version started in a checkout since deleted): they answer but start nothing."""
    want = f"unix://{socket_path}"
    stale = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"system" in argv and b"service" in argv and want.encode() in argv and _cwd_deleted(int(proc.name)):
            stale.append(int(proc.name))
    return stale


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

    if answers() and not _stale_services(socket_path):
        return socket_path
    require("podman", "podman")
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    # Several undercloud services (homes) may start at once: one starts it, the others wait.
    with open(socket_path.parent / f"{socket_path.name}.undercloud-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for pid in _stale_services(socket_path):
            os.kill(pid, signal.SIGTERM)  # it answers pings but can no longer start a container
            for _ in range(50):
                if not _cwd_deleted(pid):
                    break
                time.sleep(0.1)
        if answers():
            return socket_path
        # cwd "/": a directory the caller runs in (a checkout, a test's) may be removed while
        # the service lives on, and then conmon fails every start ("write child: broken pipe")
        subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{socket_path}"], env=env(),
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, cwd="/")
        deadline = time.monotonic() + timeout
        while not answers():
            if time.monotonic() > deadline:
                raise RuntimeError(f"podman system service did not answer on {socket_path} within {timeout:g} s")
            time.sleep(0.2)
    return socket_path
