"""Hostile templates against the limits of limits.py: each is refused early (in well under a
second, before anything is expanded or built), as one line naming where, the limit and the
variable that sets it; hidden values never show in those lines."""

from __future__ import annotations

import time

import pytest

from tests.unit.template_support import bundle, outputs, problems
from undercloud.errors import InvalidInput
from undercloud.orchestration.limits import LIMITS, Limits, cut, override
from undercloud.orchestration.template import Bundle, TemplateError, load
from undercloud.orchestration.template.preview import preview
from undercloud.orchestration.template.source import parse_yaml

V = "heat_template_version: 2021-04-16\n"
SECRET = "pw-Zq8xK3vT9nL2"


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The issue's 735-byte template: a json default whose aliases stand for width**levels nodes."""
    lines = [V.strip(), "parameters:", "  p:", "    type: json", "    default:",
             "      a0: &a0 [" + ",".join(['"x"'] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"      a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines + ["resources: {}"]) + "\n"


def quick(fn, *args, limit: float = 1.0, **kw):
    t = time.monotonic()
    try:
        return fn(*args, **kw)
    finally:
        took = time.monotonic() - t
        assert took < limit, f"took {took:.2f} s"


def one(exc: pytest.ExceptionInfo) -> str:
    msgs = exc.value.problems
    assert len(msgs) == 1, msgs
    assert "\n" not in msgs[0]
    return msgs[0]


# ----------------------------------------------------------------------------- the YAML layer

def test_alias_bomb_is_refused_at_parse_time(tmp_path):
    text = alias_bomb()
    assert len(text) < 800
    with pytest.raises(TemplateError) as exc:
        quick(Bundle.from_paths, str(bundle_file(tmp_path, text)))
    msg = one(exc)
    assert msg.startswith(f"{tmp_path / 't.yaml'}:") and "invalid YAML" in msg
    assert "UNDERCLOUD_MAX_YAML_ALIAS_NODES" in msg and "100,000" in msg


def test_aliases_within_the_limit_are_shared_not_copied(tmp_path):
    doc = quick(parse_yaml, alias_bomb(levels=4), "t.yaml")  # 9**4 = 6,561 nodes through aliases
    a3 = doc["parameters"]["p"]["default"]["a3"]
    assert a3[0] is a3[1]  # the same object: nothing was copied
    assert len(a3) == 9 and a3[0][0][0] == ["x"] * 9


def test_merge_keys_doubling_is_refused(tmp_path):
    # each level merges the previous one twice: 2**40 pairs if PyYAML's own flattening ran
    lines = ["m0: &m0 {a: 1, b: 2}"] + [f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}], k{i}: {i}}}" for i in range(1, 40)]
    with pytest.raises(TemplateError) as exc:
        quick(parse_yaml, "\n".join(lines) + "\n", "m.yaml")
    assert "UNDERCLOUD_MAX_YAML_ALIAS_NODES" in one(exc)


def test_merge_keys_still_merge_as_yaml_says():
    doc = parse_yaml("base: &b {a: 1, b: 2}\nother: &o {b: 3, c: 4}\n"
                     "x: {<<: [*b, *o], c: 5}\ny: {<<: *b, a: 0}\n", "m.yaml")
    assert doc["x"] == {"a": 1, "b": 2, "c": 5}  # the first mapping listed wins, keys written win
    assert doc["y"] == {"a": 0, "b": 2}


def test_data_nesting_depth_is_limited_and_settable():
    deep = "".join(f"{'  ' * i}k{i}:\n" for i in range(150)) + "  " * 150 + "v\n"
    with pytest.raises(TemplateError) as exc:
        quick(parse_yaml, deep, "d.yaml")
    msg = one(exc)
    assert msg.startswith("d.yaml:101: invalid YAML: data nests more than 100 levels deep")
    assert "UNDERCLOUD_MAX_DATA_DEPTH" in msg
    with override(data_depth=200):
        assert parse_yaml(deep, "d.yaml")["k0"]["k1"]


