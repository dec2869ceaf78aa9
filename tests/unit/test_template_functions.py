"""Intrinsic functions, one test group each. Expected values were produced by real Heat
(the oracle, ~/.cache/heat-oracle) for the same snippets, then written in here."""

from __future__ import annotations

import pytest

from tests.unit.template_support import error, value

W = "2021-04-16"
PARAMS = """\
j: {type: json, default: {a: [x, y]}}
l: {type: comma_delimited_list, default: 'a,b'}
s: {type: string, default: abc}
n: {type: number, default: '1.50'}
b: {type: boolean, default: 'yes'}
"""


def v(tmp_path, snippet: str, version: str = W, **kw):
    return value(tmp_path, version, snippet, PARAMS, **kw)


# ----------------------------------------------------------------------------- get_param
@pytest.mark.parametrize("snippet, expected", [
    ("{get_param: [j, a, 1]}", "y"),
    ("{get_param: [j, a, '1']}", "y"),       # string index into a list
    ("{get_param: [j, zz]}", ""),            # a path that misses yields ""
    ("{get_param: [j, a, 9]}", ""),
    ("{get_param: [j, a, {x: 1}]}", ""),     # a path component that is not a key: ""
    ("{get_param: [l, 1]}", "b"),
    ("{get_param: [s, 0]}", "a"),            # strings index like lists (Heat)
    ("{get_param: [s, x]}", ""),
    ("{get_param: [l]}", ["a", "b"]),
    ("{get_param: n}", 1.5),
    ("{get_param: b}", True),
])
def test_get_param(tmp_path, snippet, expected):
    assert v(tmp_path, snippet) == expected


def test_get_param_pseudo_parameters(tmp_path):
    assert v(tmp_path, "{get_param: OS::stack_name}") == "stack"
    assert v(tmp_path, "{get_param: OS::project_id}") == ""


def test_get_param_undefined_is_refused_with_line(tmp_path):
    msg = error(tmp_path, W, "{get_param: nope}", PARAMS)
    assert msg.startswith("12: resources.v.properties.value.get_param: ")  # the line of `value:`
    assert msg.endswith("The Parameter (nope) was not defined in template.")


@pytest.mark.parametrize("snippet, message", [
    ("{get_param: {a: 1}}", 'Argument to "get_param" must be string or list'),
    ("{get_param: []}", 'Function "get_param" must have arguments'),
    ("{get_param: [1]}", 'Parameter name in "get_param" must be string'),
])
def test_get_param_bad_arguments(tmp_path, snippet, message):
    assert error(tmp_path, W, snippet, PARAMS).endswith(message)


# ------------------------------------------------------------------------------ strings
@pytest.mark.parametrize("snippet, expected", [
    # longer keys first, and substituted text is never scanned again
    ("{str_replace: {template: 'xyzxy', params: {xy: '1', x: 'xy'}}}", "1z1"),
    ("{str_replace: {template: 'a $b c', params: {$b: [1, {x: 2}]}}}", 'a [1, {"x": 2}] c'),
    ("{str_replace: {template: 'a $b c', params: {$b: null}}}", "a  c"),
    ("{str_replace: {template: 'abc', params: {b: 1.5, c: true}}}", "a1.5True"),
    ("{str_replace_strict: {template: 'abc', params: {b: 'B'}}}", "aBc"),
    ("{str_replace_vstrict: {template: 'abc', params: {b: 'B'}}}", "aBc"),
])
def test_str_replace(tmp_path, snippet, expected):
    assert v(tmp_path, snippet) == expected


@pytest.mark.parametrize("snippet, message", [
    ("{str_replace_strict: {template: 'abc', params: {z: 'B', b: x}}}",
     "The following params were not found in the template: z"),
    ("{str_replace_vstrict: {template: 'abc', params: {b: ''}}}",
     "str_replace_vstrict has an undefined or empty value for param b, must be a defined non-empty value"),
    ("{str_replace: {template: 'abc'}}", '"str_replace" syntax should be'),
    ("{str_replace: [a, b]}", 'Arguments to "str_replace" must be a map'),
    ("{str_replace: {template: 'abc', params: [1]}}", '"str_replace" parameters must be a mapping'),
    ("{str_replace: {template: [1], params: {a: b}}}", '"str_replace" template must be a string'),
])
def test_str_replace_errors(tmp_path, snippet, message):
    assert message in error(tmp_path, W, snippet, PARAMS)


