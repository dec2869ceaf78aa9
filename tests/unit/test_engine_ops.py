"""The stack engine in-process: create, update in place, replace, delete, rollback, cancel,
timeouts, nested stacks and groups, dry run, signals. TestResource injects delays/failures."""

from __future__ import annotations

import textwrap
import threading
import time

import pytest
from sqlalchemy import select

from tests.conftest import own_store_url
from undercloud.errors import Conflict, InvalidInput, NotFound
from undercloud.orchestration.engine import StackService
from undercloud.orchestration.template import Bundle, TemplateError
from undercloud.store import Store
from undercloud.store.stacks import Stack, StackResource


class Eng:
    def __init__(self, tmp_path):
        self.dir = tmp_path
        self.store = Store(own_store_url(tmp_path / "engine.db")).create_schema()
        self.svc = StackService(self.store)
        self.svc.keep_last_walk = True  # tests look into the walk

    def write(self, name: str, text: str) -> str:
        path = self.dir / name
        path.write_text(textwrap.dedent(text))
        return str(path)

    def bundle(self, name: str, text: str | None = None) -> dict:
        path = self.write(name, text) if text is not None else str(self.dir / name)
        return Bundle.from_paths(path).to_json()

    def create(self, name, bundle, params=None, **kw):
        return self.svc.create(name, bundle, params or {}, wait=True, **kw) and self.svc.show(name)

    def update(self, name, bundle, params=None, **kw):
        return self.svc.update(name, bundle, params or {}, wait=True, **kw) and self.svc.show(name)

    def res(self, stack: str, depth: int = 0) -> dict[str, dict]:
        return {r["path"]: r for r in self.svc.resources(stack, depth)}

    def events(self, stack: str) -> list[tuple[str, str]]:
        return [(e["resource_name"], e["resource_status"]) for e in self.svc.events(stack)]

    def outputs(self, stack: str) -> dict:
        return {o["output_key"]: o["output_value"] for o in self.svc.show(stack)["outputs"]}


@pytest.fixture
def eng(tmp_path):
    return Eng(tmp_path)


CHAIN = """\
heat_template_version: 2018-08-31
parameters:
  v: {type: string, default: one}
  replace: {type: boolean, default: false}
  fail: {type: boolean, default: false}
  wait: {type: number, default: 0}
resources:
  a:
    type: OS::Heat::TestResource
    properties: {value: {get_param: v}, update_replace: {get_param: replace}}
  b:
    type: OS::Heat::TestResource
    properties:
      value: {list_join: ['-', [{get_attr: [a, output]}, b]]}
      fail: {get_param: fail}
      action_wait_secs: {create: {get_param: wait}, update: {get_param: wait}}
  c:
    type: OS::Heat::Value
    properties: {value: {get_resource: b}}
    depends_on: [a]
outputs:
  b: {value: {get_attr: [b, output]}}
  c: {value: {get_attr: [c, value]}}
"""


def test_create_walks_dependencies_and_stores_outputs(eng):
    s = eng.create("s", eng.bundle("t.yaml", CHAIN))
    assert s["stack_status"] == "CREATE_COMPLETE"
    assert eng.outputs("s") == {"b": "one-b", "c": eng.res("s")["b"]["physical_resource_id"]}
    ev = eng.events("s")
    # one event per transition; a before b (b reads a's attribute), b before c
    assert ev[0] == ("s", "CREATE_IN_PROGRESS") and ev[-1] == ("s", "CREATE_COMPLETE")
    assert ev.index(("a", "CREATE_COMPLETE")) < ev.index(("b", "CREATE_IN_PROGRESS"))
    assert ev.index(("b", "CREATE_COMPLETE")) < ev.index(("c", "CREATE_IN_PROGRESS"))
    assert len(ev) == 2 + 3 * 2
    assert eng.svc.show("s")["progress"] == {"total": 3, "complete": 3, "failed": 0, "in_progress": [],
                                             "in_progress_count": 0}


