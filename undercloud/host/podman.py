"""podman as this project uses it: runc as runtime and explicit ulimits.

crun fails on hosts with hybrid cgroups and the default nofile limit cannot be raised on
every host (see ../shared/ENVIRONMENT.md), so every podman call gets CONTAINERS_CONF
pointing at this user's copy of the agent's settings (`conf_path()`).
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from undercloud.agent.engine import API_FAILED_SUFFIX, CONTAINERS_CONF, RLIMITS
from undercloud.agent.files import write_atomic
from undercloud.host.run import CommandFailed, require, run

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


# `rm -f` racing a container that exits by itself: podman's SIGKILL finds it already
# stopped and gives up, and the same call a moment later removes it.
_RM_RACE = ("could not be stopped", "container state improper")


def remove(*names: str, depend: bool = False, attempts: int = 3) -> None:
    """Remove containers (`rm -f -t 0`), retrying podman's stop race; gone ones are fine."""
    argv = ["rm", "-f", "-t", "0", "--ignore", *(["--depend"] if depend else []), *names]
    for attempt in range(attempts):
        try:
            podman(*argv, timeout=120)
            return
        except CommandFailed as exc:
            if attempt + 1 == attempts or not any(w in exc.message for w in _RM_RACE):
                raise
            time.sleep(1)


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
        # never as a remote client: with CONTAINER_HOST set (e.g. the kube hook's, in-process)
        # podman refuses `system service` ("accepts at most 1 arg(s)")
        local = {k: v for k, v in env().items() if k not in ("CONTAINER_HOST", "CONTAINER_CONNECTION")}
        subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{socket_path}"], env=local,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, cwd="/")
        deadline = time.monotonic() + timeout
        while not answers():
            if time.monotonic() > deadline:
                raise RuntimeError(f"podman system service did not answer on {socket_path} within {timeout:g} s")
            time.sleep(0.2)
    return socket_path


# --- the API service watched like a service ----------------------------------------------
# It once began failing every container start ("error setting rlimit type 7: operation not
# permitted") while `podman run` worked and `_ping` answered; nothing noticed, and every
# later deploy step failed. ApiWatch looks at it as a service manager would: a ping (cheap)
# at every look, a container start of its own (the call that broke) now and then and at
# once when a container node reports that a real call failed (agent/netns.py writes
# `<socket>.failed`), and restarts it when it has gone bad.

PING_TIMEOUT = 5.0
WEDGED_AFTER = 3  # pings in a row without an answer (a busy service answers late, not never)
CANARY_EVERY = 600.0  # seconds between container starts of its own when nothing is reported
RESTART_GAP = 120.0  # a service still bad this soon after a restart is not restarted again
CANARY_LABEL = "undercloud.canary"


def _ping(socket_path: Path, timeout: float | None = None) -> str | None:
    """None when the service answers `_ping`; else "dead: ..." (nothing listens) or why not."""
    import socket

    timeout = PING_TIMEOUT if timeout is None else timeout
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(socket_path))
            s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
            head = s.recv(64)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        return f"dead: {exc.strerror or exc}"
    except TimeoutError:
        return f"no answer to a ping within {timeout:g} s"
    except OSError as exc:
        return f"ping failed: {exc.strerror or exc}"
    return None if b" 200 " in head else f"ping answered {head[:40]!r}"


def _services(socket_path: Path) -> list[int]:
    """The `podman system service` processes serving `socket_path`."""
    want = f"unix://{socket_path}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"system" in argv and b"service" in argv and want in argv:
                found.append(int(proc.name))
    return found


def restart_api_service(socket_path: Path = API_SOCKET, timeout: float = 30) -> list[int]:
    """Stop the services on `socket_path` (TERM, then KILL: a wedged one may not answer TERM)
    and start a fresh one; returns the pids stopped."""
    pids = _services(socket_path)
    if not pids and not (_ping(socket_path) or "").startswith("dead"):
        # something listens that is no service of ours (systemd's podman.socket?): its owner restarts it
        raise RuntimeError(f"no `podman system service` process serves {socket_path}: restart it where it was started")
    for pid in pids:
        for sig in (signal.SIGTERM, signal.SIGCONT):  # CONT: a stopped process handles its TERM
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(FileNotFoundError):
        socket_path.unlink()  # a dead service's socket file: nothing answers on it
    api_service(socket_path, timeout=timeout)
    return pids


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


