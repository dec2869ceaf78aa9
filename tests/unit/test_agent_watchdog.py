"""The watchdog's rules, on a stand-in for podman (tests/integration/test_agent_watchdog.py
runs them on real podman): which check is a liveness check, two looks before starting a
stopped container, failures counted only after a pass since the start (or the initial
delay), the threshold, a paused watchdog, missing containers left to the next deploy, the
report sent on change."""

from __future__ import annotations

import json
import time

import pytest

from tests.unit.agent_support import FakeEngine
from undercloud.agent import engine, files, kube, pod_spec, probes, watchdog


def test_liveness_is_the_containers_own_check():
    http = {"httpGet": {"port": 80, "path": "/"}}
    assert pod_spec.liveness_probe({"readinessProbe": http}) == http
    assert pod_spec.liveness_probe({"readinessProbe": {"tcpSocket": {"port": 5672}}}) == {"tcpSocket": {"port": 5672}}
    # Checks that ask elsewhere say nothing about this container: no restarts for them.
    assert pod_spec.liveness_probe({"readinessProbe": {"httpGet": {"host": "192.0.2.250", "port": 1936}}}) is None
    assert pod_spec.liveness_probe({"readinessProbe": {"exec": {"command": ["uc-nova-compute-ready"]}}}) is None
    live = {"exec": {"command": ["true"]}}
    assert pod_spec.liveness_probe({"readinessProbe": http, "livenessProbe": live}) == live


class FakeNode:
    """Containers as the listing shows them; start/restart change them as podman would."""

    def __init__(self):
        self.containers = {}
        self.probe_ok = True
        self.acted = []

    def listing(self, mode):
        return {k: dict(v) for k, v in self.containers.items()}

    def start(self, mode, name, restart=False):
        self.acted.append(("restart" if restart else "start", name))
        for v in self.containers.values():
            if v["name"] == name:
                v.update(state="running", started_at=v["started_at"] + 1)


@pytest.fixture
def node(tmp_path, monkeypatch):
    monkeypatch.setenv("UNDERCLOUD_AGENT_STATE", str(tmp_path))
    fake = FakeNode()
    monkeypatch.setattr(kube, "engine_for", lambda mode: FakeEngine(fake, mode))
    monkeypatch.setattr(probes, "probe", lambda spec, timeout=2.0, run_exec=None: (fake.probe_ok, "" if fake.probe_ok else "timed out"))
    monkeypatch.setattr(watchdog, "PERIOD", 0.0)
    monkeypatch.setattr(watchdog, "LIST_SHARE", 0)  # every round lists (a fake listing costs ~0 s)
    base = engine.state_dir()
    pod = {"metadata": {"name": "keystone"}, "spec": {"containers": [
        {"name": "keystone", "image": "localhost/service-keystone:1",
         "readinessProbe": {"httpGet": {"port": 15000, "path": "/v3"}}}]}}
    (base / "keystone.json").write_text(json.dumps(pod))
    (base / "keystone.sha256").write_text("netns:" + "a" * 64)
    fake.containers[("keystone", "keystone")] = {"id": "c1", "name": "n-keystone-keystone", "state": "running",
                                                 "started_at": 100, "image": "localhost/service-keystone:1",
                                                 "image_id": "0123456789ab"}
    return fake


def test_a_stopped_container_is_started_on_the_second_look(node):
    dog = watchdog.Watchdog(lambda m: None)
    assert dog.round() == []
    node.containers[("keystone", "keystone")]["state"] = "exited"
    assert dog.round() == [] and node.acted == []  # a process that exited is the restart policy's first
    assert dog.round() == ["pod keystone: container keystone was exited: started"]
    assert node.acted == [("start", "n-keystone-keystone")]
    rec = json.loads((engine.state_dir() / "health.json").read_text())["pods"]["keystone"]
    assert rec["config"] == "a" * 12 and rec["containers"]["keystone"]["restarts"] == 1
    assert rec["containers"]["keystone"]["last_restart"]["why"] == "was exited; started"