def test_update_in_place_keeps_physical_ids_and_leaves_unchanged_alone(eng):
    b = eng.bundle("t.yaml", CHAIN)
    eng.create("s", b)
    before = eng.res("s")
    n_events = len(eng.events("s"))
    s = eng.update("s", b, {"v": "two"})
    assert s["stack_status"] == "UPDATE_COMPLETE"
    after = eng.res("s")
    assert {k: r["physical_resource_id"] for k, r in after.items()} == \
           {k: r["physical_resource_id"] for k, r in before.items()}
    assert eng.outputs("s")["b"] == "two-b"
    new = eng.events("s")[n_events:]
    assert ("a", "UPDATE_COMPLETE") in new and ("b", "UPDATE_COMPLETE") in new
    assert not [e for e in new if e[0] == "c"]  # c's property (b's reference) did not change


def test_noop_update_writes_only_stack_events(eng):
    b = eng.bundle("t.yaml", CHAIN)
    eng.create("s", b)
    n = len(eng.events("s"))
    eng.update("s", b)
    assert eng.events("s")[n:] == [("s", "UPDATE_IN_PROGRESS"), ("s", "UPDATE_COMPLETE")]


def test_replace_creates_before_deleting_and_dependents_follow(eng):
    b = eng.bundle("t.yaml", CHAIN)
    eng.create("s", b)
    old_a = eng.res("s")["a"]["physical_resource_id"]
    old_events = len(eng.events("s"))
    eng.update("s", b, {"v": "new", "replace": "true"})
    new_a = eng.res("s")["a"]["physical_resource_id"]
    assert new_a != old_a
    ev = eng.events("s")[old_events:]
    # the replacement exists before the old one is deleted, and the delete comes last
    assert ev.index(("a", "CREATE_COMPLETE")) < ev.index(("a", "DELETE_IN_PROGRESS"))
    assert ev.index(("b", "UPDATE_COMPLETE")) < ev.index(("a", "DELETE_COMPLETE"))
    assert eng.outputs("s")["b"] == "new-b"
    with eng.store.engine.connect() as c:
        assert c.execute(select(StackResource.name)).scalars().all().count("a") == 1


def test_type_change_replaces_and_removed_resources_are_deleted(eng):
    eng.create("s", eng.bundle("t.yaml", CHAIN))
    eng.update("s", eng.bundle("t2.yaml", """\
        heat_template_version: 2018-08-31
        resources:
          a: {type: OS::Heat::Value, properties: {value: x}}
          d: {type: OS::Heat::None}
        """))
    res = eng.res("s")
    assert sorted(res) == ["a", "d"] and res["a"]["resource_type"] == "OS::Heat::Value"
    ev = eng.events("s")
    # b and c go before a (they depended on it)
    assert ev.index(("c", "DELETE_COMPLETE")) < ev.index(("a", "DELETE_COMPLETE"))
    assert ev.index(("b", "DELETE_COMPLETE")) < ev.index(("a", "DELETE_COMPLETE"))


def test_delete_in_reverse_order_and_retain(eng):
    b = eng.bundle("t.yaml", CHAIN.replace("    type: OS::Heat::Value\n",
                                           "    type: OS::Heat::Value\n    deletion_policy: Retain\n"))
    eng.create("s", b)
    sid = eng.svc.show("s")["id"]
    eng.svc.delete("s", wait=True)
    with pytest.raises(NotFound):
        eng.svc.show("s")
    with eng.store.engine.connect() as c:
        assert c.execute(select(StackResource.uuid).where(StackResource.root_id == sid)).all() == []
        assert c.execute(select(Stack.id).where(Stack.root_id == sid)).all() == []


def test_delete_order_events(eng):
    b = eng.bundle("t.yaml", CHAIN.replace("    type: OS::Heat::Value\n",
                                           "    type: OS::Heat::Value\n    deletion_policy: Retain\n"))
    eng.create("s", b)
    seen = []
    orig = eng.svc._purge
    eng.svc._purge = lambda root_id: seen.extend(
        (e["resource_name"], e["resource_status"], e["resource_status_reason"]) for e in eng.svc.events(root_id))
    eng.svc.delete("s", wait=True)
    eng.svc._purge = orig
    names = [(n, st) for n, st, _ in seen]
    assert names.index(("c", "DELETE_COMPLETE")) < names.index(("b", "DELETE_IN_PROGRESS"))
    assert names.index(("b", "DELETE_COMPLETE")) < names.index(("a", "DELETE_IN_PROGRESS"))
    assert ("c", "DELETE_COMPLETE", "retained") in seen