def test_file_size_limits(tmp_path):
    big = V + "description: '" + "x" * (LIMITS.file_bytes + 10) + "'\nresources: {}\n"
    with pytest.raises(TemplateError) as exc:
        Bundle.from_paths(str(bundle_file(tmp_path, big)))
    assert "UNDERCLOUD_MAX_TEMPLATE_BYTES" in one(exc)
    # through the API a bundle is JSON: the same limits, before any file is parsed
    with pytest.raises(TemplateError) as exc:
        Bundle.from_json({"template": "t.yaml", "files": {"t.yaml": big}})
    assert one(exc).startswith("t.yaml: the size of the file in bytes")
    files = {f"f{i}.yaml": "#" * 1000 for i in range(20)}
    with override(bundle_bytes=10_000), pytest.raises(TemplateError) as exc:
        Bundle.from_json({"template": "f0.yaml", "files": files})
    assert "UNDERCLOUD_MAX_BUNDLE_BYTES" in one(exc)
    # non-ASCII text counts in UTF-8 bytes
    with override(file_bytes=100), pytest.raises(TemplateError):
        Bundle.from_json({"template": "t.yaml", "files": {"t.yaml": "é" * 60}})


# ------------------------------------------------------------------------------- templates

def test_nested_stack_depth_is_settable(tmp_path):
    rec = V + ("parameters:\n  depth: {type: number}\nconditions:\n  more: {not: {equals: [{get_param: depth}, 0]}}\n"
               "resources:\n  r:\n    type: rec.yaml\n    condition: more\n"
               "    properties: {depth: {yaql: {expression: $.data.d - 1, data: {d: {get_param: depth}}}}}\n")
    top = V + "resources:\n  r: {type: rec.yaml, properties: {depth: 5}}\n"
    with override(nested_depth=3):
        msgs = problems(tmp_path, top, files={"rec.yaml": rec})
    assert any("Recursion depth exceeds 3" in m and "UNDERCLOUD_MAX_NESTED_DEPTH" in m for m in msgs), msgs
    assert load(bundle(tmp_path, top, files={"rec.yaml": rec}))  # 5 levels: within the default 10


GROUP = V + """\
parameters:
  count: {type: number, default: 2}
resources:
  g:
    type: OS::Heat::ResourceGroup
    properties:
      count: {get_param: count}
      resource_def: {type: OS::Heat::None}
"""


@pytest.mark.parametrize("count, expected", [
    (10_000_000, ":8: resources.g.properties.count: the count of members (10,000,000) is more than the "
                 "limit of 10,000 (set UNDERCLOUD_MAX_GROUP_COUNT to change it)"),
    (-1, ":8: resources.g.properties.count: count must be 0 or more, not -1"),
])
def test_group_count_is_checked_at_load(tmp_path, count, expected):
    with pytest.raises(TemplateError) as exc:
        quick(load, bundle(tmp_path, GROUP), {"count": count})
    assert one(exc).endswith(expected)


def test_resources_of_the_whole_tree_are_counted_at_load(tmp_path):
    child = V + "resources:\n" + "".join(f"  r{i}: {{type: OS::Heat::None}}\n" for i in range(10))
    top = V + """\
parameters:
  n: {type: number, default: 3}
resources:
  g:
    type: OS::Heat::ResourceGroup
    properties: {count: {get_param: n}, resource_def: {type: child.yaml}}
  c: {type: child.yaml}
"""
    t = load(bundle(tmp_path, top, files={"child.yaml": child}))
    assert t.tree_size == 2 + 3 * 11 + 10
    with override(resources=40), pytest.raises(TemplateError) as exc:
        load(bundle(tmp_path, top, files={"child.yaml": child}))
    assert one(exc).endswith("resources: the number of resources of the stack tree (nested stacks and group "
                             "members counted) (45) is more than the limit of 40 (set "
                             "UNDERCLOUD_MAX_RESOURCES_PER_STACK to change it)")