def test_a_failing_check_restarts_only_after_a_pass_and_three_failures(node):
    dog = watchdog.Watchdog(lambda m: None)
    node.probe_ok = False
    for _ in range(5):  # never passed since its start: a slow start, within the initial delay
        assert dog.round() == []
    node.probe_ok = True
    assert dog.round() == []
    node.probe_ok = False
    assert dog.round() == [] and dog.round() == []
    assert dog.round() == ["pod keystone: container keystone health check (HTTP GET :15000/v3) failed 3 times in a "
                           "row; it said: timed out: restarted"]
    assert node.acted == [("restart", "n-keystone-keystone")]
    assert dog.round() == []  # a new start: counting begins again


def test_a_restart_by_podmans_policy_is_counted(node):
    dog = watchdog.Watchdog(lambda m: None)
    dog.round()
    node.containers[("keystone", "keystone")]["started_at"] = 200  # same container, started again
    assert dog.round() == [] and node.acted == []
    rec = json.loads((engine.state_dir() / "health.json").read_text())["pods"]["keystone"]["containers"]["keystone"]
    assert rec["restarts"] == 1 and rec["last_restart"]["why"] == "its process exited; restarted by podman"
    node.containers[("keystone", "keystone")].update(id="c2", started_at=300)  # re-created by a deploy
    dog.round()
    assert json.loads((engine.state_dir() / "health.json").read_text())["pods"]["keystone"]["containers"][
        "keystone"]["restarts"] == 1


def test_paused_missing_and_reports(node):
    sent = []
    dog = watchdog.Watchdog(lambda m: None, report=sent.append)
    dog.round()
    dog.round()
    assert len(sent) == 1  # nothing changed: not sent again (until REPORT_EVERY)
    (engine.state_dir() / "watchdog.pause").touch()
    node.containers[("keystone", "keystone")]["state"] = "exited"
    assert dog.round() == [] and dog.round() == [] and node.acted == []
    assert sent[-1]["paused"] is True and sent[-1]["pods"]["keystone"]["containers"]["keystone"]["state"] == "exited"
    (engine.state_dir() / "watchdog.pause").unlink()
    del node.containers[("keystone", "keystone")]  # removed: left to the next deploy
    assert dog.round() == [] and dog.round() == [] and node.acted == []
    assert sent[-1]["pods"]["keystone"]["containers"]["keystone"]["state"] == "missing"


def test_a_report_the_undercloud_does_not_take_is_sent_again(node):
    tries = []

    def report(body):
        tries.append(body)
        if len(tries) == 1:
            raise OSError("connection refused")

    said = []
    dog = watchdog.Watchdog(said.append, report=report)
    dog.round()
    dog.round()
    assert len(tries) == 2 and any("health report not acknowledged" in x for x in said)


def test_a_costly_listing_is_made_again_only_after_twenty_times_its_cost(node, monkeypatch):
    monkeypatch.setattr(watchdog, "LIST_SHARE", 20)
    calls = []
    listing = node.listing
    monkeypatch.setattr(node, "listing", lambda mode: calls.append(mode) or listing(mode))
    dog = watchdog.Watchdog(lambda m: None)
    dog.round()
    dog.list_cost["netns"] = 100.0  # as if a listing took 100 s: the next is due in 2000 s
    node.containers[("keystone", "keystone")]["state"] = "exited"
    for _ in range(4):
        assert dog.round() == []  # the stale listing says running: nothing to do, nothing listed
    assert calls == ["netns"] and node.acted == []
    dog.list_cost["netns"] = 0.0
    assert dog.round() == [] and dog.round() == ["pod keystone: container keystone was exited: started"]
    assert calls == ["netns"] * 3
    assert dog.round() == [] and node.acted == [("start", "n-keystone-keystone")]  # listed again after a repair
    dog.list_cost["netns"] = 100.0
    dog.round()
    assert len(calls) == 4
    (engine.state_dir() / "keystone.sha256").write_text("netns:" + "b" * 64)  # played again: list now
    dog.round()
    assert len(calls) == 5


