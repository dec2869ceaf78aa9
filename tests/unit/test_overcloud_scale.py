"""Scaling a role down: a ResourceGroup's attributes (node names, addresses, the servers
map of the deploy steps) must not keep the members a shrink removes."""

from __future__ import annotations

import json

from tests.conftest import run_cli

TEMPLATE = """\
heat_template_version: wallaby
parameters:
  count: {type: number, default: 2}
resources:
  g:
    type: OS::Heat::ResourceGroup
    properties:
      count: {get_param: count}
      resource_def: {type: OS::Heat::Value, properties: {value: "m%index%"}}
outputs:
  refs: {value: {get_attr: [g, refs]}}
  values: {value: {get_attr: [g, value]}}
"""


def outputs(name: str) -> dict:
    r = run_cli("stack", "output", "show", name, "--all", "-f", "json")
    assert r.returncode == 0, r.stderr
    return {o["output_key"]: o["output_value"] for o in json.loads(r.stdout)}


def test_group_attributes_after_a_shrink_list_only_the_members_left(uc_home, tmp_path):
    t = tmp_path / "g.yaml"
    t.write_text(TEMPLATE)
    assert run_cli("stack", "create", "g", "-t", str(t), "--wait").returncode == 0
    assert outputs("g")["values"] == ["m0", "m1"]
    r = run_cli("stack", "update", "g", "-t", str(t), "-P", "count=1", "--wait")
    assert r.returncode == 0, r.stderr
    out = outputs("g")
    assert out["values"] == ["m0"]
    assert len(out["refs"]) == 1
    r = run_cli("stack", "update", "g", "-t", str(t), "-P", "count=3", "--wait")
    assert r.returncode == 0, r.stderr
    assert sorted(outputs("g")["values"]) == ["m0", "m1", "m2"]