GROWTH = V + f"""\
parameters:
  secret: {{type: string, hidden: true, default: {SECRET}}}
resources:
  big:
    type: OS::Heat::Value
    properties:
      value:
        str_replace:
          template: "$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s$s"
          params:
            $s:
              str_replace:
                template: "$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t$t"
                params:
                  $t:
                    str_replace:
                      template: "$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u$u"
                      params:
                        $u:
                          str_replace:
                            template: "$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v$v"
                            params:
                              $v: {{list_join: ['', [{{get_param: secret}}, {{get_param: secret}}]]}}
outputs:
  o: {{value: {{get_attr: [big, value]}}}}
"""


def test_a_value_growing_to_a_billion_characters_is_refused_early(tmp_path):
    # 32**4 copies of a 30-character secret: ~31 million characters, then ~10**9 one level up
    # known from parameters, it is computed (bounded) at validation, as Heat would
    with pytest.raises(TemplateError) as exc:
        quick(lambda: outputs(load(bundle(tmp_path, GROWTH))))
    msg = one(exc)
    assert ":9: resources.big.properties.value.str_replace:" in msg, msg  # the first level past the limit
    assert "the length of its result in characters" in msg and "UNDERCLOUD_MAX_VALUE_CHARS" in msg
    assert SECRET not in msg and SECRET[:8] not in msg


@pytest.mark.parametrize("value", [
    # three lists of 500: 125 million copies
    "{repeat: {template: '%a%%b%%c%', for_each: {'%a%': {get_param: l}, '%b%': {get_param: l},"
    " '%c%': {get_param: l}}}}",
    # one copy, but each copy holds 2,000 times a 100,000-character item
    "{repeat: {template: {get_param: many}, for_each: {'%a%': [{get_param: long}]}}}",
    "{list_join: ['', {repeat: {template: {get_param: long}, for_each: {'%a%': {get_param: l}}}}]}",
    # three times 300 items of 1,000 characters
    "{list_concat: [{get_param: wide}, {get_param: wide}, {get_param: wide}]}",
])
def test_copies_are_refused_before_they_are_made(tmp_path, value):
    t = V + f"""\
parameters:
  l: {{type: comma_delimited_list, default: "{','.join(str(i) for i in range(500))}"}}
  long: {{type: string, default: {'x' * 100_000}}}
  many: {{type: string, default: '{'%a%' * 2000}'}}
  wide: {{type: comma_delimited_list, default: '{','.join(['w' * 1000] * 300)}'}}
resources:
  r: {{type: OS::Heat::Value, properties: {{value: {value}}}}}
"""
    with override(value_chars=800_000), pytest.raises(TemplateError) as exc:
        quick(lambda: outputs(load(bundle(tmp_path, t))))
    assert "resources.r.properties.value" in one(exc) and "UNDERCLOUD_MAX_VALUE_CHARS" in one(exc)


def test_cfn_replace_growth_is_refused(tmp_path):
    t = """\
heat_template_version: 2013-05-23
parameters:
  long: {type: string, default: LONG}
resources:
  r:
    type: OS::Heat::Value
    properties: {value: {"Fn::Replace": [{"$x": {get_param: long}}, "MANY"]}}
""".replace("LONG", "y" * 10_000).replace("MANY", "$x" * 1000)
    with override(value_chars=1_000_000), pytest.raises(TemplateError) as exc:
        quick(outputs, load(bundle(tmp_path, t)))
    assert '"Fn::Replace"' in one(exc) and "UNDERCLOUD_MAX_VALUE_CHARS" in one(exc)