def test_str_replace_2013_refuses_lists_as_values(tmp_path):
    msg = error(tmp_path, "2013-05-23", "{str_replace: {template: 'a $b', params: {$b: [1]}}}")
    assert msg.endswith('"str_replace" params must be strings or numbers, param $b is not valid')


@pytest.mark.parametrize("snippet, expected", [
    ("{list_join: [', ', [a, b], [c]]}", "a, b, c"),
    ("{list_join: ['-', [a, {x: 1}, [1, 2]], []]}", 'a-{"x": 1}-[1, 2]'),
    ("{list_join: ['-', [a, null]]}", "a-"),
    ("{list_join: [',', {get_param: l}]}", "a,b"),
])
def test_list_join(tmp_path, snippet, expected):
    assert v(tmp_path, snippet) == expected


def test_list_join_errors(tmp_path):
    assert "Items to join must be string, map or list not 1" in error(tmp_path, W, "{list_join: ['-', [1]]}")
    assert 'Incorrect arguments to "list_join"' in error(tmp_path, W, "{list_join: ','}")
    # before 2015-10-15: exactly one list, strings only
    assert 'Incorrect arguments to "list_join"' in error(tmp_path, "2015-04-30", "{list_join: [',', [a], [b]]}")
    assert "Items to join must be strings" in error(tmp_path, "2015-04-30", "{list_join: [',', [{a: 1}]]}")


@pytest.mark.parametrize("snippet, expected", [
    ("{str_split: [',', 'a,b,c']}", ["a", "b", "c"]),
    ("{str_split: [',', 'a,b,c', 1]}", "b"),
    ("{str_split: [',', 'a,b,c', '2']}", "c"),
])
def test_str_split(tmp_path, snippet, expected):
    assert v(tmp_path, snippet) == expected


def test_str_split_errors(tmp_path):
    assert "should be between 0 and 2" in error(tmp_path, W, "{str_split: [',', 'a,b,c', 5]}")
    assert 'Incorrect arguments to "str_split"' in error(tmp_path, W, "{str_split: 'a,b'}")


@pytest.mark.parametrize("snippet, expected", [
    ("{digest: [sha256, hello]}", "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"),
    ("{digest: [md5, '']}", "d41d8cd98f00b204e9800998ecf8427e"),
])
def test_digest(tmp_path, snippet, expected):
    assert v(tmp_path, snippet) == expected


def test_digest_errors(tmp_path):
    assert "Algorithm must be one of" in error(tmp_path, W, "{digest: [nosuch, x]}")
    assert 'usage: ["<algorithm>", "<value>"]' in error(tmp_path, W, "{digest: [md5]}")


@pytest.mark.parametrize("snippet, expected", [
    ("{make_url: {scheme: https, host: 'fe80::1', port: 8080, path: '/a b', query: {q: 'x/y z', r: 1},"
     " fragment: 'f g'}}", "https://[fe80::1]:8080/a%20b?q=x/y+z&r=1#f%20g"),
    ("{make_url: {scheme: http, username: 'u@x', password: 'p:w', host: '[::1]', path: 'x'}}",
     "http://u%40x:p%3Aw@[::1]/x"),
])
def test_make_url(tmp_path, snippet, expected):
    assert v(tmp_path, snippet) == expected


def test_make_url_errors(tmp_path):
    assert "Invalid URL port 70000, must be in range 1-65535" in error(tmp_path, W, "{make_url: {host: h, port: 70000}}")
    assert 'Invalid arguments to "make_url": hots' in error(tmp_path, W, "{make_url: {hots: h}}")


# --------------------------------------------------------------------------- collections
@pytest.mark.parametrize("snippet, expected", [
    ("{repeat: {template: 'p-%x%-%y%', for_each: {'%x%': [a, b], '%y%': ['1', '2']}}}",
     ["p-a-1", "p-a-2", "p-b-1", "p-b-2"]),
    ("{repeat: {template: {k%x%: v%x%}, for_each: {'%x%': [a, b]}}}", [{"ka": "va"}, {"kb": "vb"}]),
    ("{repeat: {template: '%x%%y%', for_each: {'%x%': [a, b], '%y%': ['1', '2']}, permutations: false}}",
     ["a1", "b2"]),
    ("{repeat: {template: '%x%', for_each: {'%x%': {k1: v1, k2: v2}}}}", ["k1", "k2"]),
])
def test_repeat(tmp_path, snippet, expected):
    assert v(tmp_path, snippet) == expected


