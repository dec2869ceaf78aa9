"""Parameters: types, defaults, constraints, hidden values, pseudo-parameters, groups.
Messages are Heat's (checked with the oracle)."""

from __future__ import annotations

import pytest

from tests.unit.template_support import bundle, problems, run
from undercloud.orchestration.template import load

T = """\
heat_template_version: 2021-04-16
parameters:
  s: {type: string, default: d}
  n: {type: number, default: 2, constraints: [{range: {min: 1, max: 3}}, {modulo: {step: 2, offset: 0}}]}
  b: {type: boolean, default: true}
  l: {type: comma_delimited_list, default: " a, b ,c", constraints: [{allowed_values: [" a", " b ", c, d]}]}
  j: {type: json, default: {k: v}}
  q: {type: string, default: secret, hidden: true, constraints: [{length: {min: 3}}]}
  p: {type: string, default: abc, constraints: [{allowed_pattern: "[a-z]+"}]}
outputs:
  s: {value: {get_param: s}}
  n: {value: {get_param: n}}
  b: {value: {get_param: b}}
  l: {value: {get_param: l}}
  j: {value: {get_param: j}}
  p: {value: {get_param: p}}
"""


def test_defaults_in_their_types(tmp_path):
    # comma_delimited_list splits on "," and keeps spaces (Heat)
    assert run(tmp_path, T) == {"s": "d", "n": 2, "b": True, "l": [" a", " b ", "c"], "j": {"k": "v"},
                                "p": "abc"}


@pytest.mark.parametrize("given, key, expected", [
    ({"n": "2.0"}, "n", 2.0),
    ({"b": "0"}, "b", False),
    ({"b": "yes"}, "b", True),
    ({"l": "d"}, "l", ["d"]),
    ({"l": ""}, "l", []),
    ({"j": '{"a": 1}'}, "j", {"a": 1}),
    ({"s": "x"}, "s", "x"),
])
def test_given_values_are_coerced(tmp_path, given, key, expected):
    assert run(tmp_path, T, given)[key] == expected


@pytest.mark.parametrize("given, message", [
    ({"q": "ab"}, "Parameter 'q' is invalid: length (2) is out of range (min: 3, max: None)"),
    ({"n": "7"}, "Parameter 'n' is invalid: 7 is out of range (min: 1, max: 3)"),
    ({"n": "0"}, "Parameter 'n' is invalid: 0 is out of range (min: 1, max: 3)"),
    ({"n": "3"}, "Parameter 'n' is invalid: 3 is not a multiple of 2 with an offset of 0"),
    ({"n": "x"}, "Parameter 'n' is invalid: could not convert string to float: 'x'"),
    ({"b": "maybe"}, "Parameter 'b' is invalid: Unrecognized value 'maybe', acceptable values are: '0', '1', "
                     "'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'"),
    ({"l": "a,d"}, 'Parameter \'l\' is invalid: ["a", "d"] is not an allowed value [" a", " b ", "c", "d"]'),
    ({"j": "nojson"}, "Parameter 'j' is invalid: Value must be valid JSON: Expecting value: line 1 column 1 (char 0)"),
    ({"p": "ab1"}, 'Parameter \'p\' is invalid: "ab1" does not match pattern "[a-z]+"'),
    ({"zz": "1"}, "The Parameter (zz) was not defined in template."),
])
def test_bad_values(tmp_path, given, message):
    msgs = problems(tmp_path, T, given)
    assert len(msgs) == 1
    assert msgs[0] == f"--parameter: {next(iter(given))}: {message}"


def test_hidden_values_never_show_in_errors(tmp_path):
    tmpl = """\
heat_template_version: 2021-04-16
parameters:
  pw: {type: string, hidden: true, constraints: [{allowed_values: [good]}]}
"""
    msgs = problems(tmp_path, tmpl, {"pw": "hunter2secret"})
    assert "hunter2secret" not in "".join(msgs)
    assert "Parameter 'pw' is invalid" in msgs[0]


def test_constraint_description_replaces_the_message(tmp_path):
    tmpl = """\
heat_template_version: 2021-04-16
parameters:
  n: {type: number, constraints: [{range: {max: 3}, description: at most three please}]}
"""
    assert problems(tmp_path, tmpl, {"n": 9}) == ["--parameter: n: Parameter 'n' is invalid: at most three please"]