def test_a_parameter_value_over_the_limit(tmp_path):
    t = V + "parameters:\n  p: {type: json}\n  h: {type: string, hidden: true}\nresources: {}\n"
    with override(value_chars=1000), pytest.raises(TemplateError) as exc:
        load(bundle(tmp_path, t), {"p": {"k": ["v" * 100] * 20}, "h": SECRET * 100})
    msgs = exc.value.problems
    assert len(msgs) == 2
    assert "Parameter 'p' is invalid: the length of the value in characters" in msgs[0]
    assert all("UNDERCLOUD_MAX_VALUE_CHARS" in m and SECRET not in m for m in msgs)


def test_long_messages_are_cut_and_hidden_values_masked_even_when_cut(tmp_path):
    # the hidden value is quoted past the cut (a message is cut at 200 characters of a value)
    t = f"""\
heat_template_version: 2015-04-30
parameters:
  h: {{type: json, hidden: true, default: {{"k": "{'a' * 190}{SECRET}"}}}}
resources:
  r: {{type: OS::Heat::Value, properties: {{value: {{list_join: ['', [{{get_param: h}}]]}}}}}}
"""
    with pytest.raises(TemplateError) as exc:
        outputs(load(bundle(tmp_path, t)))
    msg = one(exc)
    # the start of the value, cut before the secret's end, is masked too
    assert "Items to join must be strings not " in msg and msg.endswith("******…"), msg
    assert "a" * 50 not in msg and SECRET[:3] not in msg
    assert len(cut("x" * 10_000)) == LIMITS.message_chars and cut("x" * 10_000).endswith("…")


def test_hidden_value_passed_to_a_nested_template_stays_masked(tmp_path):
    child = V + "parameters:\n  p: {type: string, constraints: [{allowed_pattern: '[0-9]+'}]}\nresources: {}\n"
    top = V + f"""\
parameters:
  h: {{type: string, hidden: true, default: {SECRET}}}
resources:
  c: {{type: child.yaml, properties: {{p: {{get_param: h}}}}}}
"""
    msgs = problems(tmp_path, top, files={"child.yaml": child})
    assert msgs and all(SECRET not in m for m in msgs), msgs
    assert "does not match pattern" in msgs[0] and "******" in msgs[0]


def test_preview_refuses_oversized_properties(tmp_path):
    t = V + """\
parameters:
  l: {type: comma_delimited_list, default: "a,b"}
resources:
  r: {type: OS::Heat::Value, properties: {value: [*l, *l, *l]}}
"""
    big = ",".join(["x" * 100] * 100)
    t = t.replace("[*l, *l, *l]", "[{get_param: l}, {get_param: l}, {get_param: l}]")
    tmpl = load(bundle(tmp_path, t), {"l": big})
    with override(value_chars=20_000), pytest.raises(TemplateError) as exc:
        preview(tmpl)
    assert "resources.r.properties: the length of the properties" in one(exc)


def test_a_pattern_that_backtracks_without_bound_cannot_freeze_validation(tmp_path):
    t = V + """\
parameters:
  p:
    type: string
    default: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!
    constraints: [{allowed_pattern: '(a+)+$'}]
  q: {type: string, default: abc.def, constraints: [{allowed_pattern: '^[a-z]+(\\.[a-z]+)*$'}]}
resources: {}
"""
    with pytest.raises(TemplateError) as exc:
        quick(load, bundle(tmp_path, t))  # 2**40 steps in Python's re; linear on RE2
    assert one(exc).endswith('parameters.p.default: Parameter \'p\' is invalid: Invalid default '
                             'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa! ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!" '
                             'does not match pattern "(a+)+$")')
    assert load(bundle(tmp_path, t.replace("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!", "aaa"))).parameters["q"]


POLYNOMIAL = V + "parameters:\n  p: {type: string, constraints: [{allowed_pattern: '^\\s*\\s*\\s*\\s*\\s*\\s*x$'}]}\n" \
                 "resources: {}\n"


