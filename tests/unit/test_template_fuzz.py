"""Property tests of the template layer (hypothesis): whatever text or template comes in,
parse -> validate -> preview either works or raises TemplateError (InvalidInput) in lines
that never hold a hidden parameter's value, and preview never shows one either.

Bounded: FUZZ_EXAMPLES examples per property (UNDERCLOUD_FUZZ_EXAMPLES to change), no
deadline per example (the machine may be loaded), no example database written. The module
prints how many examples each property tried; `--hypothesis-show-statistics` gives details.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import string

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed (the test extra)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from undercloud.errors import InvalidInput  # noqa: E402
from undercloud.orchestration.limits import override  # noqa: E402
from undercloud.orchestration.template import Bundle, PlaceholderResolver, TemplateError, load  # noqa: E402
from undercloud.orchestration.template.preview import preview  # noqa: E402
from undercloud.orchestration.template.source import parse_yaml  # noqa: E402
from undercloud.orchestration.template.versions import ALL_VERSIONS, all_function_names  # noqa: E402

FUZZ_EXAMPLES = int(os.environ.get("UNDERCLOUD_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# small limits: a runaway example is refused fast, and the limits' own paths are fuzzed too
SMALL = {"value_chars": 20_000, "yaml_alias_nodes": 2_000, "group_count": 50, "resources": 300,
         "data_depth": 40, "file_bytes": 64 * 1024}

NAMES = ["a", "b", "c", "grp", "child"]
PARAMS = ["p_str", "p_num", "p_json", "p_list", "p_bool", "secret", "secret_json"]
TYPES = ["OS::Heat::Value", "OS::Heat::None", "OS::Heat::TestResource", "OS::Heat::RandomString",
         "OS::Heat::ResourceGroup", "child.yaml", "No::Such::Type", "OS::Heat::SoftwareConfig"]
FUNCTIONS = sorted(all_function_names())
# mostly versions with every function (so examples get past the version check), some older or wrong
VERSIONS = ["2021-04-16"] * 8 + ["2018-08-31"] * 3 + [v.name for v in ALL_VERSIONS] + ["wallaby", "2012-12-12", 2021]


@st.composite
def secrets(draw) -> str:
    """A distinctive hidden value (never a substring of anything else in a template)."""
    return "Sx" + draw(st.text(alphabet=string.ascii_letters + string.digits + "!@#%&*-_ \"'\\é",
                               min_size=8, max_size=24)) + "xZ"


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12), st.sampled_from(NAMES + PARAMS + ["%index%", "$x", "value", "output", "0", "1", ""]),
)


def calls(children):
    """{function: args} with args of many shapes, and the common correct shapes too."""
    fn = st.sampled_from(FUNCTIONS)
    shaped = st.one_of(
        st.builds(lambda p: {"get_param": p}, st.sampled_from(PARAMS)),
        st.builds(lambda p, k: {"get_param": [p, k]}, st.sampled_from(PARAMS), scalars),
        st.builds(lambda r: {"get_resource": r}, st.sampled_from(NAMES)),
        st.builds(lambda r, a: {"get_attr": [r, a]}, st.sampled_from(NAMES), st.sampled_from(["value", "output", "x"])),
        st.builds(lambda t, v: {"str_replace": {"template": t, "params": {"$x": v}}}, children, children),
        st.builds(lambda d, ls: {"list_join": [d, ls]}, st.sampled_from([",", "", "-"]), children),
        st.builds(lambda t, ls: {"repeat": {"template": t, "for_each": {"%v%": ls}}}, children, children),
        st.builds(lambda ls: {"list_concat": ls}, st.lists(children, max_size=3)),
        st.builds(lambda ms: {"map_merge": ms}, st.lists(children, max_size=3)),
        st.builds(lambda e, d: {"yaql": {"expression": e, "data": d}},
                  st.sampled_from(["$.data", "$.data.len()", "$.data.x", "$[", "1 + 1"]), children),
        st.builds(lambda c, a, b: {"if": [c, a, b]}, st.sampled_from(["on", "off", True, "nope"]), children, children),
    )
    return st.one_of(shaped, st.dictionaries(fn, children, min_size=1, max_size=1))


snippets = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=8) | st.sampled_from(["value", "type", "properties"]), children, max_size=4),
        calls(children),
    ),
    max_leaves=25,
)


@st.composite
def templates(draw) -> tuple[dict, dict, str]:
    """(bundle files, parameters given, the hidden value) of a random template tree."""
    secret = draw(secrets())
    broken = draw(st.integers(0, 7)) == 5  # now and then a parameter that is wrong in itself
    params = {
        "p_str": {"type": "string", "default": draw(st.text(alphabet="abxyz$%", max_size=6) | st.text(max_size=6))},
        "p_num": {"type": "number", "default": draw(st.integers(-5, 60))},
        "p_json": {"type": "json", "default": draw(snippets)},
        "p_list": {"type": "comma_delimited_list", "default": draw(st.text(alphabet="ab,%$x", max_size=12))},
        "p_bool": {"type": "boolean", "default": "maybe" if broken else draw(st.booleans())},
        "secret": {"type": "string", "hidden": True},
        "secret_json": {"type": "json", "hidden": True},
    }
    constraints = st.sampled_from([{"allowed_pattern": "[a-z]*"}, {"length": {"min": 1, "max": 4}},
                                   {"allowed_values": ["a", "b"]}, {"length": {"min": 1}}])
    for name in draw(st.lists(st.sampled_from(["p_str", "secret", "secret_json"]), max_size=2, unique=True)):
        c = draw(constraints)
        if (name == "p_str" or broken or c == {"length": {"min": 1}}) and (name != "secret_json" or "length" in c):
            params[name]["constraints"] = [c]
    resources = {}
    for name in draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True)):
        body = {"type": draw(st.sampled_from(TYPES))}
        if body["type"] == "OS::Heat::ResourceGroup":
            body["properties"] = {"count": draw(st.one_of(st.integers(-2, 60), snippets)),
                                  "resource_def": {"type": draw(st.sampled_from(TYPES)),
                                                   "properties": {"value": draw(snippets)}}}
        elif draw(st.booleans()):
            body["properties"] = draw(st.dictionaries(st.sampled_from(["value", "length", "p", "x"]), snippets,
                                                      max_size=3))
        if draw(st.booleans()):
            body["depends_on"] = draw(st.lists(st.sampled_from(NAMES), max_size=2))
        resources[name] = body
    doc = {"heat_template_version": draw(st.sampled_from(VERSIONS)), "parameters": params,
           "resources": resources,
           "outputs": {k: {"value": v} for k, v in draw(st.dictionaries(st.sampled_from(["o1", "o2"]), snippets,
                                                                        max_size=2)).items()}}
    if draw(st.booleans()) and str(doc["heat_template_version"]) >= "2016-10-14":
        doc["conditions"] = {"on": True, "off": False, "c": draw(snippets)}
    child = {"heat_template_version": "2021-04-16",
             "parameters": {"value": {"type": "string", "default": "v"}},
             "resources": {"r": {"type": "OS::Heat::Value", "properties": {"value": draw(snippets)}}},
             "outputs": {"value": {"value": draw(snippets)}}}
    shared = draw(snippets)
    if isinstance(shared, dict | list) and resources:  # the same object twice: YAML anchors and aliases
        for body in list(resources.values())[:2]:
            body.setdefault("metadata", {})["shared"] = shared
    files = {"t.yaml": yaml.safe_dump(doc, allow_unicode=True), "child.yaml": yaml.safe_dump(child)}
    given = {"secret": secret, "secret_json": {"password": secret, "list": [1, secret]}}
    if draw(st.booleans()):
        given["p_num"] = "x" if broken else draw(st.sampled_from(["12", "1e400", "-0", 3.5]))
    return files, given, secret


def assert_no_secret(text: str, secret: str) -> None:
    for form in (secret, json.dumps(secret)[1:-1], repr(secret)[1:-1]):
        assert form not in text, f"hidden value in: {text[:500]}"


def check(files: dict, given: dict, secret: str) -> None:
    """parse -> validate -> resolve -> preview; only TemplateError, never the secret."""
    try:
        tmpl = load(Bundle.from_json({"template": "t.yaml", "files": files}), given, partial=True)
        for rd in tmpl.resources.values():  # what the engine resolves (with unknown resources)
            tmpl.resolve(rd.properties, PlaceholderResolver())
        rows = preview(tmpl)
    except (TemplateError, InvalidInput) as exc:
        text = str(exc)
        for line in text.split("\n"):
            assert line and len(line) <= 2000, line
        assert_no_secret(text, secret)
        return
    assert_no_secret(json.dumps(rows, default=str), secret)


TRIED: collections.Counter = collections.Counter()


@pytest.fixture(scope="module", autouse=True)
def report_examples(request):
    """One line per property with the number of examples tried, after the module's tests."""
    yield
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        for what, n in TRIED.items():
            print(f"\n[fuzz] {what}: {n} examples tried", end="")
        print()


