"""The engine under hostile stacks, in-process: limits hit at run time fail the resource in one
line, every operation stops within seconds (cancel, delete, service stop), an operation that
dies with the service each time ends FAILED, and no reason, event or log line carries a hidden
value or an internal error's message."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from tests.unit.test_engine_ops import Eng
from undercloud.orchestration.engine import StackService
from undercloud.orchestration.engine.writer import Writer
from undercloud.orchestration.limits import LIMITS, override
from undercloud.orchestration.resources import registry
from undercloud.orchestration.resources.base import Plugin, ResourceFailure
from undercloud.store.stacks import Stack, StackResource

SECRET = "pw-Zq8xK3vT9nL2"


@pytest.fixture
def eng(tmp_path):
    return Eng(tmp_path)


def everything(eng: Eng, name: str) -> str:
    """All a user can read of a stack, as one text."""
    show = eng.svc.show(name)
    parts = [repr(show), repr(eng.svc.events(name)), repr(eng.svc.resources(name, 5))]
    for r in eng.svc.resources(name, 5):
        parts.append(repr(eng.svc.resource(name, r["path"])))
    return "\n".join(parts)


RUNTIME_GROUP = """\
heat_template_version: 2021-04-16
parameters:
  n: {type: number, default: 2}
resources:
  count: {type: OS::Heat::Value, properties: {value: {get_param: n}}}
  g:
    type: OS::Heat::ResourceGroup
    properties:
      count: {get_attr: [count, value]}
      resource_def: {type: OS::Heat::None}
"""


def test_a_group_count_known_only_at_run_time_is_checked_then(eng):
    t = time.monotonic()
    s = eng.create("g", eng.bundle("g.yaml", RUNTIME_GROUP), {"n": 10_000_000})
    assert time.monotonic() - t < 5
    assert s["stack_status"] == "CREATE_FAILED"
    assert s["stack_status_reason"] == (
        "Stack CREATE failed: CREATE of g failed: the count of members (10,000,000) is more than the limit "
        "of 10,000 (set UNDERCLOUD_MAX_GROUP_COUNT to change it)")


def test_resources_of_the_tree_are_counted_as_nested_stacks_start(eng):
    with override(resources=30):
        s = eng.create("g", eng.bundle("g.yaml", RUNTIME_GROUP), {"n": 40})
    assert s["stack_status"] == "CREATE_FAILED"
    assert s["stack_status_reason"].endswith(
        "CREATE of g failed: the number of resources of the stack tree (42) is more than the limit of 30 "
        "(set UNDERCLOUD_MAX_RESOURCES_PER_STACK to change it)")
    with eng.store.engine.connect() as c:  # the group's members were never made
        assert c.execute(select(func.count()).select_from(StackResource.__table__)).scalar() == 2


HUGE = """\
heat_template_version: 2021-04-16
parameters:
  secret: {type: string, hidden: true}
resources:
  seed: {type: OS::Heat::Value, properties: {value: {get_param: secret}}}
  big:
    type: OS::Heat::Value
    properties:
      value:
        str_replace:
          template: "OUTER"
          params:
            $s:
              str_replace:
                template: "INNER"
                params: {$t: {get_attr: [seed, value]}}
""".replace("OUTER", "$s" * 1000).replace("INNER", "$t" * 1000)


def test_a_huge_value_fails_its_resource_and_never_shows_the_hidden_value(eng, caplog):
    caplog.set_level(logging.DEBUG)
    t = time.monotonic()
    s = eng.create("h", eng.bundle("h.yaml", HUGE), {"secret": SECRET})
    assert time.monotonic() - t < 5
    assert s["stack_status"] == "CREATE_FAILED"
    reason = eng.res("h")["big"]["resource_status"], eng.svc.resource("h", "big")["resource_status_reason"]
    assert reason[0] == "CREATE_FAILED"
    assert reason[1].startswith("resources.big.properties: ") and "h.yaml:10: resources.big.properties.value" in reason[1]
    assert "(15,000,000) is more than the limit of 4,194,304 (set UNDERCLOUD_MAX_VALUE_CHARS" in reason[1]
    text = everything(eng, "h")
    assert SECRET not in text and SECRET not in caplog.text
    assert s["parameters"] == {"secret": "******"}


def test_a_store_error_is_an_internal_error_with_an_id(eng, monkeypatch, caplog):
    real, calls = Writer.flush, []

    def flush(self):
        calls.append(1)
        if len(calls) == 2:  # the first write of the walk: the store refuses it, quoting the values
            raise IntegrityError("INSERT INTO stack_resources ...", {"properties": SECRET}, Exception("boom"))
        real(self)

    monkeypatch.setattr(Writer, "flush", flush)
    caplog.set_level(logging.INFO)
    s = eng.create("e", eng.bundle("e.yaml", HUGE.split("  big:")[0]), {"secret": SECRET})
    assert s["stack_status"] == "CREATE_FAILED"
    reason = s["stack_status_reason"]
    assert reason.startswith("Stack CREATE failed: internal error ") and len(reason.split()[-1]) == 8
    ident = reason.split()[-1]
    assert f"internal error {ident} (operation of stack" in caplog.text
    assert "IntegrityError" in caplog.text  # the type and where, for whoever fixes it
    assert SECRET not in caplog.text and SECRET not in everything(eng, "e") and "INSERT" not in reason


class Leaky(Plugin):
    """A plugin with a bug: its exception's message holds a value."""

    type_name = "Test::Leaky"

    def create(self) -> None:
        raise KeyError(self.properties.get("p"))