def test_a_pattern_that_backtracks_polynomially_is_matched_in_linear_time(tmp_path):
    # the case: \s* six times, then x, against 400 spaces (400**6/720 steps in re)
    with pytest.raises(TemplateError) as exc:
        quick(load, bundle(tmp_path, POLYNOMIAL), {"p": " " * 400})
    assert "Parameter 'p' is invalid" in one(exc) and "does not match pattern" in one(exc)
    assert quick(load, bundle(tmp_path, POLYNOMIAL), {"p": " " * 400 + "x"}).parameters["p"].value.endswith("x")


def test_a_pattern_re2_cannot_run_is_matched_in_a_child_process_under_the_limit(tmp_path):
    # a lookahead: Python's re in a child process; exponential there, so over the limit
    t = V + "parameters:\n  p: {type: string, constraints: [{allowed_pattern: '(a+)+(?!c)b'}]}\nresources: {}\n"
    with override(pattern_ms=300), pytest.raises(TemplateError) as exc:
        quick(load, bundle(tmp_path, t), {"p": "a" * 40}, limit=5)
    assert one(exc).endswith("Parameter 'p' is invalid: the time in milliseconds to match the pattern "
                             "\"(a+)+(?!c)b\" (in Python's re: RE2 cannot run it) is more than the limit of 300 "
                             "(set UNDERCLOUD_MAX_PATTERN_MS to change it)")
    # TripleO's own lookahead (overcloud.yaml's BondInterfaceOvsOptions) keeps working
    bond = V + "parameters:\n  b: {type: string, default: '', constraints: [{allowed_pattern: " \
               "'^((?!balance.tcp).)*$'}]}\nresources: {}\n"
    assert load(bundle(tmp_path, bond), {"b": "bond_mode=balance-slb lacp=active"}).parameters["b"].value
    with pytest.raises(TemplateError) as exc:
        load(bundle(tmp_path, bond), {"b": "bond_mode=balance-tcp"})
    assert "does not match pattern" in one(exc)


@pytest.mark.parametrize("pattern, text", [
    ("a|ab", "ab"),  # re.match takes the first alternative: not the whole text, as Heat
    ("[a-z]+$", "abc\n"), ("[a-z]+$\n", "abc\n"), ("(?m)^a$\n^b$", "a\nb"), ("[a-z]+$\\s", "ab\nc"),
    ("\\d+", "١٢٣"), ("\\w+", "été_1"), ("(?a)\\w+", "été"), ("\\s+", "\x1c\u3000\v"), ("(?i)straße", "STRASSE"),
    ("(?i)k", "\u212a"), ("(?i)\u0130", "i"), ("\\bé", "été"), ("\\B", ""), ("(?s).+", "a\nb"), (".+", "a\nb"),
    ("(a|)*b", "aab"), ("(a*)+$", "aa"), ("(|a)+", "aa"), ("x{2,1000}", "x" * 999), ("x{1001}", "x" * 1001),
    ("(a)\\1", "aa"), ("(?<=a)b|ab", "ab"), ("\\Aab\\Z", "ab"), ("[^\\W\\d]+", "ab_9"), ("\ud800?x", "x"),
])
def test_allowed_pattern_means_what_pythons_re_match_means(pattern, text):
    import re

    from undercloud.orchestration.template.patterns import pattern_matches

    m = re.match(pattern, text)
    assert pattern_matches(pattern, text) == (m is not None and m.end() == len(text)), (pattern, text)


