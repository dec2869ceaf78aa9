"""Template resources (nested stacks), ResourceGroup members, dependencies, bundles."""

from __future__ import annotations

import pytest

from tests.unit.template_support import bundle, outputs, problems, run
from undercloud.orchestration.template import (
    Bundle,
    PlaceholderResolver,
    TemplateError,
    Unknown,
    load,
    render,
)
from undercloud.orchestration.template.preview import preview

V = "heat_template_version: 2021-04-16\n"
CHILD = V + """\
parameters:
  size: {type: number, default: 1}
  name: {type: string}
  tags: {type: comma_delimited_list, default: []}
resources:
  r: {type: OS::Heat::Value, properties: {value: {list_join: ['-', [{get_param: name}], {get_param: tags}]}}}
outputs:
  joined: {value: {get_attr: [r, value]}}
  size: {value: {get_param: size}}
"""


def test_properties_are_parameters_and_outputs_are_attributes(tmp_path):
    out = run(tmp_path, V + """\
resources:
  c:
    type: lib/child.yaml
    properties: {name: web, tags: [a, b], size: 3}
outputs:
  joined: {value: {get_attr: [c, joined]}}
  size: {value: {get_attr: [c, size]}}
""", files={"lib/child.yaml": CHILD})
    assert out == {"joined": "web-a-b", "size": 3}


def test_unknown_and_missing_properties_point_at_the_parent(tmp_path):
    msgs = problems(tmp_path, V + """\
resources:
  c:
    type: child.yaml
    properties:
      colour: red
""", files={"child.yaml": CHILD})
    assert msgs[0].endswith(":6: resources.c.properties.colour: Unknown Property colour")
    assert msgs[1].endswith(":5: resources.c.properties: Property name not assigned")


def test_bad_property_value_for_the_child_parameter(tmp_path):
    msgs = problems(tmp_path, V + "resources:\n  c: {type: child.yaml, properties: {name: x, size: big}}\n",
                    files={"child.yaml": CHILD})
    assert msgs == [f"{tmp_path}/t.yaml:3: resources.c.properties.size: Parameter 'size' is invalid: "
                    "could not convert string to float: 'big'"]


def test_problems_inside_the_child_name_the_child_file(tmp_path):
    msgs = problems(tmp_path, V + "resources:\n  c: {type: child.yaml}\n",
                    files={"child.yaml": V + "resources:\n  x: {type: OS::Cinder::Volume}\n"})
    assert msgs == [f"{tmp_path}/child.yaml:3: resources.x.type: OS::Cinder::Volume is not a supported resource type"]


def test_nested_with_runtime_values(tmp_path):
    t = load(bundle(tmp_path, V + """\
resources:
  a: {type: OS::Heat::Value, properties: {value: x}}
  c: {type: child.yaml, properties: {name: {get_attr: [a, value]}}}
""", files={"child.yaml": CHILD}))
    assert t.dependencies() == {"a": set(), "c": {"a"}}
    props = t.resolve(t.resources["c"].properties, PlaceholderResolver())
    assert isinstance(props["name"], Unknown) and render(props) == {"name": {"get_attr": ["a", "value"]}}
    child = t.nested("c", {"name": "from-a"})
    assert child.parameters["name"].value == "from-a"
    assert child.stack_name == "stack-c"


def test_child_from_dict_for_group_members(tmp_path):
    t = load(bundle(tmp_path, V + """\
resources:
  g: {type: OS::Heat::ResourceGroup, properties: {resource_def: {type: child.yaml, properties: {name: x}}}}
""", files={"child.yaml": CHILD}))
    members = t.child_from_dict({"resources": {
        "0": {"type": "child.yaml", "properties": {"name": "m0"}},
        "1": {"type": "OS::Heat::Value", "properties": {"value": 1}},
    }}, {}, "group")
    assert members.resources["0"].template_file.endswith("/child.yaml")
    assert members.nested("0", {"name": "m0"}).parameters["name"].value == "m0"


def test_group_members_of_an_unsupported_type_are_refused(tmp_path):
    msgs = problems(tmp_path, V + """\
resources:
  g:
    type: OS::Heat::ResourceGroup
    properties:
      count: 2
      resource_def: {type: OS::Cinder::Volume}
""")
    assert msgs[0].endswith(":7: resources.g.properties.resource_def.type: OS::Cinder::Volume is not a supported "
                            "resource type")