class ApiWatch:
    """Watches the podman API service on one socket (see above). `image()` names a local
    image the container start of its own may use (None: none known, ping only). `look()`
    is called every few seconds; `status` is what health reports show."""

    def __init__(self, socket_path: Path = API_SOCKET, image: Callable[[], str | None] = lambda: None,
                 log: logging.Logger | None = None):
        self.socket_path = socket_path
        self.image = image
        self.log = log or logging.getLogger("undercloud.podman")
        self.unanswered = 0
        self.next_canary = time.monotonic() + CANARY_EVERY
        self.last_restart: float | None = None
        self.said_failing = False
        self.status: dict = {"socket": str(socket_path), "state": "ok", "restarts": 0}

    @property
    def reported(self) -> Path:
        return Path(str(self.socket_path) + API_FAILED_SUFFIX)

    def _report(self) -> dict | None:
        try:
            got = json.loads(self.reported.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            got = {}
        return got if isinstance(got, dict) else {}

    def canary(self, image: str) -> str | None:
        """Start a container (`sh -c "exit 0"`) through the API, as the kube hook does (runc,
        explicit ulimits): None when it ran, else what failed. A missing image, or one
        without sh, is no verdict (None)."""
        from undercloud.agent.libpod import PodmanAPI

        api = PodmanAPI(str(self.socket_path))
        name = f"undercloud-canary-{os.getpid()}"
        api.call("DELETE", f"/containers/{name}?force=true&timeout=0", timeout=30)
        status, data = api.call("POST", "/containers/create", {
            "name": name, "image": image, "entrypoint": ["sh", "-c", "exit 0"], "command": [], "netns": {"nsmode": "none"},
            "oci_runtime": "runc", "r_limits": RLIMITS, "labels": {CANARY_LABEL: "1"}}, timeout=60)
        if status == 404:
            return None
        try:
            if status >= 300:
                return f"container create: HTTP {status}: {_message(data)}"
            status, data = api.call("POST", f"/containers/{name}/start", timeout=60)
            if status >= 300 and "executable file not found" not in _message(data):
                return f"container start: HTTP {status}: {_message(data)}"
            # (an image without sh is no verdict: the runtime got as far as running a command)
            api.call("POST", f"/containers/{name}/wait?condition=stopped", timeout=60)
            return None
        finally:
            api.call("DELETE", f"/containers/{name}?force=true&timeout=0", timeout=30)

    def look(self) -> str | None:
        """One look; restarts the service when it has gone bad. Returns what was wrong, if anything."""
        report = self._report()
        problem = _ping(self.socket_path)
        if problem and not problem.startswith("dead"):
            self.unanswered += 1
            wedged = self.unanswered >= WEDGED_AFTER or report is not None
            problem = f"{problem} ({self.unanswered} in a row)" if wedged else None
        else:
            self.unanswered = 0
        if problem is None and (report is not None or time.monotonic() >= self.next_canary):
            self.next_canary = time.monotonic() + CANARY_EVERY
            image = (report or {}).get("image") or self.image()
            try:
                problem = self.canary(image) if image else None
            except (OSError, http.client.HTTPException) as exc:  # it stopped answering in between
                problem = f"container start: {getattr(exc, 'strerror', None) or exc!r}"
        if problem is None:
            self.status["state"] = "ok"
            self.said_failing = False
        else:
            self._restart(problem, report)
        if report is not None:
            self.reported.unlink(missing_ok=True)  # handled: the node retries its call now
        return problem

    def summary(self) -> str:
        """One line for listings: ok, or restarted N times / failing, with the last reason."""
        st = self.status
        if st["state"] == "ok" and not st["restarts"]:
            return "podman API ok"
        when = time.strftime("%H:%M:%S", time.localtime(st["restarted_at"])) if st.get("restarted_at") else ""
        restarted = f"restarted {st['restarts']}x (last {when}: {st.get('reason', '')})" if st["restarts"] else ""
        if st["state"] == "failing":
            return f"podman API FAILING: {st.get('reason', '')}" + (f"; {restarted}" if restarted else "")
        return f"podman API ok, {restarted}"

    def _restart(self, problem: str, report: dict | None) -> None:
        why = problem + (f"; a node's call failed: {str(report.get('error', ''))[:200]}" if report else "")
        if self.last_restart is not None and time.monotonic() - self.last_restart < RESTART_GAP:
            if not self.said_failing:  # once, not at every look
                self.log.warning("podman API service on %s still bad after its restart: %s", self.socket_path, why)
                self.said_failing = True
            self.status.update(state="failing", reason=why)
            return
        self.last_restart = time.monotonic()
        try:
            stopped = restart_api_service(self.socket_path)
        except (RuntimeError, OSError, CommandFailed) as exc:
            self.log.warning("podman API service on %s is bad (%s) and could not be restarted: %s",
                             self.socket_path, why, exc)
            self.status.update(state="failing", reason=f"{why}; restart failed: {exc}")
            return
        self.unanswered = 0
        self.status["restarts"] += 1
        self.status.update(state="restarted", reason=why, restarted_at=time.time())
        self.log.warning("podman API service on %s restarted (%s): %s", self.socket_path,
                         f"stopped pid {', '.join(map(str, stopped))}" if stopped else "its process was gone", why)


def _message(data: bytes) -> str:
    try:
        return str(json.loads(data).get("message") or "")[:300]
    except (ValueError, AttributeError):
        return data.decode(errors="replace")[:300]
