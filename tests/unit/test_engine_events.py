"""Nested stacks' own events: every transition of a template resource's stack and of a
ResourceGroup's stack is an event (as the root's are), named as Heat names them, and an
untouched nested stack writes none. `stack event list --nested-depth N` shows them."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from tests.unit.test_engine_ops import Eng
from undercloud.orchestration.resources.heat import TestResource

CHILD = """\
heat_template_version: 2018-08-31
parameters:
  v: {type: string, default: x}
  fail: {type: boolean, default: false}
resources:
  r:
    type: OS::Heat::TestResource
    properties: {value: {get_param: v}, fail: {get_param: fail}}
outputs:
  o: {value: {get_attr: [r, output]}}
"""

TOP = """\
heat_template_version: 2018-08-31
parameters:
  v: {type: string, default: x}
  fail: {type: boolean, default: false}
resources:
  n:
    type: child.yaml
    properties: {v: {get_param: v}, fail: {get_param: fail}}
  m:
    type: child.yaml
  group:
    type: OS::Heat::ResourceGroup
    properties:
      count: 2
      resource_def: {type: OS::Heat::Value, properties: {value: "member-%index%"}}
"""


@pytest.fixture
def eng(tmp_path):
    e = Eng(tmp_path)
    e.write("child.yaml", CHILD)
    e.top = e.bundle("top.yaml", TOP)
    return e


def of(events: list[dict], stack: str) -> list[tuple[str, str, str]]:
    """The events of one stack (its own and its resources'), in order."""
    return [(e["resource_name"], e["resource_status"], e["resource_status_reason"])
            for e in events if e["stack_name"] == stack]


def test_nested_stack_create_events(eng):
    eng.create("s", eng.top)
    ev = eng.svc.events("s")
    assert of(ev, "s-n") == [
        ("s-n", "CREATE_IN_PROGRESS", "Stack CREATE started"),
        ("n.r", "CREATE_IN_PROGRESS", "state changed"),
        ("n.r", "CREATE_COMPLETE", "state changed"),
        ("s-n", "CREATE_COMPLETE", "Stack CREATE completed successfully"),
    ]
    assert of(ev, "s-group") == [
        ("s-group", "CREATE_IN_PROGRESS", "Stack CREATE started"),
        ("group.0", "CREATE_IN_PROGRESS", "state changed"),
        ("group.1", "CREATE_IN_PROGRESS", "state changed"),
        ("group.0", "CREATE_COMPLETE", "state changed"),
        ("group.1", "CREATE_COMPLETE", "state changed"),
        ("s-group", "CREATE_COMPLETE", "Stack CREATE completed successfully"),
    ]
    # the nested stack's events sit between its parent resource's
    names = [(e["resource_name"], e["resource_status"]) for e in ev]
    assert names.index(("n", "CREATE_IN_PROGRESS")) < names.index(("s-n", "CREATE_IN_PROGRESS"))
    assert names.index(("s-n", "CREATE_COMPLETE")) < names.index(("n", "CREATE_COMPLETE"))
    own = [e for e in ev if e["resource_name"] == "s-n"]
    assert {e["resource_type"] for e in own} == {"OS::Heat::Stack"}
    assert {e["physical_resource_id"] for e in own} == {eng.res("s")["n"]["physical_resource_id"]}
    assert len(ev) == 2 + 3 * 2 + 3 * 2 + 4 * 2  # the root, 3 parents, 3 nested stacks, 4 resources in them


def test_noop_update_writes_no_nested_events_and_update_writes_the_changed_ones(eng):
    eng.create("s", eng.top)
    n = len(eng.svc.events("s"))
    eng.update("s", eng.top)
    assert [(e["resource_name"], e["resource_status"]) for e in eng.svc.events("s")[n:]] == [
        ("s", "UPDATE_IN_PROGRESS"), ("s", "UPDATE_COMPLETE")]

    n = len(eng.svc.events("s"))
    eng.update("s", eng.top, {"v": "y"})
    new = eng.svc.events("s")[n:]
    assert of(new, "s-n") == [
        ("s-n", "UPDATE_IN_PROGRESS", "Stack UPDATE started"),
        ("n.r", "UPDATE_IN_PROGRESS", "state changed"),
        ("n.r", "UPDATE_COMPLETE", "state changed"),
        ("s-n", "UPDATE_COMPLETE", "Stack UPDATE completed successfully"),
    ]
    assert of(new, "s-m") == of(new, "s-group") == []  # untouched: no events
    assert [e["resource_name"] for e in new if e["stack_name"] == "s"] == ["s", "n", "n", "s"]


def test_nested_change_without_new_properties_updates_the_parent_first(eng):
    # only the nested template changes: the parent resource's properties do not
    eng.create("s", eng.top)
    n = len(eng.svc.events("s"))
    eng.write("child.yaml", CHILD.replace("default: x", "default: z"))
    eng.update("s", eng.bundle("top.yaml"))
    new = [(e["stack_name"], e["resource_name"], e["resource_status"]) for e in eng.svc.events("s")[n:]]
    # m takes the new default; n passes its own value: untouched
    assert new == [
        ("s", "s", "UPDATE_IN_PROGRESS"),
        ("s", "m", "UPDATE_IN_PROGRESS"),
        ("s-m", "s-m", "UPDATE_IN_PROGRESS"),
        ("s-m", "m.r", "UPDATE_IN_PROGRESS"),
        ("s-m", "m.r", "UPDATE_COMPLETE"),
        ("s-m", "s-m", "UPDATE_COMPLETE"),
        ("s", "m", "UPDATE_COMPLETE"),
        ("s", "s", "UPDATE_COMPLETE"),
    ]


def test_nested_failure_fails_the_stack_and_its_parent_then_rollback(eng):
    eng.create("s", eng.top)
    n = len(eng.svc.events("s"))
    s = eng.update("s", eng.top, {"v": "y", "fail": "true"}, rollback=True)
    assert s["stack_status"] == "ROLLBACK_COMPLETE"
    new = eng.svc.events("s")[n:]
    failed = "UPDATE of n.r failed: Test Resource failed r"
    assert of(new, "s-n") == [
        ("s-n", "UPDATE_IN_PROGRESS", "Stack UPDATE started"),
        ("n.r", "UPDATE_IN_PROGRESS", "state changed"),
        ("n.r", "UPDATE_FAILED", "Test Resource failed r"),
        ("s-n", "UPDATE_FAILED", failed),
        ("s-n", "ROLLBACK_IN_PROGRESS", "Stack ROLLBACK started"),
        ("n.r", "UPDATE_IN_PROGRESS", "state changed"),
        ("n.r", "UPDATE_COMPLETE", "state changed"),
        ("s-n", "ROLLBACK_COMPLETE", "Stack ROLLBACK completed successfully"),
    ]
    # the parent resource fails with its nested stack (it is not left IN_PROGRESS)
    assert [(x[0], x[1]) for x in of(new, "s") if x[0] == "n"] == [
        ("n", "UPDATE_IN_PROGRESS"), ("n", "UPDATE_FAILED"), ("n", "UPDATE_IN_PROGRESS"), ("n", "UPDATE_COMPLETE")]
    assert ("n", "UPDATE_FAILED", f"nested stack s-n failed: {failed}") in of(new, "s")
    assert eng.res("s", 1)["n.r"]["resource_status"] == "UPDATE_COMPLETE"


def test_nested_create_failure(eng):
    s = eng.create("s", eng.top, {"fail": "true"})
    assert s["stack_status"] == "CREATE_FAILED"
    ev = eng.svc.events("s")
    assert of(ev, "s-n") == [
        ("s-n", "CREATE_IN_PROGRESS", "Stack CREATE started"),
        ("n.r", "CREATE_IN_PROGRESS", "state changed"),
        ("n.r", "CREATE_FAILED", "Test Resource failed r"),
        ("s-n", "CREATE_FAILED", "CREATE of n.r failed: Test Resource failed r"),
    ]
    assert eng.res("s")["n"]["resource_status"] == "CREATE_FAILED"


def delete_events(eng) -> list[dict]:
    seen: list[dict] = []
    orig = eng.svc._purge
    eng.svc._purge = lambda root_id: (seen.extend(eng.svc.events(root_id)), orig(root_id))
    eng.svc.delete("s", wait=True)
    return seen


def test_nested_stack_delete_events(eng):
    eng.create("s", eng.top)
    n = len(eng.svc.events("s"))
    new = delete_events(eng)[n:]
    assert of(new, "s-n") == [
        ("s-n", "DELETE_IN_PROGRESS", "Stack DELETE started"),
        ("n.r", "DELETE_IN_PROGRESS", "state changed"),
        ("n.r", "DELETE_COMPLETE", "state changed"),
        ("s-n", "DELETE_COMPLETE", "Stack DELETE completed successfully"),
    ]
    assert [x[:2] for x in of(new, "s-group")] == [
        ("s-group", "DELETE_IN_PROGRESS"), ("group.0", "DELETE_IN_PROGRESS"), ("group.1", "DELETE_IN_PROGRESS"),
        ("group.0", "DELETE_COMPLETE"), ("group.1", "DELETE_COMPLETE"), ("s-group", "DELETE_COMPLETE")]
    names = [(e["resource_name"], e["resource_status"]) for e in new]
    # the nested stack is gone before its parent resource
    assert names.index(("s-n", "DELETE_COMPLETE")) < names.index(("n", "DELETE_COMPLETE"))
    assert names[0] == ("s", "DELETE_IN_PROGRESS")  # (the root's end is the purge of all)


def test_nested_delete_failure(eng, monkeypatch):
    eng.create("s", eng.top)
    n = len(eng.svc.events("s"))

    def delete(self):
        if self.stack.name == "s-n":
            raise RuntimeError("disk on fire")
        self._start("DELETE")

    monkeypatch.setattr(TestResource, "delete", delete)
    assert eng.svc.delete("s", wait=True) and eng.svc.show("s")["stack_status"] == "DELETE_FAILED"
    assert of(eng.svc.events("s")[n:], "s-n") == [
        ("s-n", "DELETE_IN_PROGRESS", "Stack DELETE started"),
        ("n.r", "DELETE_IN_PROGRESS", "state changed"),
        ("n.r", "DELETE_FAILED", "disk on fire"),
        ("s-n", "DELETE_FAILED", "DELETE of n.r failed: disk on fire"),
    ]
    # a second delete starts the nested stack's delete again, and ends it
    monkeypatch.undo()
    n = len(eng.svc.events("s"))
    assert of(delete_events(eng)[n:], "s-n") == [
        ("s-n", "DELETE_IN_PROGRESS", "Stack DELETE started"),
        ("n.r", "DELETE_IN_PROGRESS", "state changed"),
        ("n.r", "DELETE_COMPLETE", "state changed"),
        ("s-n", "DELETE_COMPLETE", "Stack DELETE completed successfully"),
    ]


def test_event_list_nested_depth_from_the_cli(uc_home, tmp_path):
    (tmp_path / "child.yaml").write_text(CHILD)
    (tmp_path / "top.yaml").write_text(TOP)
    r = run_cli("stack", "create", "demo", "-t", str(tmp_path / "top.yaml"), "--wait", "-f", "json")
    assert r.returncode == 0, r.stderr

    def names(*args: str) -> list[tuple[str, str, str]]:
        r = run_cli("stack", "event", "list", "demo", *args, "-f", "json")
        assert r.returncode == 0, r.stderr
        return [(e["stack_name"], e["resource_name"], e["resource_status"]) for e in json.loads(r.stdout)]

    top = names("--nested-depth", "0")
    assert {x[0] for x in top} == {"demo"} and len(top) == 2 + 3 * 2
    deep = names("--nested-depth", "1")
    assert [x for x in deep if x[0] == "demo-n"] == [
        ("demo-n", "demo-n", "CREATE_IN_PROGRESS"), ("demo-n", "n.r", "CREATE_IN_PROGRESS"),
        ("demo-n", "n.r", "CREATE_COMPLETE"), ("demo-n", "demo-n", "CREATE_COMPLETE")]
    assert len(deep) == len(top) + 3 * 2 + 4 * 2
    r = run_cli("stack", "event", "list", "demo", "--nested-depth", "1")
    assert r.returncode == 0 and "stack_name" in r.stdout.splitlines()[1] and "demo-group" in r.stdout
    r = run_cli("stack", "event", "list", "demo", "--nested-depth", "-1")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_a_failure_elsewhere_ends_a_nested_stack_left_part_way(eng):
    # n fails while m's first resource completes: m's second never starts, and m's stack
    # ends FAILED (cancelled) with its parent resource instead of staying IN_PROGRESS
    eng.write("bad.yaml", CHILD.replace("default: false", "default: true"))
    eng.write("two.yaml", """\
        heat_template_version: 2018-08-31
        resources:
          r1: {type: OS::Heat::Value, properties: {value: a}}
          r2: {type: OS::Heat::Value, properties: {value: {get_attr: [r1, value]}}}
        """)
    b = eng.bundle("top2.yaml", """\
        heat_template_version: 2018-08-31
        resources:
          n: {type: bad.yaml}
          m: {type: two.yaml}
        """)
    assert eng.create("s", b)["stack_status"] == "CREATE_FAILED"
    ev = eng.svc.events("s")
    cancelled = "cancelled: CREATE of n.r failed: Test Resource failed r"
    assert of(ev, "s-m") == [
        ("s-m", "CREATE_IN_PROGRESS", "Stack CREATE started"),
        ("m.r1", "CREATE_IN_PROGRESS", "state changed"),
        ("m.r1", "CREATE_COMPLETE", "state changed"),
        ("s-m", "CREATE_FAILED", cancelled),
    ]
    assert ("m", "CREATE_FAILED", f"nested stack s-m failed: {cancelled}") in of(ev, "s")
    assert {k: v["resource_status"] for k, v in eng.res("s", 1).items()} == {
        "n": "CREATE_FAILED", "n.r": "CREATE_FAILED", "m": "CREATE_FAILED", "m.r1": "CREATE_COMPLETE"}
    # the next update converges both
    assert eng.update("s", eng.bundle("top2.yaml"))["stack_status"] == "UPDATE_FAILED"  # n still fails
    eng.write("bad.yaml", CHILD)
    assert eng.update("s", eng.bundle("top2.yaml"))["stack_status"] == "UPDATE_COMPLETE"
    assert {v["resource_status"] for v in eng.res("s", 1).values()} <= {"UPDATE_COMPLETE", "CREATE_COMPLETE"}
