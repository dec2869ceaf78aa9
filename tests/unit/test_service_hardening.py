"""The service process and its home (issue 17): one service per home, private files,
secrets encrypted at rest, one root stack per name, an older store upgraded at start.
Each hostile case ends by checking that the service answers /v1/health within 1 s."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import HTTPS, REPO, run_cli
from undercloud import daemon
from undercloud.config import Home
from undercloud.errors import ServiceUnavailable

SECRET = "bmc-pass-6c1f"
HIDDEN = "hidden-val-93ad"


def start(home: Home) -> dict:
    r = run_cli("service", "start", "-f", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def healthy(url: str, home: Home | None = None) -> dict:
    """The service answers within a second; with `home`, its admin token: the details."""
    t0 = time.monotonic()
    headers = {"X-Undercloud-Token": home.admin_token()} if home else {}
    r = httpx.get(url + "/v1/health", timeout=1.0, headers=headers, verify=str(Home.current().ca_file))
    assert r.status_code == 200 and time.monotonic() - t0 < 1.0
    return r.json()


def client(home: Home, url: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=60, verify=str(home.ca_file),
                        headers={"X-Undercloud-Token": home.file("admin.token").read_text().strip()})


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def raw_store(home: Home) -> bytes:
    """Everything SQLite keeps for the store: the file and its write-ahead log."""
    return b"".join(p.read_bytes() for p in home.path.glob("undercloud.db*"))


# ---- one service per home ------------------------------------------------------------------
def test_a_second_serve_exits_at_once_and_leaves_the_first_alone(uc_home):
    info = start(uc_home)
    pid_file = uc_home.file("service.pid").read_text()
    log_size = uc_home.file("service.log").stat().st_size
    t0 = time.monotonic()
    r = run_cli("serve", timeout=30)
    assert time.monotonic() - t0 < 10
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"another undercloud service runs for {uc_home.path} (pid {info['pid']})" in lines[0]
    assert uc_home.file("service.pid").read_text() == pid_file  # never deleted or rewritten
    assert uc_home.file("service.log").stat().st_size == log_size  # it opened nothing, resumed nothing
    assert daemon.serving(uc_home) == info["pid"]
    assert healthy(info["url"], uc_home)["pid"] == info["pid"]


def test_the_cli_waits_for_a_slow_service_instead_of_starting_another(uc_home, monkeypatch):
    info = start(uc_home)
    os.kill(info["pid"], signal.SIGSTOP)  # alive, holding its lock, answering nothing
    try:
        monkeypatch.setattr(daemon, "START_TIMEOUT", 2.0)
        with pytest.raises(ServiceUnavailable, match=rf"\(pid {info['pid']}\) runs but did not answer"):
            daemon.start(uc_home)
        r = run_cli("service", "status")
        assert r.returncode == 3 and f"running (pid {info['pid']}) but not answering" in r.stderr
    finally:
        os.kill(info["pid"], signal.SIGCONT)
    assert daemon.serving(uc_home) == info["pid"]
    assert uc_home.file("service.log").read_text().count("serving ") == 1  # no second service started
    assert healthy(info["url"], uc_home)["pid"] == info["pid"]
    # and a service that answers late is waited for, not duplicated
    os.kill(info["pid"], signal.SIGSTOP)
    threading.Timer(1.0, os.kill, (info["pid"], signal.SIGCONT)).start()
    monkeypatch.setattr(daemon, "START_TIMEOUT", 20.0)
    h, started = daemon.start(uc_home)
    assert h["pid"] == info["pid"] and not started


# ---- files of the home -----------------------------------------------------------------------
def test_home_and_secret_files_are_private_and_fixed_at_start(uc_home):
    info = start(uc_home)
    assert mode(uc_home.path) == 0o700
    for name in ("undercloud.db", "store.key", "admin.token", "service.log", "serve.lock"):
        assert mode(uc_home.file(name)) == 0o600, name
    for p in uc_home.path.glob("undercloud.db-*"):
        assert mode(p) == 0o600, p.name
    # a home left open by an older version is closed again at the next start
    assert run_cli("service", "stop").returncode == 0
    uc_home.path.chmod(0o755)
    for name in ("undercloud.db", "admin.token", "service.log", "store.key"):
        uc_home.file(name).chmod(0o644)
    info = start(uc_home)
    assert mode(uc_home.path) == 0o700
    for name in ("undercloud.db", "admin.token", "service.log", "store.key"):
        assert mode(uc_home.file(name)) == 0o600, name
    assert "made private (owner only)" in uc_home.file("service.log").read_text()
    healthy(info["url"])


NESTED = """\
heat_template_version: 2018-08-31
parameters:
  pw: {type: string, hidden: true}