class Verbose(Plugin):
    type_name = "Test::Verbose"

    def create(self) -> None:
        raise ResourceFailure(f"the tool said: {self.properties.get('p')} " + "blah " * 5000)


@pytest.fixture
def plugins():
    for cls in (Leaky, Verbose):
        registry.register(cls)
    yield
    for cls in (Leaky, Verbose):
        registry.unregister(cls.type_name)


@pytest.mark.parametrize("rtype, expected", [
    ("Test::Leaky", "internal error "),
    ("Test::Verbose", "the tool said: ****** blah blah"),
])
def test_plugin_failures_are_masked_cut_or_internal(eng, plugins, caplog, rtype, expected):
    caplog.set_level(logging.INFO)
    text = f"""\
heat_template_version: 2021-04-16
parameters:
  secret: {{type: string, hidden: true}}
resources:
  r: {{type: {rtype}, properties: {{p: {{get_param: secret}}}}}}
"""
    s = eng.create("p", eng.bundle("p.yaml", text), {"secret": SECRET})
    assert s["stack_status"] == "CREATE_FAILED"
    reason = eng.svc.resource("p", "r")["resource_status_reason"]
    assert reason.startswith(expected), reason
    assert len(reason) <= LIMITS.message_chars
    assert all(len(e["resource_status_reason"]) <= LIMITS.message_chars for e in eng.svc.events("p"))
    assert SECRET not in everything(eng, "p") and SECRET not in caplog.text


BUSY = """\
heat_template_version: 2021-04-16
resources:
  g:
    type: OS::Heat::ResourceGroup
    properties:
      count: 8000
      resource_def:
        type: OS::Heat::Value
        properties: {value: {list_join: ['-', [m, '%index%', {repeat: {template: x%i%, for_each: {'%i%': [a, b, c]}}}]]}}
"""


