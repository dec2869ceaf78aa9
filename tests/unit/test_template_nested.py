"""Template resources (nested stacks), ResourceGroup members, dependencies, bundles."""

from __future__ import annotations

from tests.unit.template_support import bundle, outputs, problems, run
from undercloud.orchestration.template import Bundle, PlaceholderResolver, Unknown, load, render
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
