"""Environments: merging several -e files as Heat's server does, the resource registry, and
what reaches nested stacks. Expected values come from the Heat oracle."""

from __future__ import annotations

from tests.unit.template_support import bundle, outputs, problems, run
from undercloud.orchestration.template import load

TOP = """\
heat_template_version: 2021-04-16
parameters:
  s: {type: string, default: d}
  j: {type: json, default: {}}
  l: {type: comma_delimited_list, default: []}
  n: {type: number, default: 0}
resources:
  c: {type: child.yaml}
outputs:
  s: {value: {get_param: s}}
  j: {value: {get_param: j}}
  l: {value: {get_param: l}}
  n: {value: {get_param: n}}
  c: {value: {get_attr: [c, o]}}
"""
CHILD = """\
heat_template_version: 2021-04-16
parameters:
  s: {type: string, default: childdefault}
  cp: {type: string, default: cpdefault}
resources: {}
outputs:
  o: {value: [{get_param: s}, {get_param: cp}]}
"""
STRATEGIES = """\
parameter_merge_strategies:
  j: deep_merge
  l: merge
  s: merge
"""
E1 = STRATEGIES + """\
parameters:
  s: from-e1
  j: {a: {x: 1}, l: [1], t: ab}
  l: [a]
  n: 1
parameter_defaults:
  cp: cp-e1
"""
E2 = STRATEGIES + """\
parameters:
  s: -e2
  j: {a: {y: 2}, l: [2], t: cd}
  l: [b]
  n: 2
parameter_defaults:
  cp: cp-e2
  s: sdef
"""


def test_merge_strategies_and_what_reaches_the_nested_stack(tmp_path):
    out = run(tmp_path, TOP, envs=["e1.yaml", "e2.yaml"], files={"child.yaml": CHILD, "e1.yaml": E1, "e2.yaml": E2})
    assert out == {
        "s": "from-e1-e2",                                        # merge: strings concatenate
        "j": {"a": {"x": 1, "y": 2}, "l": [1, 2], "t": "abcd"},   # deep_merge
        "l": ["a", "b"],                                          # merge: lists extend
        "n": 2,                                                   # overwrite (default)
        # `parameters` reach only the top stack; parameter_defaults reach every stack
        "c": ["sdef", "cp-e2"],
    }


def test_later_files_overwrite_by_default(tmp_path):
    files = {"child.yaml": CHILD, "a.yaml": "parameters: {s: a, n: 1}\n", "b.yaml": "parameters: {s: b}\n"}
    out = run(tmp_path, TOP, envs=["a.yaml", "b.yaml"], files=files)
    assert (out["s"], out["n"]) == ("b", 1)


def test_environment_parameters_win_over_explicit_ones(tmp_path):
    # Heat's server merges the -e files over the parameters given with the request
    files = {"child.yaml": CHILD, "a.yaml": "parameters: {s: from-env}\n"}
    out = run(tmp_path, TOP, {"s": "explicit", "n": "5"}, envs=["a.yaml"], files=files)
    assert (out["s"], out["n"]) == ("from-env", 5)


def test_conflicting_merge_strategies(tmp_path):
    files = {"child.yaml": CHILD, "a.yaml": "parameters: {s: a}\n",
             "b.yaml": "parameter_merge_strategies: {s: merge}\nparameters: {s: b}\n"}
    msgs = problems(tmp_path, TOP, envs=["a.yaml", "b.yaml"], files=files)
    assert msgs[0].endswith("b.yaml:1: parameter_merge_strategies: Conflicting merge strategy 'merge' for "
                            "parameter 's' (an earlier file used 'overwrite'; every file must use the same "
                            "strategy for it).")


def test_parameters_for_nested_templates_only_are_refused(tmp_path):
    files = {"child.yaml": CHILD, "a.yaml": "parameters:\n  cp: x\n"}
    msgs = problems(tmp_path, TOP, envs=["a.yaml"], files=files)
    assert msgs[0].endswith("a.yaml:2: parameters.cp: The Parameter (cp) was not defined in template.")


