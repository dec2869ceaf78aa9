"""Never stuck: SIGKILL the service in the middle of a create of slow resources; the next
command starts the service again, which resumes the operation to the end, creating
nothing twice."""

from __future__ import annotations

import json
import os
import signal
import time

from tests.conftest import run_cli

TEMPLATE = """\
heat_template_version: 2018-08-31
resources:
""" + "".join(f"""\
  first{i}:
    type: OS::Heat::TestResource
    properties: {{value: first{i}, action_wait_secs: {{create: 2}}}}
""" for i in range(3)) + "".join(f"""\
  second{i}:
    type: OS::Heat::TestResource
    properties: {{value: {{get_attr: [first{i}, output]}}, action_wait_secs: {{create: 3}}}}
""" for i in range(3)) + """\
outputs:
  last: {value: {get_attr: [second2, output]}}
"""


def show(name: str) -> dict:
    r = run_cli("stack", "show", name, "-f", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def rows(home, name):
    from sqlalchemy import select

    from undercloud.store import Store
    from undercloud.store.stacks import Stack, StackResource

    store = Store(f"sqlite:///{home.path / 'undercloud.db'}")
    with store.engine.connect() as c:
        sid = c.execute(select(Stack.id).where(Stack.name == name)).scalar()
        return {r.name: dict(r._mapping) for r in c.execute(
            select(StackResource).where(StackResource.root_id == sid))}


def test_sigkill_mid_create_resumes_at_next_start(uc_home, tmp_path):
    from undercloud import daemon

    t = tmp_path / "slow.yaml"
    t.write_text(TEMPLATE)
    r = run_cli("stack", "create", "crash", "-t", str(t))
    assert r.returncode == 0, r.stderr
    # kill while the second layer is in progress (the first one complete)
    deadline = time.time() + 30
    while time.time() < deadline:
        p = show("crash")["progress"]
        if p["complete"] >= 3 and p["in_progress_count"] > 0:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"never saw the second layer in progress: {p}")
    time.sleep(0.5)  # let the started resources' state reach the store
    before = rows(uc_home, "crash")
    pid = daemon.pid(uc_home)
    os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 10
    while daemon.health(uc_home, timeout=0.5) is not None and time.time() < deadline:
        time.sleep(0.1)
    assert daemon.health(uc_home) is None

    # the next command starts the service; its start-up resumes the create
    r = run_cli("stack", "show", "crash", "-f", "json")
    assert r.returncode == 0, r.stderr
    assert "started the service" in r.stderr
    r = run_cli("stack", "event", "list", "crash", "--follow", timeout=60)
    assert r.returncode == 0, r.stderr
    s = show("crash")
    assert s["stack_status"] == "CREATE_COMPLETE", s["stack_status_reason"]
    assert {o["output_key"]: o["output_value"] for o in s["outputs"]} == {"last": "first2"}

    after = rows(uc_home, "crash")
    assert sorted(after) == sorted(before) == sorted([f"first{i}" for i in range(3)] + [f"second{i}" for i in range(3)])
    for name, row in after.items():
        assert row["uuid"] == before[name]["uuid"]
        if before[name]["data"].get("started"):
            # created once: the same creation carried on
            assert row["data"]["started"] == before[name]["data"]["started"]
            assert row["physical_id"] == before[name]["physical_id"]
    events = json.loads(run_cli("stack", "event", "list", "crash", "-f", "json").stdout)
    for name in after:
        mine = [e["resource_status"] for e in events if e["resource_name"] == name]
        assert mine == ["CREATE_IN_PROGRESS", "CREATE_COMPLETE"], (name, mine)
    log = (uc_home.path / "service.log").read_text()
    assert "resuming the interrupted operation" in log
