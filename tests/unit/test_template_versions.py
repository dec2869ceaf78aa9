"""Each HOT version allows exactly its own functions, sections and keys (Heat's tables,
written here independently as data)."""

from __future__ import annotations

import pytest

from tests.unit.template_support import error, problems, run, value
from undercloud.orchestration.template import Bundle, load

BASE = {"get_param", "get_resource", "get_attr", "list_join", "str_replace", "resource_facade", "get_file"}
ADDED = {
    "2013-05-23": set(),
    "2014-10-16": set(),
    "2015-04-30": {"repeat", "digest"},
    "2015-10-15": {"str_split"},
    "2016-04-08": {"map_merge"},
    "2016-10-14": {"yaql", "map_replace", "if"},
    "2017-02-24": {"filter", "str_replace_strict"},
    "2017-09-01": {"make_url", "list_concat", "str_replace_vstrict", "list_concat_unique", "contains"},
    "2018-03-02": set(),
    "2018-08-31": set(),
    "2021-04-16": set(),
}
VERSIONS = list(ADDED)
ALIASES = {"juno": "2014-10-16", "kilo": "2015-04-30", "liberty": "2015-10-15", "mitaka": "2016-04-08",
           "newton": "2016-10-14", "ocata": "2017-02-24", "pike": "2017-09-01", "queens": "2018-03-02",
           "rocky": "2018-08-31", "wallaby": "2021-04-16"}


def allowed(version: str) -> set[str]:
    out = set(BASE)
    for v in VERSIONS[: VERSIONS.index(version) + 1]:
        out |= ADDED[v]
    return out