def test_preview_lists_the_whole_tree(tmp_path):
    t = load(bundle(tmp_path, V + """\
parameters:
  n: {type: number, default: 2}
resources:
  c: {type: child.yaml, properties: {name: top}}
  g:
    type: OS::Heat::ResourceGroup
    properties:
      count: {get_param: n}
      resource_def:
        type: child.yaml
        properties: {name: 'member-%index%'}
""", files={"child.yaml": CHILD}))
    rows = {r["name"]: r for r in preview(t)}
    assert sorted(rows) == ["c", "c.r", "g", "g.0", "g.0.r", "g.1", "g.1.r"]
    assert rows["g.1.r"]["properties"] == {"value": "member-1"}
    assert rows["c.r"] == {"name": "c.r", "type": "OS::Heat::Value", "properties": {"value": "top"}}
    assert rows["g"]["properties"]["count"] == 2


def test_bundle_travels_as_json(tmp_path):
    b = bundle(tmp_path, V + """\
resources:
  c: {type: lib/child.yaml, properties: {name: x}}
  f: {type: OS::Heat::Value, properties: {value: {get_file: lib/data.txt}}}
""", files={"lib/child.yaml": CHILD, "lib/data.txt": "DATA"})
    again = Bundle.from_json(b.to_json())
    assert sorted(k.rsplit("/", 2)[-1] for k in again.files) == ["child.yaml", "data.txt", "t.yaml"]
    out = outputs(load(again))
    assert out == {}
    t = load(again)
    assert t.resolve(t.resources["f"].properties, PlaceholderResolver()) == {"value": "DATA"}


def test_bundle_from_json_refuses_garbage():
    import pytest

    from undercloud.orchestration.template import TemplateError

    with pytest.raises(TemplateError):
        Bundle.from_json({"template": "t", "files": {"t": 1}})
    with pytest.raises(TemplateError):
        Bundle.from_json({"files": {}})


MID = V + """\
parameters:
  size: {type: string}
resources:
  leaf: {type: leaf.yaml, properties: {size: {get_param: size}}}
"""
LEAF = V + "parameters:\n  size: {type: number}\nresources:\n  r: {type: OS::Heat::Value, properties: {value: 1}}\n"


def test_a_nested_stack_built_as_the_engine_runs_checks_its_children_with_what_it_knows_then(tmp_path):
    """Validated at load, `size` is not known yet; the nested stack the engine builds later
    knows it, and checks its own template resources with it (as Heat's does), whatever was
    validated before with other values."""
    tmpl = load(bundle(tmp_path, V + """\
resources:
  v: {type: OS::Heat::Value, properties: {value: big}}
  mid: {type: mid.yaml, properties: {size: {get_attr: [v, value]}}}
""", files={"mid.yaml": MID, "leaf.yaml": LEAF}), {})
    assert tmpl.nested("mid", {"size": "3"}).resources["leaf"].template_file
    with pytest.raises(TemplateError) as info:
        tmpl.nested("mid", {"size": "big"})
    assert info.value.problems == [f"{tmp_path}/mid.yaml:5: resources.leaf.properties.size: Parameter 'size' "
                                   "is invalid: could not convert string to float: 'big'"]


def test_a_tree_validated_at_load_is_not_validated_again_level_by_level(tmp_path, monkeypatch):
    from undercloud.orchestration.template.stack import StackTemplate

    built: list[tuple[str, bool]] = []
    real = StackTemplate.child_from_file

    def counting(self, key, *args):
        built.append((key.rsplit("/", 1)[-1], args[-1]))  # (file, validating)
        return real(self, key, *args)

    monkeypatch.setattr(StackTemplate, "child_from_file", counting)
    tmpl = load(bundle(tmp_path, V + "resources:\n  mid: {type: mid.yaml, properties: {size: '3'}}\n",
                       files={"mid.yaml": MID, "leaf.yaml": LEAF}), {})
    assert built == [("mid.yaml", True), ("leaf.yaml", True)]
    mid = tmpl.nested("mid", {"size": "3"})  # as the engine: the leaf was validated with these values
    mid.nested("leaf", {"size": "3"})
    assert built[2:] == [("mid.yaml", False), ("leaf.yaml", False)]


PATH_CHILD = """\
heat_template_version: 2018-08-31
parameters:
  data: {type: json}
conditions:
  has_extra: {not: {equals: [{get_param: [data, a, extra]}, '']}}
resources:
  c:
    type: OS::Heat::Value
    properties:
      value: {list_concat: [{get_param: [data, a, tasks]}, [1]]}
  x:
    type: OS::Mistral::Workflow
    condition: has_extra
    properties: {type: direct, tasks: {get_param: [data, a, extra]}}
outputs:
  out: {value: {get_attr: [c, value]}}
  extra: {value: {if: [has_extra, 'yes', 'no']}}
"""


