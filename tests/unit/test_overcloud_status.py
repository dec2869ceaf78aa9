"""`overcloud status` from the nodes (issue 44): the service asks the nodes' agents for a fresh
report and makes the rows from what they answer (GET /v1/overclouds/STACK/status).

With the real service (uvicorn in a thread) and a real agent (its runner long-polling, its
watchdog in a thread) on a stand-in for podman: the round trip (asked, answered, rows out),
a paused watchdog that still reports, a failing readiness probe, a node with no report or
only an old one, an agent that stopped. The rules of `overcloud/status.health` one by one,
and the command itself (rows, bad input) through the CLI.
"""

from __future__ import annotations

import io
import json
import re
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.conftest import run_cli
from tests.unit.agent_support import FakeEngine, LiveService, settings, wait_for
from undercloud.agent import engine, kube, probes, watchdog
from undercloud.agent.logs import Log
from undercloud.agent.runner import Agent
from undercloud.orchestration.server_metadata import HEALTH_REQUEST
from undercloud.orchestration.template import Bundle
from undercloud.overcloud import status as st

KEYSTONE = ["keystone", 3, None,  # declared once: its readiness probe
            "keystone", [["keystone", {"httpGet": {"port": 15000, "path": "/v3"}}]]]
MEMCACHED = ["memcached", 1, "TCP :11211", "memcached", [["memcached", {"tcpSocket": {"port": 11211}}]]]
STACK = f"""\
heat_template_version: 2018-08-31
resources: {{}}
outputs:
  RoleNodes:
    value: {{Controller: {{oc-controller-0: 192.0.2.5, oc-controller-1: 192.0.2.6}}}}
  RoleServices:
    value: {{Controller: {json.dumps([KEYSTONE, MEMCACHED])}}}
"""
FIELDS = {"role", "node", "address", "service", "step", "health_check", "health", "restarts", "image", "config",
          "last_restart", "certificate_expires"}


class FakeNode:
    """The node's containers as a listing shows them, and the probes' answer."""

    def __init__(self):
        self.containers = {
            (p, p): {"id": f"c-{p}", "name": f"oc-controller-0-{p}-{p}", "state": "running", "started_at": 100,
                     "image": f"localhost/service-{p}:1", "image_id": "0123456789ab"} for p in ("keystone", "memcached")}
        self.probe_ok = True
        self.probes = 0
        self.acted = []

    def listing(self, mode):
        return {k: dict(v) for k, v in self.containers.items()}

    def start(self, mode, name, restart=False):
        self.acted.append(name)

    def probe(self, spec, timeout=2.0, run_exec=None):
        self.probes += 1
        return (True, "") if self.probe_ok else (False, "timed out")


@pytest.fixture
def svc(tmp_path):
    s = LiveService(tmp_path / "uc", plain_agents=True).start()
    path = tmp_path / "oc.yaml"
    path.write_text(STACK)
    s.ctx.stacks.create("oc", Bundle.from_paths(str(path)).to_json(), {}, wait=True)
    yield s
    s.stop()


