"""Run the undercloud service: in the foreground (`serve`) or as a background process.

The CLI is a client of the service. When no service answers, `start` starts one in the
background on the embedded defaults; a lock file keeps two CLIs from starting two.

One service per home: `serve` holds `serve.lock` (flock, with its pid in it) for its whole
life, taken before it opens the store or resumes anything. A second `serve` on the home
exits at once and touches nothing; the CLI, finding the lock held by a service that does
not answer (yet), waits for it instead of starting another.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import http.client
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from undercloud.agent.files import write_atomic
from undercloud.config import Home, connection, private_file
from undercloud.errors import InvalidInput, ServiceUnavailable, UndercloudError

START_TIMEOUT = 30.0
# `serve`'s exit status when another service holds the home. The systemd unit does not
# restart on it (RestartPreventExitStatus): a unit started while a CLI-started service runs
# fails once with the line naming that pid, instead of restarting every few seconds.
HOME_HELD = 73


class HomeHeld(UndercloudError):
    exit_code = HOME_HELD


def url(home: Home) -> str | None:
    path = home.file("port")
    return f"https://127.0.0.1:{path.read_text().strip()}" if path.exists() else None



def pid(home: Home) -> int | None:
    """The running service's pid: the serve lock's holder, else the pid file's (older services)."""
    held = serving(home)
    if held and held > 0:
        return held
    path = home.file("service.pid")
    try:
        value = int(path.read_text().strip())
        os.kill(value, 0)
        return value
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None


def health(home: Home, timeout: float = 2.0, details: bool = True) -> dict | None:
    """The running service's health (pid, home, store, uptime; without `details` status and
    version), or None when none answers or the one answering is not this home's (another
    instance may own the port after a stale pid file). Which it is, is asked first without
    the token: the service proves it holds this home's admin token (an HMAC of a fresh
    challenge), and only then gets it, for the details."""
    base = url(home)
    if not base:
        return None
    token = home.admin_token()
    challenge = secrets.token_hex(16)
    proof = _get_health(home, base, {"X-Undercloud-Challenge": challenge}, timeout)
    if not proof or not hmac.compare_digest(str(proof.get("proof", "")), health_proof(token, challenge)):
        return None
    if not details:
        return proof
    data = _get_health(home, base, {"X-Undercloud-Token": token}, timeout)
    return data if data and data.get("home") == str(home.path) else None


def health_proof(token: str, challenge: str) -> str:
    """What a service holding `token` answers to a health `challenge` (api/app.py)."""
    return hmac.new(token.encode(), b"undercloud health " + challenge.encode(), hashlib.sha256).hexdigest()


def _get_health(home: Home, base: str, headers: dict, timeout: float) -> dict | None:
    try:
        conn = connection(base, home.ca_file, timeout)
    except ServiceUnavailable:
        return None
    try:
        conn.request("GET", "/v1/health", headers=headers)
        r = conn.getresponse()
        data = json.loads(r.read()) if r.status == 200 else None
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    return data if isinstance(data, dict) else None