def test_repeat_errors(tmp_path):
    # Heat refuses non-string values too (it calls str.replace with them)
    assert "for_each values must be strings" in error(
        tmp_path, "2015-04-30", "{repeat: {template: 'x-%a%', for_each: {'%a%': [1, 2]}}}")
    assert "must be lists" in error(tmp_path, "2015-04-30", "{repeat: {template: x, for_each: {'%a%': {k: v}}}}")
    assert "length of for_each values should be equal" in error(
        tmp_path, W, "{repeat: {template: x, for_each: {a: [x], b: [y, z]}, permutations: false}}")
    assert '"repeat" syntax should be' in error(tmp_path, W, "{repeat: {template: x}}")


@pytest.mark.parametrize("snippet, expected", [
    ("{map_merge: [{a: 1, b: 2}, {b: 3}, null]}", {"a": 1, "b": 3}),
    ("{map_replace: [{k1: v1, k2: v2}, {keys: {k1: K1}, values: {v2: V2}}]}", {"K1": "v1", "k2": "V2"}),
    ("{map_replace: [{k1: v1}, {values: {v1: [1]}}]}", {"k1": [1]}),
    ("{list_concat: [[1, 2], [2, 3], null]}", [1, 2, 2, 3]),
    ("{list_concat_unique: [[1, 2], [2, 3], [1]]}", [1, 2, 3]),
    ("{filter: [[1, 3], [1, 2, 3, 1]]}", [2]),
    ("{filter: [null, [1, 2]]}", [1, 2]),
    ("{contains: [a, [a, b]]}", True),
    ("{contains: [c, 'abc']}", True),
])
def test_collections(tmp_path, snippet, expected):
    assert v(tmp_path, snippet) == expected


@pytest.mark.parametrize("snippet, message", [
    ("{map_merge: [{a: 1}, [2]]}", "Items to merge must be maps"),
    ("{map_replace: [{a: 1}, {keys: {a: b}, vals: {}}]}", 'Incorrect arguments to "map_replace"'),
    ("{map_replace: [{a: 1, b: 2}, {keys: {a: b}}]}", "key replacement b collides with a key in the input map"),
    ("{list_concat: [[1], 2]}", "Items to concat must be lists"),
    ("{filter: [[1], [2], [3]]}", '"filter" expected 2 arguments'),
    ("{contains: [a]}", 'Arguments to "contains" must be of the form'),
    ("{contains: [a, 1]}", 'Second argument to "contains" should be a sequence.'),
])
def test_collection_errors(tmp_path, snippet, message):
    assert message in error(tmp_path, W, snippet)


# ----------------------------------------------------------------------------------- yaql
@pytest.mark.parametrize("snippet, expected", [
    ("{yaql: {expression: '$.data.l.sum()', data: {l: [1, 2, 3]}}}", 6),
    ("{yaql: {expression: '$.data.l.select($*2)', data: {l: [1, 2, 3]}}}", [2, 4, 6]),
    ("{yaql: {expression: '$.data.p.len()', data: {p: {get_param: l}}}}", 2),
])
def test_yaql(tmp_path, snippet, expected):
    assert v(tmp_path, snippet) == expected


def test_yaql_errors(tmp_path):
    assert "Bad expression" in error(tmp_path, W, "{yaql: {expression: '$.data.(('}}")
    assert '"yaql" syntax should be' in error(tmp_path, W, "{yaql: {expr: x}}")


# -------------------------------------------------------------------------- if/conditions
@pytest.mark.parametrize("snippet, expected", [
    ("{if: [true, yes, no]}", True),
    ("{if: [is_on, a, b]}", "a"),
    ("{if: [is_off, a, b]}", "b"),
    ("[a, {if: [false, b]}, c]", ["a", "c"]),      # 2-argument if (wallaby) removes the item
    ("{x: {if: [false, 1]}, y: 2}", {"y": 2}),
    ("{if: [{equals: [{get_param: s}, abc]}, same, other]}", "same"),
])
def test_if(tmp_path, snippet, expected):
    tmpl = f"""\
heat_template_version: {W}
parameters:
  s: {{type: string, default: abc}}
conditions:
  is_on: true
  is_off: {{not: is_on}}
resources:
  v:
    type: OS::Heat::Value
    properties:
      value: {snippet}
outputs:
  o: {{value: {{get_attr: [v, value]}}}}
"""
    from tests.unit.template_support import run

    assert run(tmp_path, tmpl)["o"] == expected