@pytest.fixture
def node(tmp_path, svc, monkeypatch):
    """oc-controller-0's agent: its runner (polling every 0.5 s: a held long-poll would hold
    the service's stop; the wake-up is test_a_request_wakes_a_long_poll's) and its watchdog,
    each in a thread, over a fake podman; Pods keystone and memcached played."""
    fake = FakeNode()
    token = svc.meta.register("id-0", "oc-controller-0")
    agent = Agent(settings(tmp_path / "n0", svc.url, "id-0", token, interval=0.5, long_poll=False),
                  Log(io.StringIO()))
    monkeypatch.setenv("UNDERCLOUD_AGENT_STATE", str(agent.state))
    monkeypatch.setattr(kube, "engine_for", lambda mode: FakeEngine(fake, mode))
    monkeypatch.setattr(probes, "probe", fake.probe)
    for pod, svc_ in (("keystone", KEYSTONE), ("memcached", MEMCACHED)):
        (_c, spec), = svc_[4]
        spec_pod = {"metadata": {"name": pod}, "spec": {"containers": [
            {"name": pod, "image": f"localhost/service-{pod}:1", "readinessProbe": spec}]}}
        (engine.state_dir() / f"{pod}.json").write_text(json.dumps(spec_pod))
        (engine.state_dir() / f"{pod}.sha256").write_text("netns:" + "a" * 64)
    # a refresh phase that counts its runs: a request for a report is no configuration
    (agent.s.refresh_dir / "configure.d").mkdir(parents=True)
    hook = agent.s.refresh_dir / "configure.d" / "50-count"
    hook.write_text(f"#!/bin/sh\necho run >> {tmp_path / 'refreshes'}\n")
    hook.chmod(0o755)
    stopped = threading.Event()
    threads = [threading.Thread(target=agent.run_forever, args=(stopped.is_set,), daemon=True),
               threading.Thread(target=watchdog.run, args=(lambda m: None, 2.0, agent.uc.report_health, stopped.is_set),
                                daemon=True)]
    for t in threads:
        t.start()
    wait_for(lambda: (tmp_path / "refreshes").exists(), what="the agent's first cycle")
    fake.stop = lambda: (stopped.set(), [t.join(30) for t in threads])
    fake.agent = agent
    fake.refreshes = lambda: (tmp_path / "refreshes").read_text().count("run")
    yield fake
    fake.stop()


def status(svc, query: str = "") -> list[dict]:
    req = urllib.request.Request(f"{svc.api_url}/v1/overclouds/oc/status{query}",
                                 headers={"X-Undercloud-Token": svc.ctx.admin_token})
    with urllib.request.urlopen(req, timeout=60, context=svc.tls) as r:
        return json.loads(r.read())


def by(rows: list[dict]) -> dict[tuple[str, str], str]:
    return {(r["node"], r["service"]): r["health"] for r in rows}


def test_status_asks_the_agents_and_shows_what_they_answer(svc, node):
    start = time.monotonic()
    rows = status(svc)
    took = time.monotonic() - start
    assert all(set(r) == FIELDS for r in rows) and len(rows) == 4
    assert by(rows) == {("oc-controller-0", "keystone"): "healthy", ("oc-controller-0", "memcached"): "healthy",
                        ("oc-controller-1", "keystone"): "unknown (no report from its agent)",
                        ("oc-controller-1", "memcached"): "unknown (no report from its agent)"}
    row = next(r for r in rows if (r["node"], r["service"]) == ("oc-controller-0", "keystone"))
    assert row == {"role": "Controller", "node": "oc-controller-0", "address": "192.0.2.5", "service": "keystone",
                   "step": 3, "health_check": "HTTP GET :15000/v3", "health": "healthy", "restarts": 0,
                   "image": "0123456789ab", "config": "a" * 12, "last_restart": "", "certificate_expires": None}
    probes = node.probes
    assert probes >= 2  # the readiness probes ran on the node for this request
    # The request is in the node's document; the runner keeps it out of the configuration.
    doc = json.loads((node.agent.state / "metadata.json").read_text())
    assert isinstance(doc[HEALTH_REQUEST], float)
    assert HEALTH_REQUEST not in json.loads((node.agent.state / "merged.json").read_text())
    # Asked again: probed again (a fresh answer), the refresh phases never ran again.
    assert by(status(svc))[("oc-controller-0", "keystone")] == "healthy"
    assert node.probes >= probes + 2 and node.refreshes() == 1
    print(f"status answered by the node's agent in {took:.2f} s (the agent polling every 0.5 s, its watchdog's round 2 s)")


def test_a_request_wakes_a_long_poll_and_outlives_a_change_of_the_metadata(svc):
    token = svc.meta.register("id-9", "oc-controller-9")
    agent = Agent(settings(svc.home.path.parent / "n9", svc.url, "id-9", token), Log(io.StringIO()))
    agent.collect()
    etag = (agent.state / "metadata.etag").read_text()
    asked = []
    timer = threading.Timer(0.5, lambda: asked.append(svc.meta.request_health(["id-9", "no-such-server"])))
    timer.start()
    t0 = time.monotonic()
    got = agent.uc.fetch(etag, wait=20)
    timer.join(10)  # the request wakes the poll before request_health returns its time to the timer
    assert got.changed and got.metadata[HEALTH_REQUEST] == asked[0]
    print(f"a held long-poll woken by the request in {time.monotonic() - t0:.2f} s (0.5 s after it began)")
    svc.meta.set_extra("id-9", {"role": "x", HEALTH_REQUEST: 1.0})  # a deploy's change keeps the request
    doc = agent.uc.fetch(None).metadata
    assert doc["role"] == "x" and doc[HEALTH_REQUEST] == asked[0]
    assert svc.meta.request_health(["id-9"]) > asked[0]  # each request later than the last


