"""Shared fixtures: isolated undercloud homes, a running service, and skip helpers."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = (REPO.parent / "shared").resolve()  # as the engine names files: a symlinked ../shared too
CORPUS = SHARED / "corpus" / "heat-templates"
# The store the tests use: "sqlite" (a file per test), or "postgresql" (a database per test on a
# server this run starts: tests/pg_support.py). scripts/test runs the store-heavy suites on both.
TEST_STORE = os.environ.get("UNDERCLOUD_TEST_STORE", "sqlite")
if TEST_STORE not in ("sqlite", "postgresql"):
    raise pytest.UsageError(f"UNDERCLOUD_TEST_STORE={TEST_STORE!r}: sqlite or postgresql")


# A case the default run leaves out because another test already walks the same path through
# our code (named in the reason), and it costs minutes of emulated boot: the CI's 90 minutes.
# UNDERCLOUD_TEST_EXTENDED=1 runs them too.
EXTENDED = os.environ.get("UNDERCLOUD_TEST_EXTENDED") == "1"


def extended(covered_by: str):
    return pytest.mark.skipif(not EXTENDED, reason=f"extended case, its path covered by {covered_by}; "
                                                   "UNDERCLOUD_TEST_EXTENDED=1 runs it")


def own_store_url(sqlite_file: Path) -> str:
    """The test's own store: the SQLite file given, or the test's PostgreSQL database."""
    return os.environ["UNDERCLOUD_DB"] if TEST_STORE == "postgresql" else f"sqlite:///{sqlite_file}"


@pytest.fixture(scope="session")
def _pg_server():
    from tests import pg_support

    reason = pg_support.why_not()
    if reason:
        pytest.fail(f"UNDERCLOUD_TEST_STORE=postgresql, but {reason}", pytrace=False)
    server = pg_support.Server(Path("/tmp"))  # a directory the postgres user can reach
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _test_store(request, monkeypatch):
    """With UNDERCLOUD_TEST_STORE=postgresql every test gets a new, empty database as its
    UNDERCLOUD_DB (homes, services and own_store_url() use it); dropped after the test. It is
    a copy of a migrated one (as a new store is after its first open), or, for a test marked
    `empty_database` (the migrations' own tests), empty."""
    if TEST_STORE != "postgresql":
        yield
        return
    server = request.getfixturevalue("_pg_server")
    url = server.new_database(migrated=request.node.get_closest_marker("empty_database") is None)
    monkeypatch.setenv("UNDERCLOUD_DB", url)
    yield
    server.drop_database(url)


@pytest.fixture
def uc_home(tmp_path, monkeypatch):
    """An isolated UNDERCLOUD_HOME; its service (if one was started) is stopped after."""
    from undercloud.config import Home

    home = tmp_path / "uc"
    monkeypatch.setenv("UNDERCLOUD_HOME", str(home))
    if TEST_STORE == "sqlite":
        monkeypatch.delenv("UNDERCLOUD_DB", raising=False)
    yield Home(home)
    stop_service(Home(home))


def _ended(pid: int) -> bool:
    """Whether `pid` has ended: gone, or a zombie. The service a CLI started in the background
    is an orphan, and this machine's init reaps orphans only every second or two: daemon.stop
    (which waits for the pid to go) would wait that out at every test's end."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def stop_service(home) -> None:
    """A test's teardown: the home's service stopped as daemon.stop does (SIGTERM: its stop
    hooks run; SIGKILL after 30 s), without waiting for init to reap it."""
    from undercloud import daemon

    p = daemon.pid(home)
    if p is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(p, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while not _ended(p):
        if time.monotonic() > deadline:
            os.kill(p, signal.SIGKILL)
            break
        time.sleep(0.02)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(p, os.WNOHANG)  # one this process started: reaped here
    home.file("service.pid").unlink(missing_ok=True)


# The in-process API's base URL (fastapi TestClient): the app as the service serves it over TLS
# (the guard refuses the admin token on plain HTTP).
HTTPS = "https://testserver"


def run_cli(*args: str, input: str | None = None, env: dict | None = None, timeout: float = 120):
    """Run the real `undercloud` command in a subprocess; returns CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "undercloud", *args], capture_output=True, text=True,
        input=input, env={**os.environ, **(env or {})}, timeout=timeout,
    )


def free_port() -> int:
    """A loopback TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need(tool: str) -> None:
    if not shutil.which(tool):
        pytest.skip(f"{tool} is not installed")


def address_table(home):
    """The address table of a home's store (store/addresses.py), as its service has it."""
    from undercloud.store import Store
    from undercloud.store.addresses import AddressTable

    return AddressTable(Store(home.db_url, home.store_key_file()).create_schema())


def lab_addresses(home, network: str | None = None) -> dict[str, str]:
    """{address: holder} of a home's network in the address table (default: the VM and
    bare-metal lab network)."""
    from undercloud.provisioning.servers.vm_net import lab_network_key

    table = address_table(home)
    try:
        return table.on(network or lab_network_key(home))
    finally:
        table.store.engine.dispose()


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