def test_a_nested_stack_is_deleted_after_what_required_its_parent_resource(eng):
    """As Heat, whose template resource deletes its nested stack in its own delete: `net`'s
    tree (down to `leaf`, two levels below, whose parent `mid` nothing requires) is deleted
    only once `user`, which depends on `net`, is. Seen with TripleO master's network-isolation:
    the subnets of `Networks` went at once, while the role groups' ports on them were still
    there ("subnet ... still has addresses in use")."""
    eng.write("inner.yaml", "heat_template_version: 2018-08-31\nresources:\n  leaf: {type: OS::Heat::TestResource}\n")
    eng.write("net.yaml", "heat_template_version: 2018-08-31\nresources:\n  mid: {type: inner.yaml}\n"
                          "  other: {type: OS::Heat::TestResource}\n")
    b = eng.bundle("t.yaml", """\
        heat_template_version: 2018-08-31
        resources:
          net: {type: net.yaml}
          user:
            type: OS::Heat::TestResource
            depends_on: net
            properties: {action_wait_secs: {delete: 0.3}}
    """)
    assert eng.create("s", b)["stack_status"] == "CREATE_COMPLETE"
    seen = []
    orig = eng.svc._purge
    eng.svc._purge = lambda root_id: seen.extend(
        (e["resource_name"], e["resource_status"]) for e in eng.svc.events(root_id))
    eng.svc.delete("s", wait=True)
    eng.svc._purge = orig
    gone = seen.index(("user", "DELETE_COMPLETE"))
    for name in ("s-net", "net.other", "s-net-mid", "net.mid.leaf", "net.mid", "net"):
        assert seen.index((name, "DELETE_IN_PROGRESS")) > gone, name


def test_failure_fails_the_stack_with_the_resource_reason(eng):
    s = eng.create("s", eng.bundle("t.yaml", CHAIN), {"fail": "true"})
    assert s["stack_status"] == "CREATE_FAILED"
    assert "b" in s["stack_status_reason"] and "Test Resource failed b" in s["stack_status_reason"]
    res = eng.res("s")
    assert res["b"]["resource_status"] == "CREATE_FAILED"
    assert "c" not in res  # never started after the failure


def test_create_rollback_deletes_everything(eng):
    s = eng.create("s", eng.bundle("t.yaml", CHAIN), {"fail": "true"}, rollback=True)
    assert s["stack_status"] == "ROLLBACK_COMPLETE"
    assert eng.res("s") == {}
    ev = eng.events("s")
    assert ("s", "CREATE_FAILED") in ev and ("s", "ROLLBACK_IN_PROGRESS") in ev


def test_update_rollback_converges_back_and_restores_replaced(eng):
    b = eng.bundle("t.yaml", CHAIN)
    eng.create("s", b)
    before = {k: r["physical_resource_id"] for k, r in eng.res("s").items()}
    s = eng.update("s", b, {"v": "new", "replace": "true", "fail": "true"}, rollback=True)
    assert s["stack_status"] == "ROLLBACK_COMPLETE", s["stack_status_reason"]
    after = eng.res("s")
    # a was replaced by the failed update: the rollback brings the original back
    assert after["a"]["physical_resource_id"] == before["a"]
    assert all(r["resource_status"].endswith("COMPLETE") for r in after.values())
    assert eng.outputs("s")["b"] == "one-b"
    # a later update starts from the rolled-back state
    assert eng.update("s", b, {"v": "three"})["stack_status"] == "UPDATE_COMPLETE"
    assert eng.outputs("s")["b"] == "three-b"


def test_update_failure_without_rollback_stays_failed_then_recovers(eng):
    b = eng.bundle("t.yaml", CHAIN)
    eng.create("s", b)
    s = eng.update("s", b, {"v": "x", "fail": "true"})
    assert s["stack_status"] == "UPDATE_FAILED"
    s = eng.update("s", b, {"v": "y"})
    assert s["stack_status"] == "UPDATE_COMPLETE", s["stack_status_reason"]
    assert eng.outputs("s")["b"] == "y-b"


def test_cancel_stops_an_update_in_progress(eng):
    b = eng.bundle("t.yaml", CHAIN)
    eng.create("s", b)
    eng.svc.update("s", b, {"v": "slow", "wait": "60"})
    deadline = time.time() + 10
    while eng.svc.show("s")["progress"]["in_progress_count"] == 0 and time.time() < deadline:
        time.sleep(0.05)
    eng.svc.cancel("s")
    eng.svc.wait("s", 10)  # the slow resource waits 60 s: only the cancel ends it within these 10
    s = eng.svc.show("s")
    assert s["stack_status"] == "UPDATE_FAILED" and "cancelled" in s["stack_status_reason"]
    assert eng.res("s")["b"]["resource_status"] == "UPDATE_FAILED"
    with pytest.raises(Conflict):
        eng.svc.cancel("s")