def test_if_two_arguments_only_from_wallaby(tmp_path):
    assert 'Arguments to "if" must be of the form' in error(tmp_path, "2018-08-31", "{if: [true, a]}")


def test_if_unknown_condition(tmp_path):
    assert error(tmp_path, W, "{if: [nosuch, a, b]}").endswith('Invalid condition "nosuch"')


# --------------------------------------------------------------------- resources & files
def test_get_attr_and_get_resource(tmp_path):
    from tests.unit.template_support import run

    out = run(tmp_path, f"""\
heat_template_version: {W}
resources:
  a: {{type: OS::Heat::Value, properties: {{value: {{x: [1, 2]}}}}}}
  b: {{type: OS::Heat::Value, properties: {{value: {{get_attr: [a, value, x, 1]}}}}}}
outputs:
  b: {{value: {{get_attr: [b, value]}}}}
  all: {{value: {{get_attr: [a]}}}}
  ref: {{value: {{get_resource: a}}}}
""")
    assert out == {"b": 2, "all": {"value": {"x": [1, 2]}}, "ref": "a"}


def test_get_attr_forms_per_version(tmp_path):
    assert 'Arguments to "get_attr" must be of the form' in error(tmp_path, "2015-04-30", "{get_attr: [v]}")
    assert 'Argument to "get_attr" must be a list' in error(tmp_path, W, "{get_attr: v}")


def test_get_file_relative_to_the_file_naming_it(tmp_path):
    files = {"sub/data.txt": "hello\n", "sub/child.yaml": f"""\
heat_template_version: {W}
resources:
  r: {{type: OS::Heat::Value, properties: {{value: {{get_file: data.txt}}}}}}
outputs:
  o: {{value: {{get_attr: [r, value]}}}}
"""}
    from tests.unit.template_support import run

    out = run(tmp_path, f"""\
heat_template_version: {W}
resources:
  c: {{type: sub/child.yaml}}
  d: {{type: OS::Heat::Value, properties: {{value: {{get_file: sub/data.txt}}}}}}
outputs:
  c: {{value: {{get_attr: [c, o]}}}}
  d: {{value: {{get_attr: [d, value]}}}}
""", files=files)
    assert out == {"c": "hello\n", "d": "hello\n"}


def test_resource_facade_gives_the_parent_resource_metadata(tmp_path):
    from tests.unit.template_support import run

    files = {"child.yaml": f"""\
heat_template_version: {W}
resources:
  r: {{type: OS::Heat::Value, properties: {{value: {{resource_facade: metadata}}}}}}
outputs:
  o: {{value: [{{get_attr: [r, value]}}, {{resource_facade: deletion_policy}}]}}
"""}
    out = run(tmp_path, f"""\
heat_template_version: {W}
resources:
  c: {{type: child.yaml, metadata: {{role: web}}, deletion_policy: Retain}}
outputs:
  o: {{value: {{get_attr: [c, o]}}}}
""", files=files)
    assert out["o"] == [{"role": "web"}, "Retain"]


def test_resource_facade_bad_argument(tmp_path):
    assert "should be one of: metadata, deletion_policy, update_policy" in error(
        tmp_path, W, "{resource_facade: name}")


# ------------------------------------------------------------------ CFN-style, 2013 only
@pytest.mark.parametrize("snippet, expected", [
    ("{'Fn::Select': [1, [a, b]]}", "b"),
    ("{Ref: s}", "abc"),
    ("{'Fn::Join': [',', [a, b]]}", "a,b"),
    ("{'Fn::Replace': [{X: y}, 'aX']}", "ay"),
])
def test_cfn_functions_in_2013(tmp_path, snippet, expected):
    assert value(tmp_path, "2013-05-23", snippet, "s: {type: string, default: abc}\n") == expected


def test_cfn_functions_removed_later(tmp_path):
    msg = error(tmp_path, "2014-10-16", "{'Fn::Join': [',', [a, b]]}")
    assert msg.endswith("The template version is invalid: The function Fn::Join is not supported in this "
                        "version of HOT.")
    assert "Fn::Select is not supported" in error(tmp_path, "2015-10-15", "{'Fn::Select': [0, [a]]}")
    assert value(tmp_path, "2014-10-16", "{'Fn::Select': [0, [a]]}") == "a"