def serving(home: Home) -> int | None:
    """The pid of the service holding this home's serve lock, or None when none holds it."""
    try:
        fd = os.open(home.file("serve.lock"), os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            return int(os.pread(fd, 32, 0).decode().strip() or 0) or -1
        except ValueError:
            return -1
    finally:
        os.close(fd)  # also drops the shared lock, if we got it
    return None


def _hold_serve_lock(home: Home) -> int:
    """Take the home's serve lock for the life of this process; one line if another holds it."""
    fd = private_file(home.file("serve.lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        other = serving(home)
        raise HomeHeld(f"another undercloud service runs for {home.path}"
                              f"{f' (pid {other})' if other and other > 0 else ''}; "
                              f"stop it first (undercloud service stop)") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


@contextmanager
def _start_lock(home: Home):
    home.ensure()
    with open(home.file("service.lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def start(home: Home, db_url: str | None = None, details: bool = True) -> tuple[dict, bool]:
    """Start the service in the background unless it runs; returns (health, started): with
    its details when started, or asked for (one more request)."""
    with _start_lock(home):
        h = health(home, details=details)
        if h:
            return h, False
        running = serving(home)
        if running:  # alive but slow to answer (busy, or still starting): never start a second one
            h = _wait_health(home, None, running)
            return h, False
        log = os.fdopen(private_file(home.file("service.log")), "ab")
        since = log.seek(0, os.SEEK_END)  # what this start writes comes after
        env = dict(os.environ, UNDERCLOUD_HOME=str(home.path))
        if db_url:
            env["UNDERCLOUD_DB"] = db_url
        proc = subprocess.Popen(
            [sys.executable, "-m", "undercloud", "serve"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True,
        )
        log.close()
        return _wait_health(home, proc, proc.pid, since), True


def _why(home: Home, since: int) -> str:
    """The one-line reason a service that failed at start gave (its CLI's `error: ...`), from
    what it wrote to the log after `since`."""
    try:
        with open(home.file("service.log"), "rb") as f:
            f.seek(max(since, f.seek(0, os.SEEK_END) - 4096))
            last = f.read().decode(errors="replace").strip().splitlines()[-1:]
    except OSError:
        return ""
    return f": {last[0].removeprefix('error: ')}" if last and last[0].startswith("error: ") else ""


def _wait_health(home: Home, proc: subprocess.Popen | None, pid_: int, since: int = 0) -> dict:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServiceUnavailable(
                f"the undercloud service exited at start (code {proc.returncode}){_why(home, since)}; "
                f"see {home.file('service.log')}"
            )
        if proc is None and not serving(home):
            raise ServiceUnavailable(f"the undercloud service (pid {pid_}) stopped; see {home.file('service.log')}")
        h = health(home, timeout=0.5)
        if h:
            return h
        time.sleep(0.1)
    what = "did not answer" if proc is not None else f"(pid {pid_}) runs but did not answer"
    raise ServiceUnavailable(
        f"the undercloud service {what} within {START_TIMEOUT:.0f} s; see {home.file('service.log')}"
    )


def _exited(p: int) -> bool:
    """Whether process `p` has ended. When this process started it (tests, benchmarks, any
    long-lived caller of start()), it is reaped here: an unreaped child stays a zombie, which
    signal 0 still finds."""
    try:
        if os.waitpid(p, os.WNOHANG)[0] == p:
            return True
    except ChildProcessError:  # not our child
        pass
    try:
        os.kill(p, 0)
    except ProcessLookupError:
        return True
    # A zombie has ended: it only waits for its parent (for an orphan, an init that may reap
    # every second or two) and holds no port, lock or file.
    try:
        with open(f"/proc/{p}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def stop(home: Home, timeout: float = 30.0) -> int | None:
    """Stop the service; returns the pid it had, or None when none was running."""
    p = pid(home)
    if p is None:
        return None
    os.kill(p, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _exited(p):
            break
        time.sleep(0.05)
    else:
        os.kill(p, signal.SIGKILL)
        _exited(p)
    home.file("service.pid").unlink(missing_ok=True)
    return p


def _is_stderr(path: Path) -> bool:
    try:
        a, b = os.fstat(2), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def check_worker(home: Home, db_url: str | None) -> None:
    """A worker joins a store that exists: named explicitly, opened with its key."""
    if not (db_url or os.environ.get("UNDERCLOUD_DB")):
        raise InvalidInput("a worker joins the store of another service: give it with --db URL "
                           "(or UNDERCLOUD_DB)", where="--worker")
    key = os.environ.get("UNDERCLOUD_STORE_KEY")
    if not key and not home.file("store.key").exists():
        raise InvalidInput("a worker needs the store's key: set UNDERCLOUD_STORE_KEY to a copy of the first "
                           "service's store.key (mode 600)", where="--worker")


def _exit_cleanly(_signum, _frame) -> None:
    raise SystemExit(0)


def serve(home: Home, db_url: str | None = None, host: str = "127.0.0.1", hypervisor_only: bool = False) -> None:
    """Run the service in the foreground until SIGTERM/SIGINT, its API on `host`."""
    import logging

    import uvicorn

    from undercloud import gc_settings

    gc_settings.apply()  # stacks' template trees: few full collections (gc_settings.py)

    from undercloud.api.app import create_app, run_startup  # the service itself: only here
    from undercloud.api.context import Context
    from undercloud.api.tls_port import http_protocol
    from undercloud.provisioning.servers.placement import local_types

    local_types()  # a bad UNDERCLOUD_HYPERVISOR_TYPES is one line, before anything starts

    home.ensure()
    _lock = _hold_serve_lock(home)  # noqa: F841 - held (open) until the process exits
    fixed = home.secure()
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if not _is_stderr(home.file("service.log")):  # e.g. under systemd: the journal, and the home's log
        os.close(private_file(home.file("service.log")))
        handlers.append(logging.FileHandler(home.file("service.log")))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        handlers=handlers)
    if fixed:
        logging.getLogger("undercloud.service").warning("made private (owner only): %s", ", ".join(fixed))
    ctx = Context(home, db_url, listen=host, hypervisor_only=hypervisor_only)
    _ = ctx.admin_token  # created before any client needs it
    _ = ctx.tls  # the CA and the certificate: before a client is told where the service is
    port = home.api_port()
    # whole or not at all: the CLI reads them to find this service
    write_atomic(home.file("service.pid"), str(os.getpid()))
    write_atomic(home.file("service.json"), json.dumps({"pid": os.getpid(), "port": port}))
    stops = run_startup(ctx)
    # The CLI of this home talks to 127.0.0.1: an address of its own is served besides it.
    bind = host if host in ("0.0.0.0", "127.0.0.1") else "127.0.0.1"
    if bind != host:
        ctx.listeners.listen(host, guests=False)  # the whole API: where the operator and other workers call
    logging.getLogger("undercloud.service").info("serving %s on https://%s:%d (pid %d; CA %s)", home.path, host,
                                                 port, os.getpid(), home.ca_file)
    # log_config=None: uvicorn's own warnings go through the handlers above
    config = uvicorn.Config(create_app(ctx), host=bind, port=port, log_level="warning", access_log=False,
                            log_config=None, http=http_protocol(ctx.tls))

    class Server(uvicorn.Server):
        async def shutdown(self, sockets=None):
            ctx.server_metadata.release()  # held long-polls answer now: the stop does not wait out their hold
            await super().shutdown(sockets)

    server = Server(config)
    # uvicorn stops on SIGTERM, then raises the signal again under the handler it found there:
    # make that a clean exit through `finally`, so the stop hooks run (the default kills).
    signal.signal(signal.SIGTERM, _exit_cleanly)
    try:
        server.run()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the stop hooks short
        ctx.stopping.set()
        for fn in stops:
            fn()
        ctx.store.engine.dispose()  # closes the connections: SQLite writes its log back into the file
        if pid(home) == os.getpid():
            home.file("service.pid").unlink(missing_ok=True)
        logging.getLogger("undercloud.service").info("stopped (pid %d)", os.getpid())