def test_cancel_with_rollback_returns_to_previous(eng):
    b = eng.bundle("t.yaml", CHAIN)
    eng.create("s", b)
    eng.svc.update("s", b, {"v": "slow", "wait": "60"}, rollback=True)
    deadline = time.time() + 10
    while eng.svc.show("s")["progress"]["in_progress_count"] == 0 and time.time() < deadline:
        time.sleep(0.05)
    eng.svc.cancel("s")
    eng.svc.wait("s", 20)
    s = eng.svc.show("s")
    assert s["stack_status"] == "ROLLBACK_COMPLETE", s["stack_status_reason"]
    assert eng.outputs("s")["b"] == "one-b"


def test_timeout_names_what_was_awaited(eng):
    s = eng.create("s", eng.bundle("t.yaml", CHAIN), {"wait": "30"}, timeout=0.5)
    assert s["stack_status"] == "CREATE_FAILED"
    assert "timed out after" in s["stack_status_reason"]
    assert "TestResource b to finish its create wait of 30 s" in s["stack_status_reason"]


def test_parallel_walk(eng):
    text = "heat_template_version: 2018-08-31\nresources:\n" + "".join(
        f"  r{i}:\n    type: OS::Heat::TestResource\n    properties: {{action_wait_secs: {{create: 1}}}}\n"
        for i in range(10))
    assert eng.create("s", eng.bundle("p.yaml", text))["stack_status"] == "CREATE_COMPLETE"
    # ten 1-second resources side by side: all ten started before the first one finished
    order = [e["resource_status"] for e in eng.svc.events("s") if e["resource_name"].startswith("r")]
    assert order[:10] == ["CREATE_IN_PROGRESS"] * 10 and order[10:] == ["CREATE_COMPLETE"] * 10


def test_bad_input_writes_nothing(eng):
    bad = eng.bundle("bad.yaml", "heat_template_version: 2018-08-31\nresources:\n  n: {type: OS::Neutron::Router}\n")
    with pytest.raises(TemplateError) as e:
        eng.svc.create("s", bad, {})
    assert "bad.yaml:3" in str(e.value) and "OS::Neutron::Router" in str(e.value)
    with pytest.raises(InvalidInput):
        eng.svc.create("1bad name", eng.bundle("t.yaml", CHAIN), {})
    with eng.store.engine.connect() as c:
        assert c.execute(select(Stack.id)).all() == []
    eng.create("s", eng.bundle("t.yaml", CHAIN))
    with pytest.raises(Conflict):
        eng.svc.create("s", eng.bundle("t.yaml", CHAIN), {})
    with pytest.raises(NotFound):
        eng.svc.update("nope", eng.bundle("t.yaml", CHAIN), {})
    with pytest.raises(TemplateError):
        eng.svc.update("s", bad, {})
    assert eng.svc.show("s")["stack_status"] == "CREATE_COMPLETE"


NESTED_TOP = """\
heat_template_version: 2018-08-31
parameters:
  n: {type: string, default: x}
resources:
  first:
    type: child.yaml
    properties: {name: {get_param: n}}
  second:
    type: child.yaml
    properties: {name: {get_attr: [first, out]}}
outputs:
  out: {value: {get_attr: [second, out]}}
"""
NESTED_CHILD = """\
heat_template_version: 2018-08-31
parameters:
  name: {type: string}
resources:
  v:
    type: OS::Heat::Value
    properties: {value: {str_replace: {template: "<$N>", params: {$N: {get_param: name}}}}}
  t:
    type: OS::Heat::TestResource
    properties: {value: {get_attr: [v, value]}}
outputs:
  out: {value: {get_attr: [t, output]}}
"""


