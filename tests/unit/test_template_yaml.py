"""The YAML reader: documents built from libyaml's events (yamldata._Events) are exactly what
the node reader builds (values, types, lines, shared aliases), and whatever it leaves (tags,
merge keys, errors, limits) is read by the node reader, so messages keep their file:line."""

from __future__ import annotations

import math
import os

import pytest
import yaml

from undercloud import yamldata
from undercloud.orchestration.limits import LIMITS, override
from undercloud.orchestration.template.environment import Registry
from undercloud.orchestration.template.source import TemplateError, parse_yaml

pytestmark = pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="PyYAML without libyaml")

THT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "corpus", "tripleo-heat-templates-victoria")

# plain data: the event reader builds these itself
PLAIN = [
    "",
    "---\n",
    "a: 1\n",
    "heat_template_version: 2013-05-23\ndescription: >\n  folded\n  text\nx: |\n  kept\n",
    "k: [yes, no, on, off, true, False, ~, null, '', 0x1F, 0o17, 017, 1_000, 1:30, -2, +3, 1.5, 1e3, .inf, -.Inf, .nan]\n",
    "keys:\n  1: int\n  true: bool\n  ~: null\n  2.5: float\n  '1': str\n  2013-05-23: date\n",
    "dup: 1\nother: 2\ndup: 3\n",
    "a: &a {x: [1, 2], y: z}\nb: *a\nc: [*a, *a, &s scalar, *s]\nd:\n  - *a\n  -\n    e: *s\n",
    "list:\n- a\n-\n  - b\n  - {c: d}\n- \"quoted\\ttext\"\n- 'single'\n",
    "flow: {a: [1, {b: 2}], c: }\n",
    "- top\n- level\n- list\n",
    "just a scalar\n",
    "? complex key\n: value\n",
]

# the node reader's: merge keys, tags, several documents, errors, limits
NODE = [
    "base: &b {a: 1}\nx: {<<: *b, c: 2}\n",
    "x: {=: 1}\n",
    "a: !!str 1\nb: !!int '2'\nc: !!set {x, y}\nd: !!binary aGk=\ne: !!omap [{a: 1}]\nf: !custom x\n",
    "? [a, b]\n: c\n",
    "? {a: 1}\n: c\n",
    "*x\n",
    "a: &x [*x]\n",
    "a: &x 1\nb: &x 2\n",
    "a: 1\n---\nb: 2\n",
    "a: !!float x\n",
    "a: [1, 2\n",
    "a: b: c\n",
    "\tk: v\n",
    "{get_attr:[a, b]}\n",
    "x: {get_attr:[a, b], y: 1}\n",
]


def same(a, b) -> bool:
    """Equal values of the same types with the same lines, at every level."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return (a.line, a.lines, list(a)) == (b.line, b.lines, list(b)) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return (a.line, a.lines, len(a)) == (b.line, b.lines, len(b)) and all(same(x, y) for x, y in zip(a, b))
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


def node_reader(text: str, name: str = "t.yaml"):
    """parse_yaml as it was before the event reader: the node reader only."""
    real = yamldata._load_events

    def slow(text, limits):
        raise yamldata._Slow

    yamldata._load_events = slow
    try:
        return parse_yaml(text, name)
    finally:
        yamldata._load_events = real


def outcome(parse, text):
    try:
        return "ok", parse(text, "t.yaml")
    except TemplateError as exc:
        return "error", exc.problems


@pytest.mark.parametrize("text", PLAIN)
def test_plain_data_is_built_from_events_as_the_node_reader_builds_it(text):
    doc = yamldata._load_events(text, LIMITS)  # no fallback here
    assert same(doc, node_reader(text))
    assert same(parse_yaml(text, "t.yaml"), doc)


@pytest.mark.parametrize("text", NODE)
def test_what_the_event_reader_leaves_is_the_node_readers(text):
    with pytest.raises((yamldata._Slow, yaml.YAMLError)):
        yamldata._load_events(text, LIMITS)
    got, want = outcome(parse_yaml, text), outcome(node_reader, text)
    assert got[0] == want[0]
    assert got[1] == want[1] if got[0] == "error" else same(got[1], want[1])


def test_aliases_are_the_same_object_at_their_anchors_line():
    doc = parse_yaml("a: &a {x: 1}\nb: *a\nc:\n  - *a\n  - 2\n", "t.yaml")
    assert doc["b"] is doc["a"] and doc["c"][0] is doc["a"]
    assert doc.lines == {"a": 1, "b": 2, "c": 3} and doc["c"].lines == [1, 5]


def test_problems_name_file_and_line():
    with pytest.raises(TemplateError) as exc:
        parse_yaml("a: 1\nb: [1, 2\nc: 3\n", "dir/t.yaml")
    assert exc.value.problems == node_reader_problems("a: 1\nb: [1, 2\nc: 3\n", "dir/t.yaml")
    assert exc.value.problems[0].startswith("dir/t.yaml:3: invalid YAML: ")


def node_reader_problems(text: str, name: str) -> list[str]:
    with pytest.raises(TemplateError) as exc:
        node_reader(text, name)
    return exc.value.problems


def test_libyaml_refusals_are_read_by_pyyaml_as_heat_does():
    doc = parse_yaml("v: {get_attr:[a, b]}\n", "t.yaml")
    assert doc == {"v": {"get_attr": ["a", "b"]}} and doc.lines == {"v": 1}


@pytest.mark.parametrize("limits, text, message", [
    ({"data_depth": 3}, "a: {b: {c: {d: 1}}}\n", "data nests more than 3 levels deep"),
    ({"yaml_alias_nodes": 10}, "a: &a [1, 2, 3, 4, 5]\nb: [*a, *a]\n", "nodes built through aliases"),
])
def test_limits_are_the_node_readers(limits, text, message):
    with override(**limits):
        problems = outcome(parse_yaml, text)[1]
        assert problems == node_reader_problems(text, "t.yaml") and message in problems[0]


def test_tripleo_templates_read_alike():
    if not os.path.isdir(THT):
        pytest.skip("the THT corpus is not here")
    n = 0
    for d, _, names in os.walk(THT):
        for name in sorted(names):
            if name.endswith(".yaml") and n < 400:
                with open(os.path.join(d, name), encoding="utf-8") as fh:
                    text = fh.read()
                assert outcome(parse_yaml, text)[0] == outcome(node_reader, text)[0]
                if outcome(parse_yaml, text)[0] == "ok":
                    assert same(parse_yaml(text, "t.yaml"), node_reader(text)), name
                n += 1
    assert n > 100


def test_registry_candidates_in_name_order():
    reg = Registry({"A::*": "B::*", "A::B": "C::D", "A::B*": "A::B", "Z": "Y", "A::*x": "E"})
    assert [c[0] for c in reg._candidates("A::B", None)] == ["A::*", "A::B"]  # A::B* maps to itself: skipped
    assert [c[0] for c in reg._candidates("A::Bx", None)] == ["A::*", "A::B*"]
    assert reg._candidates("Q", None) == []