resources:
  config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      config: {str_replace: {template: "echo password=$PW", params: {$PW: {get_param: pw}}}}
"""
TOP = """\
heat_template_version: 2018-08-31
parameters:
  pw: {type: string, hidden: true}
resources:
  inner:
    type: nested.yaml
    properties: {pw: {get_param: pw}}
  handle: {type: OS::Heat::WaitConditionHandle}
outputs:
  curl: {value: {get_attr: [handle, curl_cli]}}
"""


def test_secrets_are_encrypted_at_rest_and_never_logged(uc_home):
    info = start(uc_home)
    c = client(uc_home, info["url"])
    nodes = [{"name": f"enc-{i}", "pm_type": "fake", "pm_addr": f"enc-{i}", "pm_user": "admin",
              "pm_password": SECRET} for i in range(3)]
    assert c.post("/v1/nodes/import", json={"content": json.dumps({"nodes": nodes})}).status_code == 201
    bundle = {"template": "top.yaml", "environments": [], "files": {"top.yaml": TOP, "nested.yaml": NESTED}}
    r = c.post("/v1/stacks", json={"name": "enc", "bundle": bundle, "parameters": {"pw": HIDDEN}})
    assert r.status_code == 201, r.text
    deadline = time.monotonic() + 60
    while c.get("/v1/stacks/enc").json()["stack_status"] != "CREATE_COMPLETE":
        assert time.monotonic() < deadline, c.get("/v1/stacks/enc").json()
        time.sleep(0.2)
    # the store, read as the service reads it (with the key), holds them...
    from undercloud.store import Store
    from undercloud.store.stacks import StackResource

    store = Store(uc_home.db_url)
    with store.session() as s:
        token = next(r.data["token"] for r in s.query(StackResource) if r.name == "handle")
        rendered = [r.properties for r in s.query(StackResource) if r.name == "config"]
    assert "password=" + HIDDEN in json.dumps(rendered)
    # ...the file does not: no BMC password, hidden value (root or nested), rendered config or token
    raw = raw_store(uc_home)
    assert raw and b"enc-0" in raw  # names are plain: the search itself works
    for secret in (SECRET, HIDDEN, token):
        assert secret.encode() not in raw, secret
    # a handle's curl command must be shown again: it is (encrypted at rest, not hashed)
    resources = c.get("/v1/stacks/enc/resources").json()
    assert any(r["resource_name"] == "handle" for r in resources)
    log = uc_home.file("service.log").read_text()
    assert SECRET not in log and HIDDEN not in log and token not in log
    # a wrong key is one line at start, and the store is left as it was
    assert run_cli("service", "stop").returncode == 0
    key = uc_home.file("store.key")
    saved = key.read_bytes()
    key.write_bytes(b"r5Wf4B2wzH1DWgX0xvXk3wYx9s5y8QwK3kMZ0jzXcV8=\n")
    r = run_cli("serve", timeout=60)
    assert r.returncode != 0 and "cannot decrypt the store with key file" in r.stderr
    assert "Traceback" not in r.stderr
    key.write_bytes(saved)
    healthy(start(uc_home)["url"])


# ---- one root stack per name -----------------------------------------------------------------
ONE = {"template": "t.yaml", "environments": [],
       "files": {"t.yaml": "heat_template_version: 2018-08-31\nresources:\n  n: {type: OS::Heat::None}\n"}}


def test_concurrent_creates_of_one_name_make_one_stack(uc_home):
    info = start(uc_home)
    c = client(uc_home, info["url"])
    def go(name, barrier, results):
        barrier.wait()
        results.append(c.post("/v1/stacks", json={"name": name, "bundle": ONE}))

    for round_ in range(3):
        name = f"race-{round_}"
        barrier = threading.Barrier(8)
        results: list[httpx.Response] = []
        threads = [threading.Thread(target=go, args=(name, barrier, results)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = sorted(r.status_code for r in results)
        assert codes == [201] + [409] * 7, codes
        for r in results:
            if r.status_code == 409:
                assert r.json()["error"] == f"stack {name!r} already exists"
    assert sorted(s["stack_name"] for s in c.get("/v1/stacks").json()) == ["race-0", "race-1", "race-2"]
    healthy(info["url"])


def test_the_store_refuses_a_second_root_stack_of_a_name_the_engine_did_not_see(tmp_path, monkeypatch):
    """The race made certain: another request's stack appears between the engine's check and its write."""
    from fastapi.testclient import TestClient

    from undercloud.api.app import create_app
    from undercloud.api.context import Context
    from undercloud.orchestration.engine import StackService

    ctx = Context(Home(tmp_path / "uc"))
    real_load = StackService._load
    made = []

    def load_and_race(self, bundle, parameters, name, stack_id):
        if not made:
            made.append(name)
            self.create(name, bundle, parameters)  # the other request wins meanwhile
        return real_load(self, bundle, parameters, name, stack_id)

    monkeypatch.setattr(StackService, "_load", load_and_race)
    c = TestClient(create_app(ctx), base_url=HTTPS)
    r = c.post("/v1/stacks", json={"name": "same", "bundle": ONE}, headers={"X-Undercloud-Token": ctx.admin_token})
    assert r.status_code == 409 and r.json() == {"error": "stack 'same' already exists", "where": None}
    assert [s["stack_name"] for s in ctx.stacks.list()] == ["same"] and made
    with ctx.store.engine.connect() as conn:  # the loser wrote no event either
        from sqlalchemy import text

        assert conn.execute(text("SELECT count(*) FROM stacks")).scalar() == 1


# ---- an older store upgraded in place at start -------------------------------------------------
def test_a_store_made_before_migrations_upgrades_at_service_start(uc_home):
    """The schema create_all made before Alembic (tests/fixtures/store-before-alembic.sql),
    filled as the old code filled it (plain JSON, a home of mode 0755 and files of 0644)."""
    uc_home.path.mkdir(parents=True, mode=0o755)
    uc_home.path.chmod(0o755)
    db = uc_home.file("undercloud.db")
    conn = sqlite3.connect(db)
    conn.executescript((REPO / "tests/fixtures/store-before-alembic.sql").read_text())
    conn.execute("INSERT INTO nodes (id, name, driver, driver_info, bmc_key, properties, provision_state, "
                 "provision_updated_at, power_sync_failures, maintenance, instance_info, created_at, updated_at) "
                 "VALUES ('6f1c2c1e-0000-4000-8000-000000000001', 'old-0', 'fake', ?, 'fake|old-0', '{}', "
                 "'manageable', 0, 0, 0, '{}', 0, 0)",
                 (json.dumps({"address": "old-0", "username": "admin", "password": SECRET}),))
    for i, name in enumerate(["dup", "dup", "other"]):
        conn.execute("INSERT INTO stacks (id, name, root_id, path, action, status, status_reason, bundle, "
                     "parameters, description, created_at) VALUES (?, ?, ?, '', 'CREATE', 'COMPLETE', '', ?, ?, "
                     "'', ?)", (f"0000000{i}-aaaa-4000-8000-000000000000", name, f"0000000{i}-aaaa-4000-8000-000000000000",
                                json.dumps(ONE), json.dumps({"pw": HIDDEN}), i))
    conn.commit()
    conn.close()
    db.chmod(0o644)
    assert SECRET.encode() in db.read_bytes()

    info = start(uc_home)
    healthy(info["url"])
    c = client(uc_home, info["url"])
    shown = c.get("/v1/nodes/old-0").json()
    assert shown["driver_info"] == {"address": "old-0", "username": "admin", "password": "******"}
    names = sorted(s["stack_name"] for s in c.get("/v1/stacks").json())
    assert names == ["dup", "dup-00000001", "other"]
    assert "two root stacks were named 'dup'" in uc_home.file("service.log").read_text()
    assert mode(uc_home.path) == 0o700 and mode(db) == 0o600
    assert run_cli("service", "stop").returncode == 0  # checkpoints the WAL into the file
    raw = raw_store(uc_home)
    assert SECRET.encode() not in raw and HIDDEN.encode() not in raw
    version = sqlite3.connect(db).execute("SELECT version_num FROM alembic_version").fetchone()[0]
    from undercloud.store import migrate

    assert version == migrate.head()
    # and the node still works (its BMC password decrypted for the driver)
    info = start(uc_home)
    r = client(uc_home, info["url"]).post("/v1/nodes/old-0/power", json={"action": "on"})
    assert r.status_code == 200 and r.json()["power_state"] == "on"


def test_serve_is_refused_in_one_line_when_the_home_is_not_ours(tmp_path):
    r = subprocess.run([sys.executable, "-m", "undercloud", "serve"], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "UNDERCLOUD_HOME": "/proc/1/nope"})
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) <= 2 and "Traceback" not in r.stderr