def test_nested_stacks_in_one_walk(eng):
    eng.write("child.yaml", NESTED_CHILD)
    b = eng.bundle("top.yaml", NESTED_TOP)
    s = eng.create("s", b)
    assert s["stack_status"] == "CREATE_COMPLETE", s["stack_status_reason"]
    assert eng.outputs("s") == {"out": "<<x>>"}
    assert sorted(eng.res("s", 1)) == ["first", "first.t", "first.v", "second", "second.t", "second.v"]
    # a parameter change flows through both nested stacks
    eng.update("s", b, {"n": "y"})
    assert eng.outputs("s") == {"out": "<<y>>"}
    # an edit of the nested file alone updates both nested stacks
    eng.write("child.yaml", NESTED_CHILD.replace('"<$N>"', '"[$N]"'))
    b2 = Bundle.from_paths(str(eng.dir / "top.yaml")).to_json()
    plan = eng.svc.update("s", b2, {"n": "y"}, dry_run=True)
    assert "first.v" in plan["update"] and plan["create"] == [] and plan["delete"] == []
    eng.update("s", b2, {"n": "y"})
    assert eng.outputs("s") == {"out": "[[y]]"}
    r = eng.svc.resource("s", "first.t")
    assert r["attributes"] == {"output": "[y]"}


GROUP = """\
heat_template_version: 2018-08-31
parameters:
  count: {type: number, default: 3}
  remove: {type: comma_delimited_list, default: []}
resources:
  group:
    type: OS::Heat::ResourceGroup
    properties:
      count: {get_param: count}
      removal_policies: [{resource_list: {get_param: remove}}]
      resource_def:
        type: OS::Heat::TestResource
        properties: {value: "member-%index%"}
outputs:
  refs: {value: {get_attr: [group, refs]}}
  values: {value: {get_attr: [group, output]}}
  one: {value: {get_attr: [group, resource.1, output]}}
  one_dotted: {value: {get_attr: [group, resource.1.output]}}
  by_name: {value: {get_attr: [group, attributes, output]}}
"""


def test_resource_group_count_index_removal(eng):
    b = eng.bundle("g.yaml", GROUP)
    eng.create("s", b)
    out = eng.outputs("s")
    assert out["values"] == ["member-0", "member-1", "member-2"]
    assert out["one"] == out["one_dotted"] == "member-1"
    assert out["by_name"] == {"0": "member-0", "1": "member-1", "2": "member-2"}
    assert len(out["refs"]) == 3
    eng.update("s", b, {"count": "5"})
    assert eng.outputs("s")["values"] == [f"member-{i}" for i in range(5)]
    # remove member 1: its name is never used again; the count is kept with a new member
    eng.update("s", b, {"count": "5", "remove": "1"})
    members = sorted(k for k in eng.res("s", 1) if k.startswith("group."))
    assert members == ["group.0", "group.2", "group.3", "group.4", "group.5"]
    eng.update("s", b, {"count": "2", "remove": "1"})
    assert sorted(k for k in eng.res("s", 1) if k.startswith("group.")) == ["group.0", "group.2"]


INDEX_IN_KEYS = """\
heat_template_version: wallaby
parameters:
  remove: {type: comma_delimited_list, default: ["0"]}
resources:
  g:
    type: OS::Heat::ResourceGroup
    properties:
      count: 2
      removal_policies: [{resource_list: {get_param: remove}}]
      resource_def:
        type: OS::Heat::Value
        metadata: {"m%index%": "n%index%"}
        properties:
          value: {"k%index%": "v%index%", "list": ["a%index%"]}
          type: json
outputs:
  out: {value: {get_attr: [g, value]}}
"""


def test_a_group_replaces_its_index_as_heat_does_and_preview_agrees(eng):
    # Real Heat (tools/heat_oracle.py) printed this: index_var is replaced in property
    # values, deep, and never in map keys; Heat's source leaves the metadata as written.
    from undercloud.orchestration.template import load
    from undercloud.orchestration.template.preview import preview

    b = eng.bundle("i.yaml", INDEX_IN_KEYS)
    eng.create("s", b)
    assert eng.outputs("s")["out"] == [{"k%index%": "v1", "list": ["a1"]}, {"k%index%": "v2", "list": ["a2"]}]
    rows = {r["name"]: r for r in preview(load(Bundle.from_json(b), {}))}
    assert sorted(n for n in rows if n.startswith("g.")) == ["g.1", "g.2"]  # "0" removed, as the engine
    assert rows["g.2"]["properties"]["value"] == {"k%index%": "v2", "list": ["a2"]}
    with eng.store.session() as s:
        kept = s.scalars(select(StackResource.rsrc_metadata).where(StackResource.name == "2")).one()
    assert kept == {"m%index%": "n%index%"}