def test_get_param_path_through_a_value_known_only_at_runtime(tmp_path):
    """A json parameter whose value holds a parent's get_attr: a get_param path through that
    part is not known at validation (not "", which list_concat refuses), and a condition on
    it takes it as null (the path gives "": false, so the disabled resource's type is not
    checked). Seen in TripleO queens' common/post.yaml (role_data of map_merges of get_attrs).
    Heat (oracle): CREATE_COMPLETE, outputs {"out": [2, 1], "extra": "no"}."""
    template = """\
heat_template_version: 2018-08-31
resources:
  v:
    type: OS::Heat::Value
    properties: {type: json, value: {tasks: [2]}}
  child:
    type: child.yaml
    properties:
      data: {a: {get_attr: [v, value]}}
outputs:
  out: {value: {get_attr: [child, out]}}
  extra: {value: {get_attr: [child, extra]}}
"""
    tmpl = load(bundle(tmp_path, template, files={"child.yaml": PATH_CHILD}))
    assert [r["name"] for r in preview(tmpl)] == ["v", "child", "child.c"]
    assert run(tmp_path, template, files={"child.yaml": PATH_CHILD}) == {"out": [2, 1], "extra": "no"}


SHARED_CHILD = """\
heat_template_version: 2021-04-16
parameters:
  name: {type: string}
  flag: {type: string, default: 'false'}
  target: {type: string, default: a}
conditions:
  enabled: {equals: [{get_param: flag}, 'true']}
resources:
  a: {type: OS::Heat::Value, properties: {value: 1}}
  b: {type: OS::Heat::Value, properties: {value: 2}}
  r: {type: OS::Heat::Value, properties: {value: {list_join: ['-', [{get_param: name}, x]]}}}
  chosen: {type: OS::Heat::Value, properties: {value: {if: [enabled, chosen-true, chosen-false]}}}
  named: {type: OS::Heat::Value, properties: {value: {get_resource: {get_param: target}}}}
"""


def _shared_parent(tmp_path):
    b = bundle(tmp_path, V + """\
resources:
  v: {type: OS::Heat::Value, properties: {value: x}}
  c:
    type: child.yaml
    properties: {name: {get_attr: [v, value]}, flag: {get_attr: [v, value]}, target: {get_attr: [v, value]}}
""", files={"child.yaml": SHARED_CHILD})
    return b, load(b, {})


def test_the_engine_build_of_a_nested_stack_shares_the_trees_parsed_at_validation(tmp_path):
    """A file's sections are parsed once per bundle: the nested stack the engine builds uses
    the trees its validation parsed, evaluated with the engine's values."""
    b, tmpl = _shared_parent(tmp_path)
    parsed_at_validation = list(b.trees.values())
    child = tmpl.nested("c", {"name": "web", "flag": "false", "target": "a"})
    tree = child._tree(child.resources["r"].properties)
    assert any(tree is t for t in parsed_at_validation)
    assert child.resolve(child.resources["r"].properties, PlaceholderResolver()) == {"value": "web-x"}


def test_a_section_whose_parse_reads_parameter_values_is_parsed_again_for_each_stack(tmp_path):
    """An `if` is chosen while parsing and a computed get_resource names its dependency then:
    at validation `flag` and `target` were not known; the engine's build knows them."""
    b, tmpl = _shared_parent(tmp_path)
    child = tmpl.nested("c", {"name": "web", "flag": "true", "target": "b"})
    assert child.resolve(child.resources["chosen"].properties, PlaceholderResolver()) == {"value": "chosen-true"}
    assert child.dependencies()["named"] == {"b"}
    other = tmpl.nested("c", {"name": "web", "flag": "false", "target": "a"})
    assert other.resolve(other.resources["chosen"].properties, PlaceholderResolver()) == {"value": "chosen-false"}
    assert other.dependencies()["named"] == {"a"}


def test_ref_in_a_shared_tree_reads_the_evaluating_stacks_parameters(tmp_path):
    b = bundle(tmp_path, V + """\
resources:
  v: {type: OS::Heat::Value, properties: {value: x}}
  c: {type: old.yaml, properties: {size: {get_attr: [v, value]}}}
""", files={"old.yaml": """\
heat_template_version: 2013-05-23
parameters:
  size: {type: string}
resources:
  r: {type: OS::Heat::Value, properties: {value: {Ref: size}}}
  s: {type: OS::Heat::Value, properties: {value: {Ref: r}}}
"""})
    tmpl = load(b, {})
    child = tmpl.nested("c", {"size": "7"})
    assert child.resolve(child.resources["r"].properties, PlaceholderResolver()) == {"value": "7"}
    assert child.dependencies() == {"r": set(), "s": {"r"}}
