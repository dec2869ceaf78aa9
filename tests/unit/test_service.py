"""The service lifecycle through the real CLI: start, status, auto-start, stop."""

import json

from tests.conftest import run_cli


def test_status_when_not_running_exits_3(uc_home):
    r = run_cli("service", "status")
    assert r.returncode == 3
    assert "not running" in r.stderr


def test_start_status_stop(uc_home):
    r = run_cli("service", "start", "-f", "json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["home"] == str(uc_home.path)
    assert info["url"].startswith("http://127.0.0.1:")
    port = (uc_home.path / "port").read_text()

    r = run_cli("service", "status", "-f", "json")
    status = json.loads(r.stdout)
    assert status["pid"] == info["pid"] and status["status"] == "running"

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
    assert httpx.get(info["url"] + "/v1/health").status_code == 200


def test_bad_db_url_is_one_line(uc_home):
    r = run_cli("service", "start", "--db", "nosuchdb://x")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr


def test_help_on_every_level():
    for args in (["--help"], ["service", "--help"], ["service", "start", "--help"], ["serve", "--help"]):
        r = run_cli(*args)
        assert r.returncode == 0 and "Usage:" in r.stdout