EDITED_TOP = """\
heat_template_version: 2018-08-31
resources:
  a: {type: child.yaml, properties: {name: a}}
  b: {type: child.yaml, properties: {name: b}}
  script: {type: OS::Heat::Value, properties: {value: {get_file: run.sh}}}
outputs:
  a: {value: {get_attr: [a, out]}}
  script: {value: {get_attr: [script, value]}}
"""


def test_an_edit_that_changes_no_meaning_walks_no_nested_stack(eng):
    eng.write("child.yaml", NESTED_CHILD)
    script = "set -e\nfor x in a b; do echo $x: [; done\n"  # not YAML: a data file, by its text
    eng.write("run.sh", script)
    eng.create("s", eng.bundle("top.yaml", EDITED_TOP))

    def update() -> int:
        eng.update("s", Bundle.from_paths(str(eng.dir / "top.yaml")).to_json())
        assert eng.svc.show("s")["stack_status"] == "UPDATE_COMPLETE"
        return len(eng.svc.last_walk.stacks)  # the stacks this update walked

    # a comment and a new layout in the templates: the same documents, no nested stack walked
    eng.write("child.yaml", "# edited\n" + NESTED_CHILD.replace("  name: {type: string}", "  name:\n    type: string"))
    eng.write("top.yaml", EDITED_TOP + "# edited too\n")
    assert update() == 1
    # a file get_file reads is a value: a comment in it is a change
    eng.write("run.sh", script + "# edited\n")
    update()
    assert eng.outputs("s") == {"a": "<a>", "script": script + "# edited\n"}
    # a change of meaning in the nested template walks both nested stacks
    eng.write("child.yaml", NESTED_CHILD.replace('"<$N>"', '"[$N]"'))
    assert update() == 3
    assert eng.outputs("s")["a"] == "[a]"


def test_max_fail_tolerates_group_members_only_and_counts_them(eng):
    text = GROUP.replace("  remove: {type: comma_delimited_list, default: []}\n",
                         "  remove: {type: comma_delimited_list, default: []}\n"
                         "  v: {type: string, default: member}\n  fail: {type: boolean, default: false}\n"
                         ).replace('properties: {value: "member-%index%"}',
                                   'properties: {value: {list_join: ["-", [{get_param: v}, "%index%"]]}, '
                                   'fail: {get_param: fail}}')
    b = eng.bundle("g.yaml", text)
    eng.create("s", b)
    # every member fails, two tolerated: the third fails the update, which rolls back
    s = eng.update("s", b, {"v": "new", "fail": "true"}, max_fail=2, rollback=True)
    assert s["stack_status"] == "ROLLBACK_COMPLETE", s["stack_status_reason"]
    assert eng.outputs("s")["values"] == ["member-0", "member-1", "member-2"]
    # three tolerated: each back on its previous value, the update complete
    s = eng.update("s", b, {"v": "new", "fail": "true"}, max_fail=3)
    assert s["stack_status"] == "UPDATE_COMPLETE", s["stack_status_reason"]
    assert "3 member(s) failed and were rolled back to their previous properties (max_fail 3): group.0: " \
           "Test Resource failed 0" in s["stack_status_reason"]
    assert eng.outputs("s")["values"] == ["member-0", "member-1", "member-2"]
    assert {r["resource_status"] for k, r in eng.res("s", 1).items() if k.startswith("group.")} == {"ROLLBACK_COMPLETE"}
    # a later failing update's rollback leaves them where they are (its previous
    # definition is the one they failed on)
    s = eng.update("s", b, {"v": "newer", "fail": "true"}, rollback=True)
    assert s["stack_status"] == "ROLLBACK_COMPLETE", s["stack_status_reason"]
    assert eng.outputs("s")["values"] == ["member-0", "member-1", "member-2"]
    # a failing resource outside a group is never tolerated
    c = eng.bundle("t.yaml", CHAIN)
    eng.create("c", c)
    assert eng.update("c", c, {"v": "x", "fail": "true"}, max_fail=5)["stack_status"] == "UPDATE_FAILED"
    # the next update converges what was rolled back
    s = eng.update("s", b, {"v": "new"})
    assert s["stack_status"] == "UPDATE_COMPLETE", s["stack_status_reason"]
    assert eng.outputs("s")["values"] == ["new-0", "new-1", "new-2"]
    with pytest.raises(InvalidInput, match="max_fail must be a whole number"):
        eng.svc.update("s", b, {}, max_fail=-1)