REG_TOP = """\
heat_template_version: 2021-04-16
resources:
  a: {type: My::A}
  b: {type: My::A}
  g: {type: Glob::Thing, properties: {value: gv}}
  h: {type: Glob::Value, properties: {value: hv}}
  n: {type: My::Nothing}
outputs:
  a: {value: {get_attr: [a, o]}}
  g: {value: {get_attr: [g, value]}}
  h: {value: {get_attr: [h, value]}}
"""
REG_A = """\
heat_template_version: 2021-04-16
resources:
  inner: {type: OS::Heat::Value, properties: {value: x}}
outputs:
  o: {value: [a-template, {get_attr: [inner, value]}]}
"""
REG_ENV = """\
resource_registry:
  My::A: nested/a.yaml
  Glob::*: OS::Heat::*
  Glob::Thing: OS::Heat::Value
  My::Nothing: OS::Heat::None
  resources:
    b:
      My::A: OS::Heat::None
"""


def test_resource_registry(tmp_path):
    files = {"nested/a.yaml": REG_A, "env.yaml": REG_ENV}
    t = load(bundle(tmp_path, REG_TOP, ["env.yaml"], files))
    types = {n: (rd.type, rd.template_file and rd.template_file.rsplit("/", 2)[-2:]) for n, rd in t.resources.items()}
    assert types == {
        "a": ("My::A", ["nested", "a.yaml"]),      # type -> file (relative to the env file)
        "b": ("OS::Heat::None", None),             # per-resource override
        "g": ("OS::Heat::Value", None),            # an exact entry wins over a glob
        "h": ("OS::Heat::Value", None),            # glob: Glob::* -> OS::Heat::*
        "n": ("OS::Heat::None", None),
    }
    assert outputs(t) == {"a": ["a-template", "x"], "g": "gv", "h": "hv"}


def test_a_template_resource_does_not_map_its_own_type_again(tmp_path):
    # Inside nested/a.yaml the My::A -> nested/a.yaml entry is gone (Heat's get_child_environment)
    files = {"nested/a.yaml": "heat_template_version: 2021-04-16\nresources:\n  inner: {type: My::A}\n",
             "env.yaml": "resource_registry:\n  My::A: nested/a.yaml\n"}
    msgs = problems(tmp_path, "heat_template_version: 2021-04-16\nresources:\n  a: {type: My::A}\n",
                    envs=["env.yaml"], files=files)
    assert msgs[0].endswith("nested/a.yaml:3: resources.inner.type: My::A is not a supported resource type")


def test_wrapping_a_type_with_a_template_of_the_same_type(tmp_path):
    files = {"wrap.yaml": """\
heat_template_version: 2021-04-16
resources:
  real: {type: OS::Heat::RandomString}
outputs:
  o: {value: wrapped}
""", "env.yaml": "resource_registry:\n  OS::Heat::RandomString: wrap.yaml\n"}
    t = load(bundle(tmp_path, "heat_template_version: 2021-04-16\nresources:\n  r: {type: OS::Heat::RandomString}\n",
                    ["env.yaml"], files))
    child = t.nested("r", {})
    assert t.resources["r"].template_file.endswith("wrap.yaml")
    assert child.resources["real"].type == "OS::Heat::RandomString" and not child.resources["real"].template_file


def test_null_removes_an_earlier_mapping(tmp_path):
    files = {"a.yaml": "resource_registry:\n  My::T: OS::Heat::None\n  My::U: OS::Heat::None\n  Glob::A: OS::Heat::None\n",
             "b.yaml": "resource_registry:\n  My::T: null\n  Glob::*: null\n  OS::Heat::RandomString: null\n"}
    tmpl = ("heat_template_version: 2021-04-16\nresources:\n  t: {type: My::T}\n  u: {type: My::U}\n"
            "  g: {type: Glob::A}\n  r: {type: OS::Heat::RandomString}\n")
    msgs = problems(tmp_path, tmpl, envs=["a.yaml", "b.yaml"], files=files)
    assert [m.split(": ", 2)[1:] for m in msgs] == [
        ["resources.t.type", "My::T is not a supported resource type"],
        ["resources.g.type", "Glob::A is not a supported resource type"],
    ]  # My::U keeps its mapping; a built-in type stays built in


