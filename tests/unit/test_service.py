"""The service lifecycle through the real CLI: start, status, auto-start, stop."""

import datetime
import json
import os
import socket

import pytest

from tests.conftest import free_port, run_cli
from undercloud.errors import UndercloudError
from undercloud.store.db import driver_url


def test_status_when_not_running_exits_3(uc_home):
    r = run_cli("service", "status")
    assert r.returncode == 3
    assert "not running" in r.stderr


def test_start_status_stop(uc_home):
    r = run_cli("service", "start", "-f", "json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["home"] == str(uc_home.path)
    assert info["url"].startswith("https://127.0.0.1:")
    port = (uc_home.path / "port").read_text()
    # the CA the URL is verified with: the home's, its key private
    assert info["ca"] == str(uc_home.ca_file) and (uc_home.tls_dir / "ca.key").stat().st_mode & 0o077 == 0

    r = run_cli("service", "status", "-f", "json")
    status = json.loads(r.stdout)
    assert status["pid"] == info["pid"] and status["status"] == "running"
    assert (status["url"], status["ca"]) == (info["url"], info["ca"])
    assert status["certificate_expires"] > datetime.datetime.now(datetime.UTC).isoformat()
    # the store as given (a plain postgresql:// URL when the run tests PostgreSQL)
    assert status["store"] == os.environ.get("UNDERCLOUD_DB", f"sqlite:///{uc_home.path / 'undercloud.db'}")

    r = run_cli("service", "start")
    assert "already running" in r.stderr

    assert run_cli("service", "stop").returncode == 0
    assert run_cli("service", "status").returncode == 3
    # the port is kept across restarts: nodes hold this address
    r = run_cli("service", "start", "-f", "json")
    assert json.loads(r.stdout)["url"].endswith(":" + port)


def test_admin_token_is_private_and_required(uc_home):
    import httpx

    info = json.loads(run_cli("service", "start", "-f", "json").stdout)
    token = uc_home.path / "admin.token"
    assert token.stat().st_mode & 0o077 == 0
    assert info["url"].startswith("https://") and info["ca"] == str(uc_home.ca_file)
    assert httpx.get(info["url"] + "/v1/health", verify=info["ca"]).status_code == 200


def test_bad_db_url_is_one_line(uc_home):
    r = run_cli("service", "start", "--db", "nosuchdb://x")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr


def test_help_on_every_level():
    for args in (["--help"], ["service", "--help"], ["service", "start", "--help"], ["serve", "--help"]):
        r = run_cli(*args)
        assert r.returncode == 0 and "Usage:" in r.stdout


def test_a_postgresql_url_as_users_write_it_means_psycopg():
    assert driver_url("postgresql://uc@db.example:5433/uc").drivername == "postgresql+psycopg"
    assert driver_url("postgres://uc@db/uc").drivername == "postgresql+psycopg"
    assert driver_url("postgresql+psycopg2://uc@db/uc").drivername == "postgresql+psycopg2"  # named: kept
    assert driver_url("sqlite:////tmp/uc.db").drivername == "sqlite"


@pytest.mark.timeout(120)  # a hang fails here, not forever
def test_a_postgresql_that_never_answers_is_an_error_not_a_hang(tmp_path):
    """A store on another host that stops answering (a hypervisor host's worker reaches it over
    the network): libpq's connect timeout and TCP keepalives, yours from the URL winning."""
    from undercloud.store import Store

    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)  # connections are accepted by the kernel; nothing is ever said on them
    port = mute.getsockname()[1]
    try:
        default = Store(f"postgresql://uc:pw@127.0.0.1:{port}/uc", key_file=tmp_path / "k")
        assert default.connect_args["connect_timeout"] == 10 and default.connect_args["keepalives"] == 1
        assert default.connect_args["tcp_user_timeout"] == 30000
        store = Store(f"postgresql://uc:pw@127.0.0.1:{port}/uc?connect_timeout=2", key_file=tmp_path / "k")
        assert "connect_timeout" not in store.connect_args  # the URL's own
        with pytest.raises(UndercloudError, match=r"^cannot open store postgresql://uc:\*\*\*@127.0.0.1"):
            store.create_schema()
    finally:
        mute.close()


def test_an_unreachable_postgresql_is_one_line_without_the_password(uc_home):
    port = free_port()
    r = run_cli("service", "start", "--db", f"postgresql://uc:hunter2-secret@127.0.0.1:{port}/uc")
    assert r.returncode == 1
    line, = r.stderr.strip().splitlines()
    assert f"cannot open store postgresql://uc:***@127.0.0.1:{port}/uc: connection failed" in line, line
    assert "hunter2" not in r.stderr + (uc_home.path / "service.log").read_text()
    assert run_cli("service", "status").returncode == 3


def test_a_failed_start_is_explained_only_by_what_it_wrote(uc_home):
    from undercloud import daemon

    log = uc_home.ensure().file("service.log")
    log.write_text("error: the reason of an earlier start\n")
    since = log.stat().st_size
    with log.open("a") as f:
        f.write("Traceback (most recent call last):\nValueError: x\n")
    assert daemon._why(uc_home, since) == ""  # this start gave no one-line reason
    with log.open("a") as f:
        f.write("error: cannot open store sqlite:///x: disk I/O error\n")
    assert daemon._why(uc_home, since) == ": cannot open store sqlite:///x: disk I/O error"


def test_stop_reaps_a_service_this_process_started(uc_home):
    # A long-lived caller (tests, benchmarks) is the service's parent: stop() must reap it, not
    # wait its whole timeout on a zombie and then SIGKILL it.
    from pathlib import Path

    from undercloud import daemon

    health, started = daemon.start(uc_home)
    assert started
    pid = daemon.stop(uc_home, timeout=120)
    assert pid == health["pid"]
    assert not Path(f"/proc/{pid}").exists()  # gone, not a zombie