def test_group_batch_create_orders_members(eng):
    text = GROUP.replace("    properties:\n      count", "    update_policy: {batch_create: {max_batch_size: 1}}\n"
                         "    properties:\n      count").replace(
        'properties: {value: "member-%index%"}',
        'properties: {value: "member-%index%", action_wait_secs: {create: 0.2}}')
    eng.create("s", eng.bundle("g.yaml", text))
    ev = [e for e in eng.events("s") if e[0].startswith("group.")]
    assert ev == [("group.0", "CREATE_IN_PROGRESS"), ("group.0", "CREATE_COMPLETE"),
                  ("group.1", "CREATE_IN_PROGRESS"), ("group.1", "CREATE_COMPLETE"),
                  ("group.2", "CREATE_IN_PROGRESS"), ("group.2", "CREATE_COMPLETE")]


def test_dry_run_says_exactly_what_changes_and_changes_nothing(eng):
    b = eng.bundle("t.yaml", CHAIN)
    eng.create("s", b)
    n = len(eng.events("s"))
    plan = eng.svc.update("s", eng.bundle("t2.yaml", CHAIN.replace("  c:\n", "  d:\n    type: OS::Heat::None\n  c:\n")
                                          .replace("depends_on: [a]", "depends_on: [a, d]")),
                          {"v": "new", "replace": "true"}, dry_run=True)
    assert plan["replace"] == ["a (changed: update_replace, value)"]
    assert plan["create"] == ["d"]
    assert plan["delete"] == ["a (replaced)"]
    assert plan["update"] == ["b (inputs from a)"]
    assert len(eng.events("s")) == n and eng.svc.show("s")["stack_status"] == "CREATE_COMPLETE"


def handle_token(eng) -> str:
    """What a node gets through get_attr [handle, token] (masked in resource show)."""
    with eng.store.engine.connect() as c:
        data = c.execute(select(StackResource.data).where(StackResource.name == "handle")).scalar()
    return data["token"]


def test_wait_condition_completes_on_signal(eng):
    b = eng.bundle("w.yaml", """\
        heat_template_version: 2018-08-31
        resources:
          handle: {type: OS::Heat::WaitConditionHandle}
          wait:
            type: OS::Heat::WaitCondition
            properties: {handle: {get_resource: handle}, timeout: 30, count: 2}
        outputs:
          data: {value: {get_attr: [wait, data]}}
        """)
    eng.svc.create("s", b, {})
    sid = eng.svc.show("s")["id"]
    deadline = time.time() + 10
    while eng.svc.show("s")["progress"]["in_progress"] != ["wait"] and time.time() < deadline:
        time.sleep(0.05)
    assert eng.svc.resource("s", "handle")["attributes"]["token"] == "******"  # a secret
    token = handle_token(eng)
    with pytest.raises(NotFound):
        eng.svc.signal(sid, "handle", {"status": "SUCCESS"}, token="wrong")
    eng.svc.signal(sid, "handle", {"status": "SUCCESS", "id": "1", "data": "one"}, token=token)
    assert eng.svc.show("s")["stack_status"] == "CREATE_IN_PROGRESS"
    eng.svc.signal(sid, "handle", {"status": "SUCCESS", "id": "2", "data": "two"}, token=token)
    eng.svc.wait("s", 10)
    assert eng.svc.show("s")["stack_status"] == "CREATE_COMPLETE"
    assert eng.outputs("s")["data"] == '{"1": "one", "2": "two"}'


def test_wait_condition_failure_signal(eng):
    b = eng.bundle("w.yaml", """\
        heat_template_version: 2018-08-31
        resources:
          handle: {type: OS::Heat::WaitConditionHandle}
          wait:
            type: OS::Heat::WaitCondition
            properties: {handle: {get_resource: handle}, timeout: 30}
        """)
    eng.svc.create("s", b, {})
    sid = eng.svc.show("s")["id"]
    deadline = time.time() + 10
    while eng.svc.show("s")["progress"]["in_progress"] != ["wait"] and time.time() < deadline:
        time.sleep(0.05)
    token = handle_token(eng)
    eng.svc.signal(sid, "handle", {"status": "FAILURE", "reason": "disk full"}, token=token)
    eng.svc.wait("s", 10)
    s = eng.svc.show("s")
    assert s["stack_status"] == "CREATE_FAILED" and "disk full" in s["stack_status_reason"]