def test_checks_come_less_often_when_they_cost_the_service_more(node, monkeypatch):
    clock = [1000.0]  # the watchdog's clock, moved by hand: no real time decides this test
    monkeypatch.setattr(watchdog.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(watchdog, "LIST_SHARE", 20)
    probed = []

    def slow_probe(spec, timeout=2.0, run_exec=None):
        probed.append(1)
        clock[0] += 0.05  # a service answering slowly: 20 x 0.05 s = 1 s between checks
        return True, ""

    monkeypatch.setattr(probes, "probe", slow_probe)
    dog = watchdog.Watchdog(lambda m: None)
    dog.round()  # the first check: its cost is known after it
    assert dog.probe_cost == pytest.approx(0.05)
    dog.round()  # due again at once (set with the last round's cost: none yet); next in about 1 s
    dog.round()
    assert len(probed) == 2
    clock[0] += 0.9
    dog.round()
    assert len(probed) == 2
    clock[0] += 0.2
    dog.round()
    assert len(probed) == 3


def test_checks_are_never_spaced_beyond_max_spacing(node, monkeypatch):
    """Costly passing checks are spaced out (20 x their cost), but never beyond MAX_SPACING,
    failures too: a hung keystone on a busy controller is restarted within three spacings
    of 15 s, not three of 40 s."""
    clock = [1000.0]
    monkeypatch.setattr(watchdog.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(watchdog, "LIST_SHARE", 20)
    monkeypatch.setattr(watchdog, "PERIOD", 3.0)
    monkeypatch.setattr(watchdog, "MAX_SPACING", 15.0)
    probed = []

    def probe(spec, timeout=2.0, run_exec=None):
        assert timeout == watchdog.LIVENESS_TIMEOUT  # not the readiness check's 2 s
        probed.append(clock[0])
        if node.probe_ok:
            clock[0] += 2.0  # a busy service: 20 x 2 s would space the checks 40 s apart
        return node.probe_ok, "" if node.probe_ok else "timed out"

    monkeypatch.setattr(probes, "probe", probe)
    dog = watchdog.Watchdog(lambda m: None)
    dog.round()  # no cost known before it: the next check is a period away
    clock[0] = probed[0] + 5.0
    dog.round()  # the cost known now: the next check 20 x 2 s away, capped at 15 s
    node.probe_ok = False  # hangs
    did = []
    while not did and clock[0] < 1200:
        clock[0] += 1.0
        did = dog.round()
    assert did and "failed 3 times in a row" in did[0]
    assert [b - a for a, b in zip(probed[1:], probed[2:])] == [17.0, 15.0, 15.0]  # 2 s the check, then the cap


def test_a_starting_container_is_checked_every_round_until_it_first_passes(node, monkeypatch):
    """So a hang soon after a (re)start counts from the first pass, not after the initial delay."""
    monkeypatch.setattr(watchdog, "PERIOD", 100.0)
    probed = []
    monkeypatch.setattr(probes, "probe", lambda spec, timeout=2.0, run_exec=None: probed.append(node.probe_ok)
                        or (node.probe_ok, "" if node.probe_ok else "connection refused"))
    dog = watchdog.Watchdog(lambda m: None)
    node.probe_ok = False
    for _ in range(3):
        dog.round()
    assert probed == [False] * 3
    node.probe_ok = True
    dog.round()
    dog.round()  # passed: the next check is a period away
    assert probed == [False] * 3 + [True]
    node.containers[("keystone", "keystone")]["started_at"] = int(time.time()) + 10  # started again, after that pass
    node.probe_ok = False
    dog.round()
    dog.round()
    node.probe_ok = True
    dog.round()
    dog.round()
    assert probed == [False] * 3 + [True] + [False] * 2 + [True]


def test_a_pass_seen_before_the_listing_showed_a_restart_counts(node, monkeypatch):
    """A restart the listing shows late (it is made again only now and then): a check that
    passed after the new start means a hang now is a hang, not a slow start."""
    clock = [1000.0]
    monkeypatch.setattr(watchdog.time, "time", lambda: clock[0])
    listed = dict(node.containers[("keystone", "keystone")])
    monkeypatch.setattr(node, "listing", lambda mode: {("keystone", "keystone"): dict(listed)})
    dog = watchdog.Watchdog(lambda m: None)
    clock[0] = 990.0
    dog.round()  # passes at 990, on the process started at 100
    node.containers[("keystone", "keystone")]["started_at"] = 995  # restarted by podman; not listed yet
    clock[0] = 1000.0
    dog.round()  # passes at 1000, on the new process
    node.probe_ok = False  # then hangs
    listed.update(started_at=995)  # the listing shows the restart only now
    assert dog.round() == [] and dog.round() == []
    assert dog.round() == ["pod keystone: container keystone health check (HTTP GET :15000/v3) failed 3 times in a "
                           "row; it said: timed out: restarted"]
    # A pass in the very second of a start may have been the old process's: a slow start then.
    dog2 = watchdog.Watchdog(lambda m: None)
    listed.update(started_at=100)
    node.probe_ok = True
    dog2.round()
    listed.update(started_at=1000)  # started in the second of that pass
    node.probe_ok = False
    for _ in range(5):
        assert dog2.round() == []


def test_asked_for_a_report_it_probes_now_and_answers_even_paused(node, monkeypatch):
    """The undercloud's request (`health_request` in the document the runner keeps in
    metadata.json): every running container's readiness probe, run now, in a report sent at
    once with `answers`, paused or not; once answered, nothing more until the next request."""
    asked = []
    monkeypatch.setattr(probes, "probe", lambda spec, timeout=2.0, run_exec=None: asked.append(spec) or
                        (node.probe_ok, "" if node.probe_ok else "connection refused\n"))
    tries = []

    def report(body):
        tries.append(json.loads(json.dumps(body)))
        if len(tries) == 2:
            raise OSError("connection refused")

    doc = engine.state_dir().parent / "metadata.json"
    dog = watchdog.Watchdog(lambda m: None, report=report)
    (engine.state_dir() / "watchdog.pause").touch()
    dog.round()
    assert asked == [] and tries[-1]["answers"] is None  # paused, not asked: no probe
    files.write_atomic(doc, json.dumps({"deployments": [], "health_request": 1000.5}))
    node.probe_ok = False
    assert dog.request() == 1000.5
    dog.round()  # the report of this answer is refused: asked again next round
    assert len(asked) == 1 and dog.request() == 1000.5 and dog.tried == 1000.5
    node.probe_ok = True
    dog.round()
    assert len(asked) == 2 and dog.request() is None
    sent = tries[-1]
    assert sent["answers"] == 1000.5 and sent["paused"] is True
    assert sent["pods"]["keystone"]["containers"]["keystone"]["ready"] == "healthy"
    assert node.acted == []  # paused: reports, repairs nothing
    dog.round()
    assert len(asked) == 2 and len(tries) == 3  # answered, unchanged: neither probed nor sent again
    # A new request; keystone stopped meanwhile: not probed, its state says it.
    node.containers[("keystone", "keystone")]["state"] = "exited"
    files.write_atomic(doc, json.dumps({"deployments": [], "health_request": 1001.0}))
    dog.round()
    assert len(asked) == 2 and tries[-1]["answers"] == 1001.0
    assert "ready" not in tries[-1]["pods"]["keystone"]["containers"]["keystone"]
    # A failing probe says which check and its last words.
    node.containers[("keystone", "keystone")]["state"] = "running"
    node.probe_ok = False
    files.write_atomic(doc, json.dumps({"deployments": [], "health_request": 1002.0}))
    dog.round()
    assert tries[-1]["pods"]["keystone"]["containers"]["keystone"]["ready"] == \
        "failing (HTTP GET :15000/v3 did not pass: connection refused)"
