"""The overcloud's workflows run by the service (api/workflows.py, store/workflows.py): a real
service on loopback (uvicorn in a thread), its runner calling that service's API as the
CLI did. Their runner's mechanics are shown with a small workflow kind of this test (a
gate it waits at, polling the service as the deploy's wait does); the deploy's own failures
through the real `undercloud deploy`."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import run_cli
from tests.unit.agent_support import LiveService, wait_for
from undercloud.api import workflows as api_workflows
from undercloud.cli.client import Client
from undercloud.errors import Conflict, InvalidInput
from undercloud.overcloud import workflows


def gated(client, out, stack, input):
    out.note(f"{stack}: step 1")
    out.echo("a result line")
    while not os.path.exists(input["gate"]):
        client.get("/v1/health")  # as a deploy's wait polls the stack: fails when the service goes
        time.sleep(0.05)
    out.note(f"{stack}: step 2")
    if input.get("fail"):
        raise InvalidInput("the gate said no", "gate")
    return {"passed": input["gate"]}


@pytest.fixture
def gate_kind(monkeypatch):
    monkeypatch.setitem(workflows.KINDS, "test-gate", gated)


class Service:
    """A LiveService with the workflow runner started as `serve` starts it."""

    def __init__(self, home):
        self.live = LiveService(home)

    def start(self):
        self.live.start()
        self.stop_runner = api_workflows.startup(self.live.ctx)
        return self

    def stop(self):
        self.stop_runner()
        self.live.ctx.stopping.set()
        self.live.stop()

    def client(self):
        return Client(self.live.home, timeout=30, start=False)


@pytest.fixture
def service(uc_home):
    s = Service(uc_home.path).start()
    yield s
    s.stop()


def follow_all(client, wid):
    after, lines = 0, []
    while True:
        page = client.get(f"/v1/workflows/{wid}/events", params={"after": after, "wait": 5})
        lines += [(e["stream"], e["text"]) for e in page["events"]]
        after = page["events"][-1]["seq"] if page["events"] else after
        if page["workflow"]["status"] != "RUNNING" and not page["events"]:
            return page["workflow"], lines


def test_a_workflow_runs_in_the_service_and_its_events_stream_in_order(service, gate_kind, tmp_path):
    c = service.client()
    gate = tmp_path / "gate"
    wf = c.post("/v1/workflows", json={"stack": "oc", "kind": "test-gate", "input": {"gate": str(gate)}})
    assert wf["status"] == "RUNNING" and wf["attached"] is False
    page = c.get(f"/v1/workflows/{wf['id']}/events", params={"after": 0, "wait": 10})
    assert [e["text"] for e in page["events"]][:1] == ["oc: step 1"]
    gate.touch()
    end, lines = follow_all(c, wf["id"])
    assert lines == [("err", "oc: step 1"), ("out", "a result line"), ("err", "oc: step 2")]
    assert end["status"] == "SUCCEEDED" and end["result"] == {"result": {"passed": str(gate)}, "exit_code": 0}
    assert [w["id"] for w in c.get("/v1/workflows", params={"stack": "oc"})] == [wf["id"]]


def threaded(client, out, stack, input):
    """Lines from several threads at once, as a deploy's image builds running together write."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda n: [out.note(f"build {n}: line {i}") for i in range(25)], range(4)))
    return {}


def test_a_workflows_own_threads_write_its_events_at_once_and_lose_none(service, monkeypatch):
    monkeypatch.setitem(workflows.KINDS, "test-threads", threaded)
    c = service.client()
    wf = c.post("/v1/workflows", json={"stack": "oc", "kind": "test-threads", "input": {}})
    end, lines = follow_all(c, wf["id"])
    assert end["status"] == "SUCCEEDED", end
    assert sorted(t for _s, t in lines) == sorted(f"build {n}: line {i}" for n in range(4) for i in range(25))