def test_a_request_made_on_one_worker_reaches_agents_served_by_another(tmp_path):
    """Two workers on one store (a hypervisor host's worker serves its servers' agents): the
    request reaches the other worker's copy of the document at its next refresh (one
    heartbeat), and the answer stored there is what the first one reads."""
    from tests.conftest import own_store_url
    from undercloud.orchestration.server_metadata import ServerMetadata
    from undercloud.store import Store

    store = Store(own_store_url(tmp_path / "uc.db")).create_schema()
    a, b = (ServerMetadata(store, lambda: "http://127.0.0.1:1") for _ in range(2))
    a.register("s1", "node-1")
    b.refresh()
    etag = b._get("s1").etag
    asked = a.request_health(["s1"])
    assert b.refresh() == 1 and b._get("s1").etag != etag
    assert json.loads(b._get("s1").doc)[HEALTH_REQUEST] == asked
    assert a.healths(["s1", "nope"]) == {"s1": None}
    b.record_health("s1", {"paused": False, "pods": {}, "answers": asked})
    assert a.healths(["s1"])["s1"]["answers"] == asked


def test_a_paused_watchdog_still_reports_what_it_sees_now(svc, node):
    (engine.state_dir() / "watchdog.pause").touch()
    node.containers[("memcached", "memcached")]["state"] = "exited"  # `podman stop`, the watchdog paused
    node.probe_ok = False  # keystone answers no more
    rows = by(status(svc, "?node=oc-controller-0"))
    assert rows == {("oc-controller-0", "keystone"): "failing (HTTP GET :15000/v3 did not pass: timed out)",
                    ("oc-controller-0", "memcached"): "failing (container exited)"}
    assert node.acted == []  # paused: nothing started or restarted
    report = svc.meta.health("id-0")
    assert report["paused"] is True and report["answers"] >= 0