def test_hidden_parameters_are_masked(eng):
    b = eng.bundle("h.yaml", """\
        heat_template_version: 2018-08-31
        parameters:
          secret: {type: string, hidden: true}
        resources:
          v: {type: OS::Heat::None}
        """)
    eng.create("s", b, {"secret": "hunter2"})
    assert eng.svc.show("s")["parameters"] == {"secret": "******"}
    assert "hunter2" not in str(eng.svc.events("s"))


def test_two_stacks_run_side_by_side(eng):
    b = eng.bundle("t.yaml", CHAIN)
    threads = [threading.Thread(target=eng.create, args=(f"s{i}", b, {"wait": "0.5"})) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [s["stack_status"] for s in eng.svc.list()] == ["CREATE_COMPLETE"] * 3


NESTED_PARAM = """\
heat_template_version: 2018-08-31
parameters:
  top: {type: string, default: t1}
resources:
  inner:
    type: inner.yaml
outputs:
  top: {value: {get_param: top}}
  inner: {value: {get_attr: [inner, v]}}
"""


def test_update_existing_keeps_the_stored_bundle_and_parameters_and_takes_an_inline_environment(eng):
    """Heat's PATCH: the stored template and parameters stay, the given ones go over them;
    an inline environment's parameter_defaults reach nested templates (a top template's
    `parameters` could not name their parameters), merged over an earlier inline one."""
    eng.write("inner.yaml", """\
        heat_template_version: 2018-08-31
        parameters:
          Inner: {type: string, default: i1}
          Other: {type: string, default: o1}
        outputs:
          v: {value: {list_join: ['/', [{get_param: Inner}, {get_param: Other}]]}}
        """)
    eng.create("s", eng.bundle("top.yaml", NESTED_PARAM), {"top": "t2"})
    assert eng.outputs("s") == {"top": "t2", "inner": "i1/o1"}
    eng.update("s", None, {}, existing=True, environment={"parameter_defaults": {"Inner": "i2"}})
    assert eng.svc.show("s")["stack_status"] == "UPDATE_COMPLETE"
    assert eng.outputs("s") == {"top": "t2", "inner": "i2/o1"}
    eng.update("s", None, {"top": "t3"}, existing=True, environment={"parameter_defaults": {"Other": "o2"}})
    assert eng.outputs("s") == {"top": "t3", "inner": "i2/o2"}
    with pytest.raises(InvalidInput, match="an update needs a bundle"):
        eng.svc.update("s", None, {})
    with pytest.raises(InvalidInput, match="only {parameter_defaults"):
        eng.svc.update("s", None, {}, existing=True, environment={"resource_registry": {}})
    assert eng.outputs("s") == {"top": "t3", "inner": "i2/o2"}  # nothing changed by the refused ones


def test_a_failed_update_goes_straight_to_its_rollback_never_written_failed(eng, monkeypatch):
    """A client polling the stack stops at the first status that is not IN_PROGRESS: the
    row must never say UPDATE_FAILED between the failure and the rollback it starts (the
    ha e2e's `overcloud update` once read that and reported the rollback as failed)."""
    from undercloud.orchestration.engine.writer import Writer

    b = eng.bundle("t.yaml", CHAIN)
    root_id = eng.create("s", b)["id"]
    written = []
    real = Writer.flush

    def flush(self):
        written.extend((s["action"], s["status"]) for s in self.dirty_stacks.values() if s["id"] == root_id)
        return real(self)

    monkeypatch.setattr(Writer, "flush", flush)
    s = eng.update("s", b, {"v": "new", "fail": "true"}, rollback=True)
    assert s["stack_status"] == "ROLLBACK_COMPLETE", s["stack_status_reason"]
    assert ("UPDATE", "FAILED") not in written and ("ROLLBACK", "IN_PROGRESS") in written, written
    ev = eng.events("s")
    assert ev.index(("s", "UPDATE_FAILED")) < ev.index(("s", "ROLLBACK_IN_PROGRESS")) < ev.index(("s", "ROLLBACK_COMPLETE"))