@pytest.mark.parametrize("expression, expected", [
    ('regex("(a+)+b").matches($.data)', "the pattern '(a+)+b' repeats a repetition or an alternation"),
    ('regex("(a|aa)*c").matches($.data)', "the pattern '(a|aa)*c' repeats"),
    ('regex("^(a*)(a*)(a*)(a*)(a*)d").matches($.data)', "the pattern '^(a*)(a*)(a*)(a*)(a*)d' repeats"),
    # yes/no with the pattern as text: RE2 answers for Python's re (backtracking or not)
    ('$.data =~ "(a|aa)*c"', True), ('$.data =~ "^(a*)(a*)(a*)(a*)(a*)d"', False),
    ('$.data !~ "^\\s*\\s*\\s*\\s*\\s*\\s*x"', True), ('$.data.matches("(a+)+$")', False),
    ('$.data.matches("(a+)+(?=c)")', "the pattern '(a+)+(?=c)' repeats"),  # not RE2's: refused as before
    ('regex("(?:https?://)?(.*?)/(.*)").split($.data)', ["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaac"]),  # TripleO's
    ('regex("([0-9]+[K|M|G])").search($.data)', None),  # as TripleO's templates use it
    ("$.data.matches('(\\.|:)')", False),
])
def test_yaql_regex_patterns_that_backtrack_are_refused(tmp_path, expression, expected):
    quoted = expression.replace("'", "''")
    t = V + f"resources:\n  r: {{type: OS::Heat::Value, properties: {{value: {{yaql: {{expression: '{quoted}', " \
            f"data: {'a' * 40}c}}}}}}}}\n"
    if isinstance(expected, str):
        with pytest.raises(TemplateError) as exc:  # at validation: its data is known
            quick(lambda: load(bundle(tmp_path, t)))
        assert "yaql evaluation failed: " + expected in one(exc)
    else:
        tmpl = load(bundle(tmp_path, t))
        assert quick(outputs, tmpl) == {} and tmpl.resolve(tmpl.resources["r"].properties, None) == {"value": expected}


# ---------------------------------------------------------------------------------- settings

def test_a_problem_is_one_line_however_long_its_keys(tmp_path):
    t = V + "resources:\n  ? " + "k" * 5000 + "\n  : 1\n"  # a resource named by 5,000 characters
    msg = one_problem(tmp_path, t)
    assert len(msg) == LIMITS.message_chars and msg.endswith("…")


def one_problem(tmp_path, text: str) -> str:
    with pytest.raises(TemplateError) as exc:
        load(bundle(tmp_path, text))
    return one(exc)


def test_limits_come_from_the_environment():
    lim = Limits({"UNDERCLOUD_MAX_GROUP_COUNT": "5", "UNDERCLOUD_MAX_VALUE_CHARS": "1_000"})
    assert (lim.group_count, lim.value_chars, lim.resources) == (5, 1000, 10_000)
    for bad in ("0", "-3", "many"):
        with pytest.raises(InvalidInput) as exc:
            Limits({"UNDERCLOUD_MAX_RESOURCES_PER_STACK": bad})
        assert str(exc.value) == f"UNDERCLOUD_MAX_RESOURCES_PER_STACK={bad!r}: expected a whole number of 1 or more"


def bundle_file(tmp_path, text: str):
    p = tmp_path / "t.yaml"
    p.write_text(text)
    return p


# ------------------------------------------------------------------- size-like properties

BOUNDED = [  # (resources with {N} where the bounded number goes, its limit, the property's path)
    ("r: {type: OS::Heat::RandomString, properties: {length: {N}}}", "random_length", "r.properties.length"),
    ("r: {type: OS::Heat::RandomString, properties: {length: 512, character_classes: [{class: digits, min: {N}}]}}",
     "random_length", "r.properties: character_classes[0].min"),
    ("r: {type: OS::Heat::RandomString, properties: {length: 512, character_sequences: [{sequence: '!?', min: {N}}]}}",
     "random_length", "r.properties: character_sequences[0].min"),
    ("h: {type: OS::Heat::WaitConditionHandle}\n  w: {type: OS::Heat::WaitCondition, properties: "
     "{handle: {get_resource: h}, timeout: {N}}}", "wait_seconds", "w.properties.timeout"),
    ("h: {type: OS::Heat::WaitConditionHandle}\n  w: {type: OS::Heat::WaitCondition, properties: "
     "{handle: {get_resource: h}, timeout: 60, count: {N}}}", "group_count", "w.properties.count"),
    ("r: {type: OS::Heat::TestResource, properties: {wait_secs: {N}}}", "wait_seconds", "r.properties.wait_secs"),
    ("r: {type: OS::Heat::TestResource, properties: {action_wait_secs: {delete: {N}}}}", "wait_seconds",
     "r.properties.action_wait_secs.delete"),
    ("g: {type: OS::Heat::ResourceGroup, properties: {count: {N}, resource_def: {type: OS::Heat::None}}}",
     "group_count", "g.properties.count"),
]