def test_a_node_with_an_old_report_or_none_is_unknown_never_healthy(svc, node):
    assert by(status(svc))[("oc-controller-0", "memcached")] == "healthy"
    token = svc.meta.register("id-1", "oc-controller-1")
    old = {"paused": False, "pods": {"keystone": {"config": "b" * 12, "containers": {"keystone": {
        "state": "running", "ready": "healthy", "image_id": "fedcba987654", "restarts": 1}}}}}
    req = urllib.request.Request(f"{svc.url}/v1/agent/servers/id-1/health", data=json.dumps(old).encode(),
                                 method="PUT", headers={"X-Server-Token": token, "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()
    rows = status(svc, "?wait=1")  # a report as an agent older than requests sends it: no `answers`
    stale = [r for r in rows if r["node"] == "oc-controller-1"]
    assert all(re.fullmatch(r"unknown \(its agent answers no request for a report: an older one; last report \d+ s "
                            r"ago\)", r["health"]) for r in stale), stale
    # what it last reported still shows, marked by its health as not now
    assert next(r for r in stale if r["service"] == "keystone")["image"] == "fedcba987654"
    # The agent of oc-controller-0 stops (dead agent, node off): its old answers are not now either.
    node.stop()
    rows = by(status(svc, "?wait=1"))
    assert all(h.startswith("unknown (no fresh report: last report ") for (n, _s), h in rows.items()
               if n == "oc-controller-0"), rows


def test_bad_input_is_one_line(svc):
    def err(query, stack="oc"):
        req = urllib.request.Request(f"{svc.api_url}/v1/overclouds/{stack}/status{query}",
                                     headers={"X-Undercloud-Token": svc.ctx.admin_token})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=30, context=svc.tls)
        return e.value.code, json.loads(e.value.read())

    assert err("", stack="nope") == (404, {"error": "no overcloud stack 'nope': run `undercloud deploy`",
                                           "where": "stack"})
    assert err("?node=oc-compute-9") == (404, {"error": "no node 'oc-compute-9' in overcloud oc (its nodes: "
                                                        "oc-controller-0, oc-controller-1)", "where": "node"})
    code, body = err("?wait=61")
    assert code == 400 and "wait" in str(body["where"]) and "less than or equal to 60" in body["error"], body


def test_health_from_a_report():
    asked, now = 1000.0, 1030.0

    def report(**containers):
        return {"answers": asked, "reported_at": 1029.0, "pods": {"keystone": {"containers": containers}}}

    ok = {"state": "running", "ready": "healthy"}
    assert st.health(KEYSTONE, report(keystone=ok), asked, now) == "healthy"
    assert st.health(KEYSTONE, None, asked, now) == "unknown (no report from its agent)"
    assert st.health(KEYSTONE, {**report(keystone=ok), "answers": asked - 1}, asked, now) == \
        "unknown (no fresh report: last report 1 s ago)"
    assert st.health(KEYSTONE, {**report(keystone=ok), "answers": None, "reported_at": 900.0}, asked, now) == \
        "unknown (no fresh report: last report 130 s ago)"
    assert st.health(KEYSTONE, {"reported_at": 1000.0, "pods": {}}, asked, now) == \
        "unknown (its agent answers no request for a report: an older one; last report 30 s ago)"
    assert st.health(MEMCACHED, report(keystone=ok), asked, now) == "failing (pod memcached not running on the node)"
    assert st.health(KEYSTONE, report(), asked, now) == "failing (container missing)"
    assert st.health(KEYSTONE, report(keystone={"state": "exited", "ready": "healthy"}), asked, now) == \
        "failing (container exited)"
    assert st.health(KEYSTONE, report(keystone={"state": "running", "ready": "failing (HTTP GET :15000/v3 did not "
                                                "pass)"}), asked, now) == "failing (HTTP GET :15000/v3 did not pass)"
    assert st.health(KEYSTONE, report(keystone={"state": "running"}), asked, now) == \
        "unknown (its agent did not run the readiness probe)"
    # another container of the Pod stopped; a Pod without probes is healthy when all of it runs
    assert st.health(KEYSTONE, report(keystone=ok, sidecar={"state": "exited"}), asked, now) == \
        "failing (sidecar exited)"
    bare = ["x", 1, "", "keystone", []]
    assert st.health(bare, report(keystone={"state": "supervised"}), asked, now) == "healthy"
    assert st.health(bare, report(keystone={"state": "created"}), asked, now) == "failing (keystone created)"


def test_the_command_shows_the_rows_and_says_what_is_wrong(uc_home, tmp_path):
    (tmp_path / "t.yaml").write_text(STACK)
    assert run_cli("stack", "create", "overcloud", "-t", str(tmp_path / "t.yaml"), "--wait").returncode == 0
    r = run_cli("overcloud", "status", "-f", "json", "--wait", "0")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [set(x) for x in rows] == [FIELDS] * 4
    assert {x["health"] for x in rows} == {"unknown (no report from its agent)"}
    assert "stack overcloud: CREATE_COMPLETE" in r.stderr
    r = run_cli("overcloud", "status", "--stack", "nope")
    assert r.returncode == 1 and "--stack: no overcloud stack 'nope': run `undercloud deploy`" in r.stderr
    assert "Traceback" not in r.stderr
    r = run_cli("overcloud", "status", "--wait", "61")
    assert r.returncode == 2 and "--wait" in r.stderr
    assert "agent" in run_cli("overcloud", "status", "--help").stdout


def test_the_command_says_when_this_hosts_container_engine_was_restarted(tmp_path, monkeypatch):
    """The podman API service the container nodes drive, restarted by the undercloud
    (host/podman.ApiWatch), is said in `overcloud status` (and nothing while it is fine)."""
    from tests.unit.agent_support import LiveService
    from undercloud.config import host_name

    live = LiveService(tmp_path / "uc", plain_agents=True).start()
    env = {"UNDERCLOUD_HOME": str(live.home.path)}
    try:
        live.ctx.servers.ensure_local_hosts()
        (tmp_path / "t.yaml").write_text(STACK)
        assert run_cli("stack", "create", "overcloud", "-t", str(tmp_path / "t.yaml"), "--wait", env=env).returncode == 0
        quiet = run_cli("overcloud", "status", "--wait", "0", env=env)
        assert quiet.returncode == 0 and "container engine" not in quiet.stderr, quiet.stderr
        said = "podman API ok, restarted 1x (last 12:00:00: dead: nothing listens (1 in a row))"
        monkeypatch.setattr(live.ctx.servers, "engine_health", lambda summary=False: said if summary else {})
        told = run_cli("overcloud", "status", "--wait", "0", "-f", "json", env=env)
        assert told.returncode == 0, told.stderr
        assert f"container engine on {host_name()}: {said}" in told.stderr.splitlines()
        assert len(json.loads(told.stdout)) == 4  # the rows as before
    finally:
        live.stop()


def test_haproxys_rows_say_when_the_public_certificate_ends(tmp_path):
    """`overcloud status -f json`: the public endpoints' certificate (the stack output
    PublicCertificate) on haproxy's rows; none on the others, and none for a stack without
    one or with a certificate that cannot be read."""
    import datetime

    from undercloud import tls

    ca, ca_key = tls.ensure_ca(tmp_path / "tls")
    cert, _key = tls.issue(ca.read_bytes(), ca_key.read_bytes(), ["192.0.2.250"], days=90)
    ends = tls.expiry(cert)
    assert ends - datetime.datetime.now(datetime.UTC) > datetime.timedelta(days=89)
    outputs = {"RoleNodes": {"Controller": {"oc-controller-0": "192.0.2.5"}},
               "RoleServices": {"Controller": [["haproxy", 1, None, "haproxy", []], KEYSTONE]},
               "PublicCertificate": cert.decode()}
    rows = st.rows(st.targets(outputs), {}, None, 0.0, st.certificates(outputs))
    assert [(r["service"], r["certificate_expires"]) for r in rows] == [
        ("haproxy", ends.strftime("%Y-%m-%dT%H:%M:%SZ")), ("keystone", None)]
    assert st.certificates({**outputs, "PublicCertificate": ""}) == {}
    assert st.certificates({**outputs, "PublicCertificate": "not a certificate"}) == {}


def test_with_internal_tls_mariadb_rabbitmq_and_haproxy_say_when_theirs_ends(tmp_path):
    """The internal certificate (stack output InternalCertificate) is served by haproxy,
    MariaDB and RabbitMQ: their rows say when it ends; haproxy's says the sooner of its two."""
    from undercloud import tls

    ca, ca_key = tls.ensure_ca(tmp_path / "tls")
    public, _ = tls.issue(ca.read_bytes(), ca_key.read_bytes(), ["192.0.2.250"], days=90)
    internal, _ = tls.issue(ca.read_bytes(), ca_key.read_bytes(), ["192.0.2.250"], days=40)
    soon = tls.expiry(internal).strftime("%Y-%m-%dT%H:%M:%SZ")
    services = [["haproxy", 1, None, "haproxy", []], ["mysql", 2, None, "mysql", []],
                ["rabbitmq", 2, None, "rabbitmq", []], KEYSTONE]
    outputs = {"RoleNodes": {"Controller": {"oc-controller-0": "192.0.2.5"}}, "RoleServices": {"Controller": services},
               "PublicCertificate": public.decode(), "InternalCertificate": internal.decode()}
    rows = st.rows(st.targets(outputs), {}, None, 0.0, st.certificates(outputs))
    assert {r["service"]: r["certificate_expires"] for r in rows} == {
        "haproxy": soon, "mysql": soon, "rabbitmq": soon, "keystone": None}
    # Internal TLS off (the output empty): only haproxy's public one.
    off = st.certificates({**outputs, "InternalCertificate": ""})
    assert off == {"haproxy": tls.expiry(public).strftime("%Y-%m-%dT%H:%M:%SZ")}
