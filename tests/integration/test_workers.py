"""Several workers as real processes on one store (issue 19; SQLite here, PostgreSQL in the
postgresql tier): the service the CLI started and two `undercloud serve --worker` processes,
each with its own home. SIGKILL the worker running
a stack create: another takes it over and finishes it, creating nothing twice; the API of
any worker answers for the stack. Prints the measured takeover time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import own_store_url, run_cli
from tests.integration.test_engine_crash import TEMPLATE

INTERVAL = "1"  # heartbeats: a worker is dead 5 s after its last one (margin for a loaded machine)


def wait_for(what: str, check, timeout: float = 60, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def cli(home, *args, timeout: float = 120):
    r = run_cli(*args, env={"UNDERCLOUD_HOME": str(home)}, timeout=timeout)
    assert r.returncode == 0, f"{args}: {r.stderr}"
    return r


def store_of(home):
    """The store the cluster shares: the first home's SQLite file, or the test's PostgreSQL
    database (the postgresql tier runs this file too)."""
    from undercloud.store import Store

    return Store(own_store_url(home.path / "undercloud.db"), home.path / "store.key")


def rows(home, name: str) -> dict[str, dict]:
    from sqlalchemy import select

    from undercloud.store.stacks import Stack, StackResource

    with store_of(home).engine.connect() as c:
        sid = c.execute(select(Stack.id).where(Stack.name == name)).scalar()
        return {r.name: dict(r._mapping) for r in c.execute(
            select(StackResource).where(StackResource.root_id == sid))}


def workers_of(home) -> dict[str, dict]:
    return {w["id"]: w for w in json.loads(cli(home, "service", "workers", "-f", "json").stdout)}


@pytest.fixture
def cluster(uc_home, tmp_path, monkeypatch):
    """The first service (uc_home) and two workers joined to its store."""
    monkeypatch.setenv("UNDERCLOUD_HEARTBEAT_INTERVAL", INTERVAL)
    cli(uc_home.path, "service", "start")
    db = own_store_url(uc_home.path / "undercloud.db")
    procs = []
    homes = [tmp_path / f"worker{i}" for i in (2, 3)]
    for home in homes:
        log = open(tmp_path / f"{home.name}.log", "w")  # noqa: SIM115 - closed with the process
        env = {**os.environ, "UNDERCLOUD_HOME": str(home), "UNDERCLOUD_STORE_KEY": str(uc_home.path / "store.key")}
        procs.append((subprocess.Popen([sys.executable, "-m", "undercloud", "serve", "--worker", "--db", db],
                                       env=env, stdout=log, stderr=subprocess.STDOUT), log))
    try:
        wait_for("three live workers", lambda: sum(w["alive"] for w in workers_of(uc_home.path).values()) == 3)
        from undercloud import daemon
        from undercloud.config import Home

        # a worker beats from its start-up hooks on; its API answers a moment later
        wait_for("the workers' APIs", lambda: all(daemon.health(Home(h), timeout=1) for h in homes))
        yield uc_home, homes
    finally:
        for p, _ in procs:
            p.send_signal(signal.SIGTERM)
        for p, log in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
            log.close()


def test_a_worker_without_the_store_or_its_key_is_refused(uc_home, tmp_path):
    r = run_cli("serve", "--worker", env={"UNDERCLOUD_HOME": str(tmp_path / "w"), "UNDERCLOUD_DB": ""})
    assert r.returncode != 0 and "a worker joins the store of another service" in r.stderr
    assert "Traceback" not in r.stderr
    r = run_cli("serve", "--worker", "--db", f"sqlite:///{tmp_path / 'x.db'}",
                env={"UNDERCLOUD_HOME": str(tmp_path / "w"), "UNDERCLOUD_STORE_KEY": ""})
    assert r.returncode != 0 and "a worker needs the store's key" in r.stderr


def test_sigkill_of_the_worker_running_a_create_another_takes_over(cluster, tmp_path):
    from undercloud import daemon

    first, (home2, home3) = cluster
    listed = workers_of(home2)
    assert len(listed) == 3 and all(w["alive"] for w in listed.values())
    assert sum(w["this"] for w in listed.values()) == 1
    # reached over TLS, each verified by the CA every worker derives from the store's key
    assert all(w["url"].startswith("https://") for w in listed.values())
    assert len({(h / "tls" / "ca.key").read_bytes() for h in (first.path, home2, home3)}) == 1
    t = tmp_path / "slow.yaml"
    t.write_text(TEMPLATE)
    cli(first.path, "stack", "create", "crash", "-t", str(t))  # runs on the first service
    first_id = (first.path / "worker.id").read_text().strip()

    def second_layer_running():
        s = json.loads(cli(home2, "stack", "show", "crash", "-f", "json").stdout)  # any worker answers
        return s["progress"]["complete"] >= 3 and s["progress"]["in_progress_count"] > 0

    wait_for("the second layer in progress", second_layer_running, timeout=30)
    time.sleep(0.5)
    before = rows(first, "crash")
    os.kill(daemon.pid(first), signal.SIGKILL)
    killed = time.monotonic()

    def owner():
        from sqlalchemy import select

        from undercloud.store.stacks import Stack

        with store_of(first).engine.connect() as c:
            found = c.execute(select(Stack.engine_id).where(Stack.name == "crash")).scalar()
        return found if found != first_id else None

    new_owner = wait_for("another worker to take the create over", owner, timeout=60)
    takeover = time.monotonic() - killed
    print(f"\ntakeover: {takeover:.1f} s after SIGKILL (heartbeat {INTERVAL} s, dead after 5 beats)")
    assert new_owner in {(h / "worker.id").read_text().strip() for h in (home2, home3)}
    s = wait_for("CREATE_COMPLETE", lambda: (lambda s: s if s["stack_status"] != "CREATE_IN_PROGRESS" else None)(
        json.loads(cli(home3, "stack", "show", "crash", "-f", "json").stdout)), timeout=60)
    assert s["stack_status"] == "CREATE_COMPLETE", s["stack_status_reason"]
    assert {o["output_key"]: o["output_value"] for o in s["outputs"]} == {"last": "first2"}

    after = rows(first, "crash")
    assert sorted(after) == sorted(before)
    for name, row in after.items():
        assert row["uuid"] == before[name]["uuid"]
        if before[name]["data"].get("started"):  # created once: the same creation carried on
            assert row["data"]["started"] == before[name]["data"]["started"]
    events = json.loads(cli(home2, "stack", "event", "list", "crash", "-f", "json").stdout)
    for name in after:
        mine = [e["resource_status"] for e in events if e["resource_name"] == name]
        assert mine == ["CREATE_IN_PROGRESS", "CREATE_COMPLETE"], (name, mine)
    logs = "".join((tmp_path / f"{h.name}.log").read_text() for h in (home2, home3))
    assert f"taking over the operation of stack {s['id']} from worker {first_id}" in logs
    listed = workers_of(home2)
    assert not listed[first_id]["alive"] and listed[new_owner]["alive"]
    cli(home2, "stack", "delete", "crash", "--wait")


WAIT_TEMPLATE = """\
heat_template_version: 2018-08-31
resources:
  handle: {type: OS::Heat::WaitConditionHandle}
  wait:
    type: OS::Heat::WaitCondition
    properties: {handle: {get_resource: handle}, timeout: 120}
