"""Run the undercloud service: in the foreground (`serve`) or as a background process.

The CLI is a client of the service. When no service answers, `ensure_running` starts one
in the background on the embedded defaults; a lock file keeps two CLIs from starting two.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

from undercloud.config import Home
from undercloud.errors import ServiceUnavailable

START_TIMEOUT = 30.0


def url(home: Home) -> str | None:
    path = home.file("port")
    return f"http://127.0.0.1:{path.read_text().strip()}" if path.exists() else None


def pid(home: Home) -> int | None:
    path = home.file("service.pid")
    try:
        value = int(path.read_text().strip())
        os.kill(value, 0)
        return value
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None


def health(home: Home, timeout: float = 2.0) -> dict | None:
    base = url(home)
    if not base:
        return None
    try:
        r = httpx.get(base + "/v1/health", timeout=timeout)
        data = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    # Another instance may own this port after a stale pid file: check it is ours.
    if data and data.get("home") != str(home.path):
        return None
    return data


@contextmanager
def _start_lock(home: Home):
    home.ensure()
    with open(home.file("service.lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def start(home: Home, db_url: str | None = None) -> tuple[dict, bool]:
    """Start the service in the background unless it runs; returns (health, started)."""
    with _start_lock(home):
        h = health(home)
        if h:
            return h, False
        log = open(home.file("service.log"), "ab")
        env = dict(os.environ, UNDERCLOUD_HOME=str(home.path))
        if db_url:
            env["UNDERCLOUD_DB"] = db_url
        proc = subprocess.Popen(
            [sys.executable, "-m", "undercloud", "serve"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ServiceUnavailable(
                    f"the undercloud service exited at start (code {proc.returncode}); "
                    f"see {home.file('service.log')}"
                )
            h = health(home, timeout=0.5)
            if h:
                return h, True
            time.sleep(0.1)
        raise ServiceUnavailable(
            f"the undercloud service did not answer within {START_TIMEOUT:.0f} s; "
            f"see {home.file('service.log')}"
        )


def stop(home: Home, timeout: float = 30.0) -> int | None:
    """Stop the service; returns the pid it had, or None when none was running."""
    p = pid(home)
    if p is None:
        return None
    os.kill(p, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(p, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(p, signal.SIGKILL)
    home.file("service.pid").unlink(missing_ok=True)
    return p


def _is_stderr(path: Path) -> bool:
    try:
        a, b = os.fstat(2), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def serve(home: Home, db_url: str | None = None, host: str = "127.0.0.1") -> None:
    """Run the service in the foreground until SIGTERM/SIGINT."""
    import logging

    import uvicorn

    from undercloud.api.app import create_app, run_startup
    from undercloud.api.context import Context, api_port

    home.ensure()
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if not _is_stderr(home.file("service.log")):  # e.g. under systemd: the journal, and the home's log
        handlers.append(logging.FileHandler(home.file("service.log")))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        handlers=handlers)
    ctx = Context(home, db_url)
    _ = ctx.admin_token  # created before any client needs it
    port = api_port(home)
    home.file("service.pid").write_text(str(os.getpid()))
    Path(home.file("service.json")).write_text(json.dumps({"pid": os.getpid(), "port": port}))
    stops = run_startup(ctx)
    logging.getLogger("undercloud.service").info("serving %s on http://%s:%d (pid %d)", home.path, host, port,
                                                 os.getpid())
    # log_config=None: uvicorn's own warnings go through the handlers above
    config = uvicorn.Config(create_app(ctx), host=host, port=port, log_level="warning", access_log=False,
                            log_config=None)
    server = uvicorn.Server(config)
    try:
        server.run()
    finally:
        ctx.stopping.set()
        for fn in stops:
            fn()
        if pid(home) == os.getpid():
            home.file("service.pid").unlink(missing_ok=True)