@pytest.mark.parametrize("resource, limit, where", BOUNDED)
def test_size_like_properties_are_bounded_by_their_limit_at_validation(tmp_path, resource, limit, where):
    with override(resources=10 * LIMITS.resources):  # a group at its limit is the group and 10,000 members
        bounded_at_validation(tmp_path, resource, limit, where)


def bounded_at_validation(tmp_path, resource, limit, where):
    from undercloud.orchestration.limits import BY_NAME

    n = getattr(LIMITS, limit)
    t = V + "parameters:\n  n: {type: number}\nresources:\n  " + resource.replace("{N}", "{get_param: n}") + "\n"
    assert quick(load, bundle(tmp_path, t), {"n": n}).resources  # at the limit: accepted
    with pytest.raises(TemplateError) as exc:
        quick(load, bundle(tmp_path, t), {"n": n + 1})
    assert one(exc).endswith(f"resources.{where}: the value ({n + 1:,}) is more than the limit of {n:,} "
                             f"(set {BY_NAME[limit].env} to change it)") or "count of members" in one(exc)
    with override(**{limit: n + 1}):  # the limit is the table's, as its variable sets it
        t = t.replace("length: 512", "length: 513")
        assert load(bundle(tmp_path, t), {"n": n + 1}).resources


def test_a_random_string_of_two_billion_characters_is_refused_at_validation(tmp_path):
    t = V + "resources:\n  r: {type: OS::Heat::RandomString, properties: {length: 2000000000}}\n"
    with pytest.raises(TemplateError) as exc:
        quick(load, bundle(tmp_path, t))
    assert one(exc).endswith("resources.r.properties.length: the value (2,000,000,000) is more than the limit "
                             "of 512 (set UNDERCLOUD_MAX_RANDOM_LENGTH to change it)")
    for bad, why in (("0", "0 is less than the minimum of 1"), ("8, character_classes: [{min: 5}, {min: 4}]",
                                                               "length (8) is smaller than the combined")):
        with pytest.raises(TemplateError) as exc:
            load(bundle(tmp_path, t.replace("2000000000", bad)))
        assert why in one(exc)


def test_a_random_string_known_only_at_runtime_fails_before_it_is_made():
    from undercloud.orchestration.resources.base import ResourceFailure, StackRef
    from undercloud.orchestration.resources.heat import RandomString

    r = RandomString(name="r", uuid="u", stack=StackRef("s", "s", "s"), properties={"length": 2_000_000_000})
    with pytest.raises(ResourceFailure, match="length: the value .2,000,000,000. is more than the limit of 512"):
        quick(r.create)
    assert "value" not in r.data
    r.properties = {"length": 512}
    r.create()
    assert len(r.data["value"]) == 512