outputs:
  data: {value: {get_attr: [wait, data]}}
"""


def post_signal(home, stack_id: str, resource: str, token: str, body: dict) -> tuple[int, str]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", int((home / "port").read_text()), timeout=60)
    try:
        conn.request("POST", f"/v1/stacks/{stack_id}/resources/{resource}/signal", json.dumps(body),
                     {"Content-Type": "application/json", "X-Signal-Token": token})
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def test_a_signal_sent_to_any_worker_reaches_the_walk_that_waits_for_it(cluster, tmp_path):
    first, (home2, _) = cluster
    t = tmp_path / "wait.yaml"
    t.write_text(WAIT_TEMPLATE)
    cli(home2, "stack", "create", "waiting", "-t", str(t))  # runs on worker 2

    def handle_ready():
        got = rows(first, "waiting")
        return got if got.get("handle", {}).get("status") == "COMPLETE" else None

    handle = wait_for("the handle", handle_ready, timeout=30)["handle"]
    stack_id = handle["root_id"]
    status, text = post_signal(first.path, stack_id, "handle", "wrong-token", {"status": "SUCCESS"})
    assert status == 404 and "not found" in text  # refused where it was sent
    # sent to the first service, whose API nodes may know: forwarded to worker 2's walk
    status, text = post_signal(first.path, stack_id, "handle", handle["data"]["token"],
                               {"status": "SUCCESS", "id": "1", "data": "from-a-node"})
    assert status == 204, text
    s = wait_for("CREATE_COMPLETE", lambda: (lambda s: s if s["stack_status"] != "CREATE_IN_PROGRESS" else None)(
        json.loads(cli(first.path, "stack", "show", "waiting", "-f", "json").stdout)), timeout=30)
    assert s["stack_status"] == "CREATE_COMPLETE", s["stack_status_reason"]
    assert {o["output_key"]: o["output_value"] for o in s["outputs"]} == {"data": json.dumps({"1": "from-a-node"})}
    assert "Traceback" not in (first.path / "service.log").read_text()


def test_image_content_uploaded_to_one_worker_is_served_by_another(cluster, tmp_path):
    import hashlib
    import http.client

    first, (home2, _) = cluster
    disk = tmp_path / "disk.raw"
    disk.write_bytes(os.urandom(3 << 20))
    img = json.loads(cli(first.path, "image", "upload", str(disk), "--name", "shared-disk", "--disk-format", "raw",
                         "-f", "json").stdout)
    conn = http.client.HTTPConnection("127.0.0.1", int((home2 / "port").read_text()), timeout=60)
    try:  # what a node booting from worker 2's address asks for
        conn.request("GET", f"/v1/images/{img['id']}/file")
        r = conn.getresponse()
        body = r.read()
    finally:
        conn.close()
    assert r.status == 200 and body == disk.read_bytes()
    assert (home2 / "images" / "blobs" / hashlib.sha256(body).hexdigest()).exists()  # kept for the next use


def test_an_overclouds_kept_secrets_are_the_same_through_every_worker(cluster):
    """A deploy through worker 2 (its own home) keeps the passwords one through the first
    service made: what deploys keep lives in the store, not in the home that deployed."""
    from undercloud.cli.client import Client
    from undercloud.config import Home
    from undercloud.overcloud.state import StackState

    first, (home2, home3) = cluster
    kinds = {"AdminPassword": "password", "KeystoneFernetKey0": "fernet"}
    made = StackState(Client(first), "overcloud").secrets(kinds)
    through2 = Client(Home(home2))
    assert through2.base_url.endswith(f":{(home2 / 'port').read_text().strip()}")  # worker 2's own API
    assert StackState(through2, "overcloud").secrets(kinds) == made
    StackState(Client(Home(home3)), "overcloud").put("last-deploy", {"digest": "d3"})
    assert StackState(Client(first), "overcloud").get("last-deploy") == {"digest": "d3"}


def test_cancel_and_delete_sent_to_any_worker_are_done_by_the_one_running_the_stack(cluster, tmp_path):
    import http.client

    from undercloud.store.crypto import crypto_of

    first, (home2, home3) = cluster
    t = tmp_path / "wait.yaml"
    t.write_text(WAIT_TEMPLATE)
    for name in ("held", "held2"):
        cli(home2, "stack", "create", name, "-t", str(t))  # both run on worker 2, waiting for a signal
        wait_for(f"{name}'s handle", lambda n=name: rows(first, n).get("handle", {}).get("status") == "COMPLETE",
                 timeout=30)

    def post(home, path, headers):  # over TLS: a worker whose URL is https refuses the workers' token on plain HTTP
        import ssl

        conn = http.client.HTTPSConnection("127.0.0.1", int((home / "port").read_text()), timeout=30,
                                           context=ssl.create_default_context(cafile=str(home / "tls" / "ca.pem")))
        try:
            conn.request("POST", path, headers=headers)
            r = conn.getresponse()
            return r.status, r.read().decode()
        finally:
            conn.close()

    # Only the workers' own credential is taken in place of the admin token, and a request
    # already forwarded once is answered where it lands, never sent on again.
    status, text = post(first.path, "/v1/stacks/held/cancel", {"X-Undercloud-Worker-Token": "forged"})
    assert status == 401, text
    token = crypto_of(store_of(first).engine.dialect).derived("undercloud worker request")
    plain = http.client.HTTPConnection("127.0.0.1", int((first.path / "port").read_text()), timeout=30)
    try:  # the same credential sent in the clear: refused before anything runs
        plain.request("POST", "/v1/stacks/held/cancel", headers={"X-Undercloud-Worker-Token": token})
        r = plain.getresponse()
        assert r.status == 426 and "taken over https only" in r.read().decode()
    finally:
        plain.close()
    status, text = post(first.path, "/v1/stacks/held/cancel",
                        {"X-Undercloud-Worker-Token": token, "X-Undercloud-Forwarded": "w-test"})
    assert status == 503 and "its CREATE runs on worker" in text, text

    s = json.loads(cli(first.path, "stack", "cancel", "held", "--wait", "-f", "json").stdout)  # sent to the first
    assert s["stack_status"] == "CREATE_FAILED" and "cancel" in s["stack_status_reason"].lower(), s
    cli(home3, "stack", "delete", "held2", "--wait")  # sent to worker 3
    listed = json.loads(cli(first.path, "stack", "list", "-f", "json").stdout)
    assert [x["stack_name"] for x in listed] == ["held"]
    logs = "".join((tmp_path / f"{h.name}.log").read_text() for h in (home2, home3))
    assert "Traceback" not in logs + (first.path / "service.log").read_text()
    assert token not in logs + (first.path / "service.log").read_text()