def test_the_same_input_attaches_and_another_is_refused_naming_the_running_one(service, gate_kind, tmp_path):
    c = service.client()
    body = {"stack": "oc", "kind": "test-gate", "input": {"gate": str(tmp_path / "gate")}}
    first = c.post("/v1/workflows", json=body)
    again = c.post("/v1/workflows", json=body)
    assert again["id"] == first["id"] and again["attached"] is True
    with pytest.raises(Conflict) as exc:
        c.post("/v1/workflows", json={**body, "input": {"gate": str(tmp_path / "other")}})
    assert first["id"] in exc.value.message and "(test-gate)" in exc.value.message
    # another overcloud is not held by it
    other = c.post("/v1/workflows", json={**body, "stack": "oc2"})
    assert other["id"] != first["id"]
    (tmp_path / "gate").touch()
    assert follow_all(c, first["id"])[0]["status"] == "SUCCEEDED"
    assert follow_all(c, other["id"])[0]["status"] == "SUCCEEDED"
    # ended: the same input again is a new workflow
    assert c.post("/v1/workflows", json=body)["id"] not in (first["id"], other["id"])


def test_an_unknown_kind_or_a_bad_stack_name_is_refused(service):
    c = service.client()
    with pytest.raises(InvalidInput, match="unknown workflow kind 'nope'"):
        c.post("/v1/workflows", json={"stack": "oc", "kind": "nope", "input": {}})
    with pytest.raises(InvalidInput):
        c.post("/v1/workflows", json={"stack": "no/slash", "kind": "deploy", "input": {}})
    assert c.get("/v1/workflows") == []


def test_a_restart_of_the_service_mid_workflow_resumes_it_to_its_end(uc_home, gate_kind, tmp_path):
    gate = tmp_path / "gate"
    first = Service(uc_home.path).start()
    c = first.client()
    wf = c.post("/v1/workflows", json={"stack": "oc", "kind": "test-gate", "input": {"gate": str(gate)}})
    wait_for(lambda: c.get(f"/v1/workflows/{wf['id']}/events")["events"], what="the first line")
    first.stop()  # its run stops with the service's API; the workflow stays RUNNING
    second = Service(uc_home.path).start()
    try:
        c = second.client()
        wait_for(lambda: any("resumed" in e["text"] for e in c.get(f"/v1/workflows/{wf['id']}/events")["events"]),
                 what="the resumed run")
        assert c.get(f"/v1/workflows/{wf['id']}")["status"] == "RUNNING"
        gate.touch()
        end, lines = follow_all(c, wf["id"])
        assert end["status"] == "SUCCEEDED" and end["runs"] == 2
        texts = [t for _, t in lines]
        assert texts[0] == "oc: step 1" and texts[-1] == "oc: step 2" and texts.count("oc: step 2") == 1
        assert any(t.startswith(f"workflow {wf['id']}: resumed (run 2) after the undercloud service") for t in texts)
    finally:
        second.stop()


def test_a_failure_ends_the_workflow_with_its_error_line_and_exit_code(service, gate_kind, tmp_path):
    c = service.client()
    (tmp_path / "gate").touch()
    wf = c.post("/v1/workflows", json={"stack": "oc", "kind": "test-gate",
                                       "input": {"gate": str(tmp_path / "gate"), "fail": True}})
    end, _ = follow_all(c, wf["id"])
    assert end["status"] == "FAILED"
    assert end["result"] == {"error": {"message": "the gate said no", "where": "gate", "exit_code": 1},
                             "exit_code": 1}


FOLLOW = ("import sys; from undercloud.cli.client import Client; from undercloud.cli import workflows; "
          "workflows.run(Client(), 'oc', 'test-gate', {'gate': sys.argv[1]})")