# A call of every function that needs no other resource, and its value.
SAMPLES = {
    "get_param": ("{get_param: p}", "pv"),
    "list_join": ("{list_join: [',', [a, b]]}", "a,b"),
    "str_replace": ("{str_replace: {template: a X, params: {X: b}}}", "a b"),
    "get_file": ("{get_file: f.txt}", "file text"),
    "repeat": ("{repeat: {template: '<%x%>', for_each: {'%x%': [a, b]}}}", ["<a>", "<b>"]),
    "digest": ("{digest: [md5, '']}", "d41d8cd98f00b204e9800998ecf8427e"),
    "str_split": ("{str_split: [',', 'a,b']}", ["a", "b"]),
    "map_merge": ("{map_merge: [{a: 1}, {b: 2}]}", {"a": 1, "b": 2}),
    "yaql": ("{yaql: {expression: '$.data.x + 1', data: {x: 1}}}", 2),
    "map_replace": ("{map_replace: [{a: 1}, {keys: {a: b}}]}", {"b": 1}),
    "if": ("{if: [true, y, n]}", "y"),
    "filter": ("{filter: [[1], [1, 2]]}", [2]),
    "str_replace_strict": ("{str_replace_strict: {template: aX, params: {X: b}}}", "ab"),
    "make_url": ("{make_url: {scheme: http, host: h, path: /p}}", "http://h/p"),
    "list_concat": ("{list_concat: [[1], [2]]}", [1, 2]),
    "str_replace_vstrict": ("{str_replace_vstrict: {template: aX, params: {X: b}}}", "ab"),
    "list_concat_unique": ("{list_concat_unique: [[1], [1, 2]]}", [1, 2]),
    "contains": ("{contains: [a, [a]]}", True),
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("fn", sorted(SAMPLES))
def test_each_version_allows_exactly_its_functions(tmp_path, version, fn):
    snippet, expected = SAMPLES[fn]
    kw = {"files": {"f.txt": "file text"}}
    params = "p: {type: string, default: pv}\n"
    if fn in allowed(version):
        assert value(tmp_path, version, snippet, params, **kw) == expected
    else:
        msg = error(tmp_path, version, snippet, params, **kw)
        assert f'"{fn}" is not a function of heat_template_version {version}' in msg
        assert "needs heat_template_version" in msg


@pytest.mark.parametrize("alias, version", sorted(ALIASES.items()))
def test_release_names_are_versions(tmp_path, alias, version):
    snippet, expected = SAMPLES["digest"]
    if "digest" in allowed(version):
        assert value(tmp_path, alias, snippet) == expected


def test_unknown_version(tmp_path):
    msgs = problems(tmp_path, "heat_template_version: 2099-01-01\nresources: {}\n")
    assert len(msgs) == 1
    assert msgs[0].endswith('"heat_template_version" should be one of: 2013-05-23, 2014-10-16, 2015-04-30, '
                            "2015-10-15, 2016-04-08, 2016-10-14, 2017-02-24, 2017-09-01, 2018-03-02, "
                            "2018-08-31, 2021-04-16, juno, kilo, liberty, mitaka, newton, ocata, pike, "
                            "queens, rocky, wallaby")
    assert ":1: heat_template_version: The template version is invalid" in msgs[0]


@pytest.mark.parametrize("version", VERSIONS)
def test_conditions_section_from_newton(tmp_path, version):
    tmpl = f"""\
heat_template_version: {version}
conditions:
  c: true
resources:
  a: {{type: OS::Heat::Value, properties: {{value: 1}}, condition: c}}
"""
    if VERSIONS.index(version) >= VERSIONS.index("2016-10-14"):
        run(tmp_path, tmpl)
    else:
        msgs = problems(tmp_path, tmpl)
        assert any(':2: conditions: "conditions" is not a valid template section' in m for m in msgs)
        assert any(":5: resources.a.condition: Invalid keyword(s) inside a resource definition: condition" in m
                   for m in msgs)


@pytest.mark.parametrize("version, ok", [("2016-10-14", False), ("2017-02-24", False), ("2017-09-01", True)])
def test_contains_and_yaql_in_conditions_from_pike(tmp_path, version, ok):
    tmpl = f"""\
heat_template_version: {version}
conditions:
  c: {{contains: [a, [a, b]]}}
resources:
  a: {{type: OS::Heat::Value, properties: {{value: 1}}, condition: c}}
outputs:
  o: {{value: {{get_attr: [a, value]}}, condition: c}}
"""
    if ok:
        assert run(tmp_path, tmpl) == {"o": 1}
    else:
        msgs = problems(tmp_path, tmpl)
        assert '"contains" is not a function of heat_template_version' in msgs[0]


def test_functions_that_are_not_condition_functions(tmp_path):
    msgs = problems(tmp_path, """\
heat_template_version: 2021-04-16
conditions:
  c: {equals: [{list_join: [',', [a]]}, a]}
resources: {}
""")
    assert msgs[0].endswith('conditions.c.equals[0].list_join: The function "list_join" is invalid in this context')


@pytest.mark.parametrize("version, ok", [("2017-09-01", False), ("2018-03-02", True)])
def test_parameter_tags_from_queens(tmp_path, version, ok):
    tmpl = f"heat_template_version: {version}\nparameters:\n  p: {{type: string, default: x, tags: [a]}}\n"
    if ok:
        run(tmp_path, tmpl)
    else:
        assert problems(tmp_path, tmpl)[0].endswith("parameters.p.tags: Invalid key 'tags' for parameter (p)")


@pytest.mark.parametrize("version, ok", [("2016-10-14", False), ("2017-02-24", True)])
def test_modulo_constraint_from_ocata(tmp_path, version, ok):
    tmpl = (f"heat_template_version: {version}\nparameters:\n"
            "  p: {type: number, default: 4, constraints: [{modulo: {step: 2, offset: 0}}]}\n")
    if ok:
        run(tmp_path, tmpl)
    else:
        assert "Invalid key 'modulo' for parameter constraints" in problems(tmp_path, tmpl)[0]


@pytest.mark.parametrize("version, policy, ok", [
    ("2016-04-08", "retain", False), ("2016-10-14", "retain", True), ("2013-05-23", "Snapshot", True),
    ("2021-04-16", "Keep", False),
])
def test_deletion_policies(tmp_path, version, policy, ok):
    tmpl = (f"heat_template_version: {version}\nresources:\n"
            f"  a: {{type: OS::Heat::Value, properties: {{value: 1}}, deletion_policy: {policy}}}\n")
    if ok:
        run(tmp_path, tmpl)
    else:
        assert problems(tmp_path, tmpl)[0].endswith(f'resources.a.deletion_policy: Invalid deletion policy "{policy}"')


def test_external_id_and_condition_keys_from_newton(tmp_path):
    tmpl = "heat_template_version: 2016-04-08\nresources:\n  a: {type: OS::Heat::None, external_id: x}\n"
    assert "Invalid keyword(s) inside a resource definition: external_id" in problems(tmp_path, tmpl)[0]


def test_output_condition_key_from_newton(tmp_path):
    # Heat 27 ignores it before 2016-10-14: {"o": 1} although the condition is false
    tmpl = "heat_template_version: 2016-04-08\noutputs:\n  o: {value: 1, condition: false}\n"
    path = tmp_path / "o.yaml"
    path.write_text(tmpl)
    assert load(Bundle.from_paths(str(path))).outputs["o"].condition is None
