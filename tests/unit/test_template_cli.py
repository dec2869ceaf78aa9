"""`undercloud template validate` and `undercloud stack preview` through the real command."""

from __future__ import annotations

import json
import textwrap

from tests.conftest import CORPUS, run_cli

T = """\
heat_template_version: 2021-04-16
description: a web tier
parameters:
  count: {type: number, default: 2, description: how many}
  password: {type: string, default: s3cret-value, hidden: true}
  flavor: {type: string}
resources:
  conf:
    type: OS::Heat::Value
    properties:
      value: {str_replace: {template: "n=$n", params: {$n: {get_param: count}}}}
  members:
    type: member.yaml
    properties: {name: {get_attr: [conf, value]}}
"""
MEMBER = """\
heat_template_version: 2021-04-16
parameters:
  name: {type: string}
resources:
  r: {type: OS::Heat::Value, properties: {value: {list_join: ['/', [{get_param: name}, x]]}}}
"""


def write(tmp_path, **files):
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))


def test_validate_prints_parameters_and_masks_hidden_ones(tmp_path, uc_home):
    write(tmp_path, **{"t.yaml": T, "member.yaml": MEMBER})
    r = run_cli("template", "validate", "-t", str(tmp_path / "t.yaml"), "-f", "json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["valid"] is True and data["version"] == "2021-04-16" and data["resources"] == 2
    params = {p["name"]: p for p in data["parameters"]}
    assert params["count"] == {"name": "count", "type": "number", "default": 2, "description": "how many"}
    assert params["password"]["default"] == "******"
    assert "s3cret-value" not in r.stdout + r.stderr
    r = run_cli("template", "validate", "-t", str(tmp_path / "t.yaml"))
    assert r.returncode == 0 and "| count" in r.stdout and "valid (heat_template_version 2021-04-16" in r.stderr
    from undercloud import daemon

    assert daemon.pid(uc_home) is None  # validate runs locally: no service was started


def test_validate_reports_each_problem_on_one_line(tmp_path, uc_home):
    write(tmp_path, **{"t.yaml": """\
heat_template_version: 2016-04-08
resources:
  a: {type: OS::Neutron::Router}
  b: {type: OS::Heat::Value, properties: {value: {list_concat: [[1], [2]]}}}
"""})
    r = run_cli("template", "validate", "-t", str(tmp_path / "t.yaml"))
    assert r.returncode == 1
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert lines == [
        f"error: {tmp_path}/t.yaml:3: resources.a.type: OS::Neutron::Router is not a supported resource type",
        f'error: {tmp_path}/t.yaml:4: resources.b.properties.value.list_concat: "list_concat" is not a function '
        "of heat_template_version 2016-04-08 (it needs heat_template_version 2017-09-01 or later)",
    ]
    assert "Traceback" not in r.stderr
    r = run_cli("template", "validate", "-t", str(tmp_path / "t.yaml"), "-f", "json")
    assert r.returncode == 1 and json.loads(r.stdout)["valid"] is False


def test_bad_command_line_input(tmp_path, uc_home):
    r = run_cli("template", "validate", "-t", str(tmp_path / "absent.yaml"))
    assert r.returncode == 1 and r.stderr.strip().endswith("absent.yaml: file not found")
    write(tmp_path, **{"t.yaml": "heat_template_version: 2021-04-16\n"})
    r = run_cli("template", "validate", "-t", str(tmp_path / "t.yaml"), "-P", "novalue")
    assert r.returncode == 1 and r.stderr.strip() == "error: --parameter: expected KEY=VALUE, got 'novalue'"
    write(tmp_path, **{"bad.yaml": "heat_template_version: 2021-04-16\nresources: {a: [}\n"})
    r = run_cli("template", "validate", "-t", str(tmp_path / "bad.yaml"))
    assert r.returncode == 1 and "invalid YAML" in r.stderr and "Traceback" not in r.stderr


def test_preview_shows_the_tree_resolved_as_far_as_possible(tmp_path, uc_home):
    write(tmp_path, **{"t.yaml": T, "member.yaml": MEMBER, "env.yaml": "parameters: {count: 5}\n"})
    r = run_cli("stack", "preview", "-t", str(tmp_path / "t.yaml"), "-e", str(tmp_path / "env.yaml"),
                "-P", "flavor=m1", "-f", "json")
    assert r.returncode == 0, r.stderr
    rows = {x["name"]: x for x in json.loads(r.stdout)}
    assert sorted(rows) == ["conf", "members", "members.r"]
    assert rows["conf"]["properties"] == {"value": "n=5"}
    assert rows["members"]["properties"] == {"name": {"get_attr": ["conf", "value"]}}
    assert rows["members.r"]["properties"] == {"value": {"list_join": ["/", [{"get_param": "name"}, "x"]]}}


def test_preview_never_shows_hidden_values(tmp_path, uc_home):
    write(tmp_path, **{"t.yaml": """\
heat_template_version: 2021-04-16
parameters:
  password: {type: string, hidden: true}
resources:
  conf:
    type: OS::Heat::Value
    properties:
      value: {str_replace: {template: "pw=$p", params: {$p: {get_param: password}}}}
  member:
    type: member.yaml
    properties: {name: {get_param: password}}
""", "member.yaml": MEMBER})
    r = run_cli("stack", "preview", "-t", str(tmp_path / "t.yaml"), "-P", "password=hunter2hunter2", "-f", "json")
    assert r.returncode == 0, r.stderr
    assert "hunter2hunter2" not in r.stdout + r.stderr
    rows = {x["name"]: x for x in json.loads(r.stdout)}
    assert rows["conf"]["properties"]["value"] == {
        "str_replace": {"template": "pw=$p", "params": {"$p": {"get_param": "password"}}}}


def test_validate_a_corpus_template(uc_home):
    hot = CORPUS / "hot" / "hello_world.yaml"
    if not hot.exists():
        import pytest

        pytest.skip(f"corpus not found at {CORPUS}")
    r = run_cli("template", "validate", "-t", str(hot), "-f", "json")
    assert r.returncode == 0, r.stderr
    assert {p["name"] for p in json.loads(r.stdout)["parameters"]} >= {"key_name", "image", "flavor"}


def test_versions_lists_each_version_with_its_functions(uc_home):
    r = run_cli("template", "versions", "-f", "json")
    assert r.returncode == 0, r.stderr
    rows = {x["version"]: x for x in json.loads(r.stdout)}
    assert len(rows) == 11 and rows["2021-04-16"]["name"] == "wallaby"
    assert "str_split" not in rows["2015-04-30"]["functions"] and "str_split" in rows["2015-10-15"]["functions"]
    assert "Fn::Select" in rows["2014-10-16"]["functions"] and "Fn::Select" not in rows["2015-10-15"]["functions"]