@FUZZ
@given(templates())
def test_random_templates_fail_only_as_template_errors_and_never_show_hidden_values(case):
    TRIED["structured templates"] += 1
    with override(**SMALL):
        check(*case)


FRAGMENTS = ["heat_template_version: 2021-04-16\n", "resources:\n", "  a: {type: OS::Heat::Value}\n",
             "&x ", "*x", "<<: *x\n", "{", "}", "[", "]", ": ", "- ", "!!binary ", "!!set ", "!!float ",
             "!!omap ", "!!python/object ", "? ", "'", '"', "\t", "\n", "  ", "%YAML 1.1\n", "---\n", "...\n",
             "get_param", "str_replace", "\\u0000", "\ud800", "é", "#", "|\n", ">\n", "@", "`"]


@FUZZ
@given(st.one_of(st.text(max_size=300), st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)))
def test_random_text_parses_or_fails_as_template_errors(text):
    TRIED["YAML text"] += 1
    with override(**SMALL):
        try:
            parse_yaml(text, "t.yaml")
        except TemplateError as exc:
            assert all(line.startswith("t.yaml") for line in str(exc).split("\n"))
        try:
            preview(load(Bundle.from_json({"template": "t.yaml", "files": {"t.yaml": text}}), {}, partial=True))
        except (TemplateError, InvalidInput):
            pass