def test_invalid_default_is_refused_even_with_a_value(tmp_path):
    tmpl = """\
heat_template_version: 2021-04-16
parameters:
  p: {type: string, default: x, constraints: [{allowed_values: [a, b]}]}
"""
    msgs = problems(tmp_path, tmpl, {"p": "a"})
    assert msgs[0].endswith(':3: parameters.p.default: Parameter \'p\' is invalid: Invalid default x '
                            '("x" is not an allowed value ["a", "b"])')


def test_missing_value(tmp_path):
    tmpl = "heat_template_version: 2021-04-16\nparameters:\n  p: {type: string}\n"
    assert problems(tmp_path, tmpl)[0].endswith(":3: parameters.p: The Parameter (p) was not provided.")
    # validate/preview (partial) accept it and keep it unknown
    t = load(bundle(tmp_path, tmpl), {}, partial=True)
    assert t.parameters["p"].value is None


@pytest.mark.parametrize("schema, message", [
    ("{type: strin}", "parameters.p.type: Invalid type (strin)"),
    ("{default: 1}", "parameters.p: Missing parameter type for parameter: p"),
    ("{type: string, colour: red}", "parameters.p.colour: Invalid key 'colour' for parameter (p)"),
    ("{type: string, constraints: {length: {min: 1}}}",
     "parameters.p.constraints: Invalid parameter constraints for parameter p, expected a list"),
    ("{type: string, constraints: [{range: {min: 1}}]}", "parameters.p.constraints[0].range: range constraint invalid for string"),
    ("{type: number, constraints: [{range: {}}]}",
     "A range constraint must have a min value and/or a max value specified."),
    ("{type: number, constraints: [{modulo: {step: 0, offset: 0}}]}", "step cannot be 0."),
    ("{type: string, constraints: [{allowed_pattern: '('}]}", "Invalid pattern"),
    ("{type: string, constraints: [{description: x}]}", "No constraint expressed"),
    ("{type: number, default: abc}", "Invalid default abc (could not convert string to float: 'abc')"),
    ("[a]", "parameters.p: Invalid parameter definition for p, expected a mapping"),
])
def test_bad_schemas(tmp_path, schema, message):
    msgs = problems(tmp_path, f"heat_template_version: 2021-04-16\nparameters:\n  p: {schema}\n")
    assert message in msgs[0], msgs


def test_pseudo_parameters(tmp_path):
    tmpl = """\
heat_template_version: 2021-04-16
outputs:
  o: {value: [{get_param: OS::stack_name}, {get_param: OS::stack_id}, {get_param: OS::project_id}]}
"""
    t = load(bundle(tmp_path, tmpl), {}, stack_name="web", stack_id="1234", project_id="admin")
    from tests.unit.template_support import outputs

    assert outputs(t) == {"o": ["web", "1234", "admin"]}


def test_parameter_metadata(tmp_path):
    tmpl = """\
heat_template_version: 2021-04-16
parameters:
  p: {type: string, default: x, label: The P, description: what p is, immutable: true, tags: [a, b]}
  h: {type: string, default: s3cret, hidden: true}
"""
    t = load(bundle(tmp_path, tmpl))
    p = t.parameters["p"]
    assert (p.label, p.description, p.immutable, p.tags, p.hidden) == ("The P", "what p is", True, ["a", "b"], False)
    assert t.parameters["h"].to_dict()["default"] == "******"


def test_parameter_groups(tmp_path):
    tmpl = """\
heat_template_version: 2021-04-16
parameter_groups:
  - label: one
    parameters: [a, nope]
  - label: two
    parameters: [a]
  - label: three
parameters:
  a: {type: string, default: x}
"""
    msgs = problems(tmp_path, tmpl)
    assert msgs[0].endswith(":4: parameter_groups[0].parameters[1]: The Parameter name (nope) does not "
                            "reference an existing parameter.")
    assert msgs[1].endswith(":6: parameter_groups[1].parameters[0]: The a parameter must be assigned to one "
                            "parameter group only.")
    assert msgs[2].endswith(":7: parameter_groups[2]: Parameters must be provided for each Parameter Group.")
