"""`undercloud stack ...` through the real service: what users see and the exit codes."""

from __future__ import annotations

import json

from tests.conftest import run_cli

TEMPLATE = """\
heat_template_version: 2018-08-31
parameters:
  v: {type: string, default: one}
  fail: {type: boolean, default: false}
  secret: {type: string, default: s3cr3t-value, hidden: true}
resources:
  a:
    type: OS::Heat::TestResource
    properties: {value: {get_param: v}, fail: {get_param: fail}}
  group:
    type: OS::Heat::ResourceGroup
    properties:
      count: 2
      resource_def: {type: OS::Heat::Value, properties: {value: {get_attr: [a, output]}}}
outputs:
  a: {value: {get_attr: [a, output]}}
  values: {value: {get_attr: [group, value]}}
"""


def test_stack_lifecycle_from_the_cli(uc_home, tmp_path):
    t = tmp_path / "t.yaml"
    t.write_text(TEMPLATE)
    r = run_cli("stack", "create", "demo", "-t", str(t), "--wait", "-f", "json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)  # stdout is only the requested output
    assert s["stack_status"] == "CREATE_COMPLETE"
    assert "4/4 resources complete" in r.stderr
    assert s["parameters"] == {}  # only what was given

    r = run_cli("stack", "output", "show", "demo", "values", "-f", "json")
    assert json.loads(r.stdout)["output_value"] == ["one", "one"]
    r = run_cli("stack", "resource", "list", "demo", "--nested-depth", "1", "-f", "json")
    assert sorted(x["resource_name"] for x in json.loads(r.stdout)) == ["a", "group", "group.0", "group.1"]
    r = run_cli("stack", "resource", "show", "demo", "group.1", "-f", "json")
    assert json.loads(r.stdout)["attributes"] == {"value": "one"}

    r = run_cli("stack", "update", "demo", "-t", str(t), "-P", "v=two", "--dry-run", "-f", "json")
    plan = json.loads(r.stdout)
    assert plan["update"] == ["a", "group (inputs from a)", "group.* (may change with inputs from a)"]
    assert plan["create"] == plan["replace"] == plan["delete"] == []
    assert json.loads(run_cli("stack", "show", "demo", "-f", "json").stdout)["stack_status"] == "CREATE_COMPLETE"

    r = run_cli("stack", "update", "demo", "-t", str(t), "--parameter", "v=two", "--wait", "-f", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stack_status"] == "UPDATE_COMPLETE"
    r = run_cli("stack", "output", "show", "demo", "--all", "-f", "json")
    assert {o["output_key"]: o["output_value"] for o in json.loads(r.stdout)} == {"a": "two", "values": ["two", "two"]}

    r = run_cli("stack", "event", "list", "demo", "-f", "json")
    events = json.loads(r.stdout)
    assert events[0]["resource_status"] == "CREATE_IN_PROGRESS" and events[-1]["resource_status"] == "UPDATE_COMPLETE"
    assert "s3cr3t-value" not in r.stdout
    r = run_cli("stack", "list", "-f", "value")
    assert "demo UPDATE_COMPLETE" in r.stdout

    r = run_cli("stack", "delete", "demo", "--wait")
    assert r.returncode == 0, r.stderr
    r = run_cli("stack", "show", "demo")
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == "error: stack 'demo' not found"


def test_wait_fails_with_the_reason(uc_home, tmp_path):
    t = tmp_path / "t.yaml"
    t.write_text(TEMPLATE)
    r = run_cli("stack", "create", "hidden", "-t", str(t), "-P", "secret=xyz-secret", "--wait", "-f", "json")
    assert r.returncode == 0 and "xyz-secret" not in r.stdout + r.stderr
    assert json.loads(r.stdout)["parameters"] == {"secret": "******"}
    r = run_cli("stack", "create", "bad", "-t", str(t), "-P", "fail=true", "--wait")
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: stack bad CREATE_FAILED:") and "Test Resource failed a" in last
    assert "Traceback" not in r.stderr
    r = run_cli("stack", "cancel", "bad")
    assert r.returncode == 1 and "no operation in progress" in r.stderr


def test_invalid_template_is_refused_before_anything_is_written(uc_home, tmp_path):
    t = tmp_path / "t.yaml"
    t.write_text("heat_template_version: 2018-08-31\nresources:\n  n:\n    type: OS::Neutron::Router\n")
    r = run_cli("stack", "create", "x", "-t", str(t))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"{t}:4: resources.n.type: OS::Neutron::Router is not a supported resource type" in r.stderr
    r = run_cli("stack", "create", "x", "-t", str(tmp_path / "missing.yaml"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    r = run_cli("stack", "create", "x", "-t", str(t.parent / "t.yaml"), "-P", "novalue")
    assert r.returncode == 1 and "expected KEY=VALUE" in r.stderr
    r = run_cli("stack", "list", "-f", "json")
    assert json.loads(r.stdout) == []