def start_busy(eng: Eng) -> str:
    """A create that keeps the walk busy for seconds (8,000 members decided in one round)."""
    eng.svc.create("busy", eng.bundle("busy.yaml", BUSY), {})
    sid = eng.svc.show("busy")["id"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until the group's nested stack is being walked
        with eng.store.engine.connect() as c:
            if c.execute(select(func.count()).select_from(Stack.__table__)).scalar() > 1:
                return sid
        time.sleep(0.02)
    raise AssertionError("the nested stack never started")


def test_cancel_stops_a_busy_walk_within_seconds(eng):
    sid = start_busy(eng)
    t = time.monotonic()
    eng.svc.cancel("busy")
    eng.svc.wait("busy", 30)
    took = time.monotonic() - t
    assert took < 5, f"cancel took {took:.1f} s"
    s = eng.svc.show(sid)
    assert s["stack_status"] == "CREATE_FAILED" and "cancelled by request" in s["stack_status_reason"]


def test_delete_supersedes_a_busy_walk_within_seconds(eng):
    start_busy(eng)
    t = time.monotonic()
    eng.svc.delete("busy")
    took = time.monotonic() - t
    assert took < 5, f"delete took {took:.1f} s to take over"
    eng.svc.wait("busy", 60)
    assert [s["stack_name"] for s in eng.svc.list()] == []


SLOW = """\
heat_template_version: 2021-04-16
resources:
  a: {type: OS::Heat::TestResource, properties: {action_wait_secs: {create: 2}}}
  b: {type: OS::Heat::TestResource, properties: {value: {get_attr: [a, output]}}}
"""


def test_service_stop_ends_walks_and_the_next_start_resumes(eng):
    eng.svc.create("s", eng.bundle("s.yaml", SLOW), {})
    time.sleep(0.5)
    t = time.monotonic()
    eng.svc.stop()
    assert time.monotonic() - t < 2
    assert not any(th.name.startswith("stack-") and th.is_alive() for th in threading.enumerate())
    assert eng.svc.show("s")["stack_status"] == "CREATE_IN_PROGRESS"  # left for the resume
    again = StackService(eng.store)
    assert again.resume_all() == [eng.svc.show("s")["id"]]
    again.wait("s", 30)
    assert again.show("s")["stack_status"] == "CREATE_COMPLETE"
    op = eng.store.engine.connect().execute(select(Stack.__table__.c.operation)).scalar()
    assert op["resumes"] == 1


def test_an_operation_interrupted_at_every_start_ends_failed(eng):
    eng.svc.create("s", eng.bundle("s.yaml", SLOW), {})
    time.sleep(0.3)
    eng.svc.stop()
    for _ in range(LIMITS.resumes):  # each start resumes it, and dies (stopped) before it ends
        svc = StackService(eng.store)
        assert svc.resume_all()
        svc.stop(wait=0)
        svc.wait("s", 5)
    last = StackService(eng.store)
    assert last.resume_all() == []
    s = last.show("s")
    assert s["stack_status"] == "CREATE_FAILED"
    assert s["stack_status_reason"] == (
        f"Stack CREATE failed: interrupted by {LIMITS.resumes} restarts of the undercloud service without "
        "finishing; not resumed again (set UNDERCLOUD_MAX_RESUMES to allow more)")
    assert last.delete("s", wait=True)["stack_status"] == "DELETE_COMPLETE"


BATCHED = """\
heat_template_version: 2021-04-16
parameters:
  n: {type: number, default: 6}
  wait: {type: number, default: 0.3}
resources:
  g:
    type: OS::Heat::ResourceGroup
    update_policy: {batch_create: {max_batch_size: SIZE}}
    properties:
      count: {get_param: n}
      resource_def: {type: OS::Heat::TestResource, properties: {action_wait_secs: {create: {get_param: wait}}}}
"""


def test_group_batches_bound_the_members_in_progress_with_one_edge_each(eng):
    s = eng.create("b", eng.bundle("b.yaml", BATCHED.replace("SIZE", "2")))
    assert s["stack_status"] == "CREATE_COMPLETE"
    busy, most = set(), 0
    for name, status in eng.events("b"):
        if name.startswith("g."):
            (busy.add if status == "CREATE_IN_PROGRESS" else busy.discard)(name)
            most = max(most, len(busy))
    assert most == 2
    # 9,998 members in batches of 4,999: 4,999 dependencies, not 25 million
    t = time.monotonic()
    s = eng.create("big", eng.bundle("big.yaml", BATCHED.replace("SIZE", "4999")), {"n": 9_998, "wait": 0})
    assert s["stack_status"] == "CREATE_COMPLETE" and time.monotonic() - t < 60
    tmpl = eng.svc.last_walk.stacks[1].tmpl
    assert sum(len(d) for d in tmpl.dependencies().values()) == 4_999
    s = eng.create("bad", eng.bundle("bad.yaml", BATCHED.replace("SIZE", "-1")))
    assert s["stack_status_reason"].endswith("update_policy.batch_create.max_batch_size must be a whole number "
                                             "of 1 or more, not '-1'")


def test_finding_a_peer_is_not_a_scan_of_the_stack(eng):
    from undercloud.orchestration.engine.walk import StackNode, Walk, new_root_row
    from undercloud.orchestration.engine.writer import ResourceRow

    root = new_root_row("s", {}, {}, "", "CREATE", {})
    rows = [ResourceRow(name=f"r{i}", ref=f"ref-{i}", physical_id=f"phys-{i}", type="OS::Heat::None",
                        uuid=f"u{i}", properties={}, data={}, stack_id=root["id"], root_id=root["id"],
                        action="CREATE", status="COMPLETE") for i in range(20_000)]
    stack = StackNode(root, None, rows)
    find = Walk(eng.store, root).peer_finder(stack)
    t = time.monotonic()
    found = [find(f"ref-{i}") for i in range(0, 20_000, 2)] + [find(f"phys-{i}") for i in range(1, 20_000, 2)]
    missing = [find(f"other-{i}") for i in range(10_000)]  # configs of other stacks: misses, as often
    assert time.monotonic() - t < 2  # a scan each: 3 * 10**8 comparisons
    assert [p.name for p in found[:2]] == ["r0", "r2"] and found[-1].name == "r19999"
    assert missing == [None] * 10_000 and find("r5").name == "r5"