def test_re2_rewrite_agrees_with_pythons_re_on_random_patterns():
    """Patterns made at random of classes, anchors, groups, alternations and repetitions, with
    flags, against values of ASCII and other letters, digits and spaces: wherever the RE2 path
    is taken, its answers are re.match's and re.search's (seeded: the same cases each run)."""
    import random
    import re

    from undercloud.orchestration.template import patterns

    atoms = ["a", "b", ".", r"\d", r"\w", r"\s", r"\S", r"\W", "[a-c]", "[^a]", "é", "É", "K", "[0-9]", r"\b",
             r"\B", "^", "$", r"\A", r"\Z", "(?i:a)", "(?i:é)", "(?s:.)", "(?m:$)", "(?m:^)", "\n", " ", "_", "ı",
             "İ", r"(?a:\w)", "[à-ü]"]
    rng = random.Random(43)

    def gen(depth: int = 0) -> str:
        r = rng.random()
        if depth > 3 or r < 0.35:
            return rng.choice(atoms)
        if r < 0.55:
            return gen(depth + 1) + gen(depth + 1)
        if r < 0.7:
            return f"(?:{gen(depth + 1)}|{gen(depth + 1)})"
        return f"({gen(depth + 1)})" + rng.choice(["*", "+", "?", "*?", "+?", "??", "{0,2}", "{2}", "{1,3}?"])

    letters = "ab é_É1\n kKİıx\u212a٣"
    taken = 0
    for _ in range(1500):
        pattern = ("(?i)" if rng.random() < 0.1 else "") + gen()
        for _ in range(4):
            text = "".join(rng.choice(letters) for _ in range(rng.randint(0, 6)))
            plan = patterns._rewrite(pattern, "".join(sorted({c for c in text if ord(c) > 127})))
            if plan is None or (plan[1] and "\n" in text[:-1]) or (plan[2] and not text):
                continue
            m, m2 = re.match(pattern, text), plan[0].match(text)
            assert (m is not None and m.end() == len(text)) == (m2 is not None and m2.end() == len(text)), \
                (pattern, text)
            assert (re.search(pattern, text) is None) == (plan[0].search(text) is None), (pattern, text)  # =~
            taken += 1
    assert taken > 3000  # most cases take the RE2 path


def test_a_rewrite_too_big_for_re2_is_left_to_the_child_quickly():
    # RE2 compiles holding the interpreter: a pattern whose classes over the value's alphabet
    # would pass 256 KiB (or take too many probes) is matched by the child instead
    from undercloud.orchestration.template import patterns

    text = "".join(chr(0x4E00 + 2 * i) for i in range(1000))
    for pattern in ("[^a]" * 10_000, "".join(f"[^{chr(0x4E00 + 2 * i)}]" for i in range(3000))):
        assert quick(patterns._rewrite, pattern, text) is None
    assert quick(patterns._rewrite, "[^a]" * 10_000, "") is not None  # ASCII values: small classes
    assert quick(patterns.pattern_matches, "[^a]" * 1000, text, limit=5) is True


def test_a_resource_chain_is_bounded_by_the_group_limit_at_validation(tmp_path):
    t = V + "parameters:\n  l: {type: comma_delimited_list}\nresources:\n" \
            "  c: {type: OS::Heat::ResourceChain, properties: {resources: {get_param: l}}}\n"
    with override(group_count=50):
        assert quick(load, bundle(tmp_path, t), {"l": ",".join(["OS::Heat::None"] * 50)}).resources
        with pytest.raises(TemplateError) as exc:
            quick(load, bundle(tmp_path, t), {"l": ",".join(["OS::Heat::None"] * 51)})
    assert one(exc).endswith("resources.c.properties.resources: the count of members (51) is more than the limit "
                             "of 50 (set UNDERCLOUD_MAX_GROUP_COUNT to change it)")


def test_a_deployment_group_is_bounded_by_the_group_limit_at_validation(tmp_path):
    t = V + "parameters:\n  s: {type: json}\nresources:\n  c: {type: OS::Heat::SoftwareConfig}\n" \
            "  d: {type: OS::Heat::SoftwareDeploymentGroup, properties: {config: {get_resource: c}, " \
            "servers: {get_param: s}}}\n"
    with override(group_count=50):
        assert quick(load, bundle(tmp_path, t), {"s": {f"n{i}": f"id{i}" for i in range(50)}}).resources
        with pytest.raises(TemplateError) as exc:
            quick(load, bundle(tmp_path, t), {"s": {f"n{i}": f"id{i}" for i in range(51)}})
    assert one(exc).endswith("resources.d.properties.servers: the count of members (51) is more than the limit "
                             "of 50 (set UNDERCLOUD_MAX_GROUP_COUNT to change it)")