def test_killing_the_following_client_stops_nothing_and_another_client_attaches(service, gate_kind, tmp_path):
    gate = str(tmp_path / "gate")
    env = {**os.environ, "UNDERCLOUD_HOME": str(service.live.home.path)}
    cli = subprocess.Popen([sys.executable, "-c", FOLLOW, gate], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    c = service.client()
    wf = wait_for(lambda: c.get("/v1/workflows"), what="the workflow")[0]
    wait_for(lambda: c.get(f"/v1/workflows/{wf['id']}/events")["events"], what="the first line")
    cli.kill()
    cli.communicate()
    second = subprocess.Popen([sys.executable, "-c", FOLLOW, gate], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    first_line = second.stderr.readline()  # it has attached: the gate may open
    assert first_line == f"test-gate: following workflow {wf['id']}, already running for oc with this input\n"
    open(gate, "w").close()
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert "oc: step 1" in err and "oc: step 2" in err and out == "a result line\n"
    assert c.get(f"/v1/workflows/{wf['id']}")["status"] == "SUCCEEDED"
    assert len(c.get("/v1/workflows")) == 1


def test_deploy_refuses_a_bad_roles_file_before_asking_the_service(uc_home, tmp_path):
    roles = tmp_path / "roles.yaml"
    roles.write_text("- name: Controller\n  ServicesDefault: [OS::TripleO::Services::NoSuchThing]\n")
    r = run_cli("deploy", "--roles", str(roles), env={"UNDERCLOUD_HOME": str(uc_home.path)})
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("error: ") and "NoSuchThing" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.splitlines()) == 1
    assert not (uc_home.path / "port").exists()  # no service was started for it


def test_a_deploy_failing_in_the_service_prints_its_error_line_and_exit_code_as_before(service, tmp_path):
    r = run_cli("deploy", "--hypervisor", "openstack:nocloud", "--stack", "inner",
                env={"UNDERCLOUD_HOME": str(service.live.home.path)})
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines()[-1].startswith("error: --hypervisor openstack:nocloud: ")
    assert "Traceback" not in r.stderr
    c = service.client()
    (wf,) = c.get("/v1/workflows")
    assert (wf["kind"], wf["stack"], wf["status"]) == ("deploy", "inner", "FAILED")
    assert wf["result"]["error"]["where"] == "--hypervisor openstack:nocloud"
    assert r.stderr.splitlines()[-1] == f"error: --hypervisor openstack:nocloud: {wf['result']['error']['message']}"


def test_a_workflow_interrupted_more_often_than_allowed_ends_failed_saying_so(uc_home, gate_kind, tmp_path,
                                                                               monkeypatch):
    from undercloud.orchestration import limits

    first = Service(uc_home.path).start()
    c = first.client()
    wf = c.post("/v1/workflows", json={"stack": "oc", "kind": "test-gate", "input": {"gate": str(tmp_path / "g")}})
    wait_for(lambda: c.get(f"/v1/workflows/{wf['id']}/events")["events"], what="the first line")
    first.stop()
    monkeypatch.setattr(limits, "LIMITS", limits.Limits({"UNDERCLOUD_MAX_RESUMES": "1"}))
    second = Service(uc_home.path).start()  # resumed once: allowed
    c = second.client()
    wait_for(lambda: any("resumed" in e["text"] for e in c.get(f"/v1/workflows/{wf['id']}/events")["events"]),
             what="the resumed run")
    second.stop()
    third = Service(uc_home.path).start()
    try:
        end, lines = follow_all(third.client(), wf["id"])
        assert end["status"] == "FAILED" and end["runs"] == 3
        assert end["result"]["error"]["message"].startswith("interrupted by 2 restarts of the undercloud service")
        assert "UNDERCLOUD_MAX_RESUMES" in lines[-1][1]
    finally:
        third.stop()


@pytest.mark.parametrize("command", [("overcloud", "update", "--service", "keystone"), ("overcloud", "rollback")])
def test_update_and_rollback_of_a_missing_overcloud_fail_in_the_service_with_the_words_of_before(service, command):
    r = run_cli(*command, "--stack", "nope", env={"UNDERCLOUD_HOME": str(service.live.home.path)})
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr.splitlines()[-1] == "error: --stack: no overcloud stack 'nope': run `undercloud deploy`"
    (wf,) = service.client().get("/v1/workflows")
    assert (wf["kind"], wf["stack"], wf["status"]) == (command[1], "nope", "FAILED")


@pytest.mark.parametrize("command", [("overcloud", "replace", "nope-0", "--yes"), ("overcloud", "delete", "--yes")])
def test_replace_and_delete_refuse_a_missing_overcloud_before_starting_a_workflow(service, command):
    r = run_cli(*command, "--stack", "nope", env={"UNDERCLOUD_HOME": str(service.live.home.path)})
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr.splitlines()[-1].startswith("error: --stack: no overcloud stack 'nope'")
    assert service.client().get("/v1/workflows") == []


def test_a_dead_workers_workflow_is_taken_over_and_run_to_its_end(service, gate_kind, tmp_path):
    from undercloud.overcloud.workflows import input_digest

    (tmp_path / "gate").touch()
    given = {"gate": str(tmp_path / "gate")}
    # as a worker that died mid-workflow left it: RUNNING, owned by a worker with no heartbeat
    wf, _ = service.live.ctx.workflows.start("oc", "test-gate", given, input_digest("test-gate", given), "gone-1")
    c = service.client()
    end = wait_for(lambda: (w := c.get(f"/v1/workflows/{wf['id']}"))["status"] != "RUNNING" and w,
                   what="the take-over")
    assert (end["status"], end["worker"], end["runs"]) == ("SUCCEEDED", service.live.ctx.workers.id, 2)


def test_a_deploy_input_of_the_wrong_shape_fails_the_workflow_with_one_line(service):
    c = service.client()
    wf = c.post("/v1/workflows", json={"stack": "oc", "kind": "deploy", "input": {"environments": "e.yaml"}})
    end, _ = follow_all(c, wf["id"])
    assert end["status"] == "FAILED"
    assert end["result"]["error"] == {"message": "roles: a path; environments: a list of paths", "where": "input",
                                      "exit_code": 1}


def test_a_hypervisor_hosts_worker_takes_over_no_workflow(uc_home, gate_kind, tmp_path):
    """A worker that runs servers only (`serve --hypervisor-only`) leaves a dead worker's
    workflow to a worker of the control plane, as it leaves their stacks."""
    from undercloud.api.context import Context
    from undercloud.overcloud.workflows import input_digest

    (tmp_path / "gate").touch()
    given = {"gate": str(tmp_path / "gate")}
    ctx = Context(uc_home.ensure(), hypervisor_only=True)
    ctx.workers.interval = 0.05
    ctx.workers.join()
    wf, _ = ctx.workflows.start("oc", "test-gate", given, input_digest("test-gate", given), "gone-1")
    stop = api_workflows.startup(ctx)
    try:
        time.sleep(1)  # 20 take-over passes of a worker that would take it
        assert (ctx.workflows.get(wf["id"])["worker"], ctx.workflows.get(wf["id"])["runs"]) == ("gone-1", 1)
    finally:
        stop()
        ctx.workers.leave()


def test_workflow_list_show_and_follow_from_the_command_line(service, gate_kind, tmp_path):
    """`undercloud workflow`: any client lists, shows and follows a workflow it did not start;
    `follow` of an ended one prints its lines and exits as it ended."""
    import json

    env = {"UNDERCLOUD_HOME": str(service.live.home.path)}
    c = service.client()
    (tmp_path / "open").touch()
    ok = c.post("/v1/workflows", json={"stack": "oc", "kind": "test-gate", "input": {"gate": str(tmp_path / "open")}})
    follow_all(c, ok["id"])
    bad = c.post("/v1/workflows", json={"stack": "oc", "kind": "test-gate",
                                        "input": {"gate": str(tmp_path / "open"), "fail": True}})
    follow_all(c, bad["id"])
    listed = run_cli("workflow", "list", "--stack", "oc", "-f", "json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["id"], r["kind"], r["status"], r["runs"]) for r in rows] == [
        (ok["id"], "test-gate", "SUCCEEDED", 1), (bad["id"], "test-gate", "FAILED", 1)]
    assert all(r["created_at"].endswith("Z") for r in rows)
    assert json.loads(run_cli("workflow", "list", "--stack", "other", "-f", "json", env=env).stdout) == []
    shown = run_cli("workflow", "show", bad["id"], "-f", "json", env=env)
    assert json.loads(shown.stdout)["result"]["error"] == {"message": "the gate said no", "where": "gate",
                                                           "exit_code": 1}
    good = run_cli("workflow", "follow", ok["id"], env=env)
    assert (good.returncode, good.stdout, good.stderr) == (0, "a result line\n", "oc: step 1\noc: step 2\n")
    failed = run_cli("workflow", "follow", bad["id"], env=env)
    assert failed.returncode == 1 and failed.stdout == "a result line\n"
    assert failed.stderr.splitlines() == ["oc: step 1", "oc: step 2", "error: gate: the gate said no"]
    unknown = run_cli("workflow", "show", "nosuch", env=env)
    assert unknown.returncode != 0 and unknown.stderr.strip() == "error: workflow: no workflow 'nosuch'"