def test_candidates_are_tried_in_heats_order(tmp_path):
    # Heat (oracle) tries the registry entries sorted by name: "My::Foo::*" sorts before
    # "My::Foo::Bar", so the wildcard wins when it leads to a known type ...
    files = {"e.yaml": "resource_registry:\n  My::Foo::*: OS::Heat::RandomString\n  My::Foo::Bar: OS::Heat::Value\n"}
    t = load(bundle(tmp_path, "heat_template_version: 2021-04-16\nresources:\n  a: {type: My::Foo::Bar}\n",
                    ["e.yaml"], files))
    assert t.resources["a"].type == "OS::Heat::RandomString"
    # ... and the next entry is tried when it does not (Glob::* -> OS::Heat::* has no OS::Heat::Thing)
    files = {"e.yaml": "resource_registry:\n  Glob::*: OS::Heat::*\n  Glob::Thing: OS::Heat::Value\n"}
    t = load(bundle(tmp_path, "heat_template_version: 2021-04-16\nresources:\n  a: {type: Glob::Thing, properties: {value: 1}}\n",
                    ["e.yaml"], files))
    assert t.resources["a"].type == "OS::Heat::Value"


def test_registry_loop(tmp_path):
    files = {"a.yaml": "resource_registry:\n  X::A: X::B\n  X::B: X::A\n"}
    msgs = problems(tmp_path, "heat_template_version: 2021-04-16\nresources:\n  r: {type: X::A}\n",
                    envs=["a.yaml"], files=files)
    assert "resource_registry mappings loop: X::A -> X::B -> X::A" in msgs[0]


def test_per_resource_overrides_reach_into_nested_stacks(tmp_path):
    files = {
        "child.yaml": "heat_template_version: 2021-04-16\nresources:\n  inner: {type: OS::Heat::RandomString}\n",
        "env.yaml": """\
resource_registry:
  resources:
    c:
      inner:
        OS::Heat::RandomString: OS::Heat::None
""",
    }
    t = load(bundle(tmp_path, "heat_template_version: 2021-04-16\nresources:\n  c: {type: child.yaml}\n  inner: {type: OS::Heat::RandomString}\n",
                    ["env.yaml"], files))
    assert t.resources["inner"].type == "OS::Heat::RandomString"
    assert t.nested("c", {}).resources["inner"].type == "OS::Heat::None"


def test_bad_environment_files(tmp_path):
    base = "heat_template_version: 2021-04-16\n"
    cases = {
        "wrong.yaml": ("resource_registy:\n  A: B\n", ':1: resource_registy: environment has wrong section "resource_registy"'),
        "empty.yaml": ("parameters:\n", ':1: parameters: environment has empty section "parameters"'),
        "list.yaml": ("- a\n", "The environment is not a valid YAML mapping data type."),
        "strategy.yaml": ("parameter_merge_strategies: {s: mix}\n", 'Invalid merge strategy "mix" for "s"'),
        "target.yaml": ("resource_registry:\n  A: [x]\n", "resource_registry.A: resource_registry: A must map to a type or a template file, not list"),
    }
    for name, (text, message) in cases.items():
        msgs = problems(tmp_path, base, envs=[name], files={name: text})
        assert message in msgs[0], (name, msgs)
        assert msgs[0].split(":", 1)[0].endswith(name)


def test_missing_registry_file(tmp_path):
    files = {"env.yaml": "resource_registry:\n  My::A: nested/nope.yaml\n"}
    from undercloud.orchestration.template import TemplateError

    try:
        bundle(tmp_path, "heat_template_version: 2021-04-16\n", ["env.yaml"], files)
    except TemplateError as exc:
        assert exc.problems[0].endswith("env.yaml:2: resource_registry.My::A: " + str(tmp_path / "nested/nope.yaml")
                                        + ": file not found") or "nested/nope.yaml: file not found" in exc.problems[0]
    else:
        raise AssertionError("a missing registry file was accepted")


def test_per_resource_overrides_name_resources_exactly(tmp_path):
    # Heat (oracle): "web*" under `resources:` does not apply to web1
    files = {"env.yaml": 'resource_registry:\n  resources:\n    "web*": {OS::Heat::RandomString: OS::Heat::None}\n'
                         "    db: {OS::Heat::RandomString: OS::Heat::None}\n"}
    t = load(bundle(tmp_path, "heat_template_version: 2021-04-16\nresources:\n  web1: {type: OS::Heat::RandomString}\n"
                    "  db: {type: OS::Heat::RandomString}\n", ["env.yaml"], files))
    assert {n: rd.type for n, rd in t.resources.items()} == {"web1": "OS::Heat::RandomString", "db": "OS::Heat::None"}
