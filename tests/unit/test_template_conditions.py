"""Conditions: the section, `condition:` on resources and outputs, `if`, and the condition
functions. Expected values are what the Heat oracle printed for the same template."""

from __future__ import annotations

import pytest

from tests.unit.template_support import bundle, outputs
from undercloud.orchestration.template import load

T = """\
heat_template_version: 2021-04-16
parameters:
  env: {type: string, default: test}
  zone: {type: string, default: a}
conditions:
  is_prod: {equals: [{get_param: env}, prod]}
  is_test: {not: is_prod}
  prod_in_a: {and: [is_prod, {equals: [{get_param: zone}, a]}]}
  any: {or: [is_prod, prod_in_a, {equals: [{get_param: zone}, b]}]}
  zone_listed: {contains: [{get_param: zone}, [a, b]]}
  yq: {yaql: {expression: '$.data.z in list(a, c)', data: {z: {get_param: zone}}}}
resources:
  p: {type: OS::Heat::Value, properties: {value: prod}, condition: is_prod}
  t: {type: OS::Heat::Value, properties: {value: test}, condition: is_test}
  i: {type: OS::Heat::Value, properties: {value: inline}, condition: {equals: [{get_param: zone}, b]}}
  d: {type: OS::Heat::Value, properties: {value: {if: [is_prod, {get_attr: [p, value]}, {get_attr: [t, value]}]}}, depends_on: [p, t]}
outputs:
  d: {value: {get_attr: [d, value]}}
  flags: {value: [{if: [is_prod, 1, 0]}, {if: [prod_in_a, 1, 0]}, {if: [any, 1, 0]}, {if: [zone_listed, 1, 0]}, {if: [yq, 1, 0]}]}
  only_prod: {value: {get_attr: [p, value]}, condition: is_prod}
"""


@pytest.mark.parametrize("params, expected, enabled", [
    ({"env": "test"}, {"d": "test", "flags": [0, 0, 0, 1, 1], "only_prod": None}, ["d", "t"]),
    ({"env": "prod"}, {"d": "prod", "flags": [1, 1, 1, 1, 1], "only_prod": "prod"}, ["d", "p"]),
    ({"zone": "b"}, {"d": "test", "flags": [0, 0, 1, 1, 0], "only_prod": None}, ["d", "i", "t"]),
    ({"zone": "c"}, {"d": "test", "flags": [0, 0, 0, 0, 1], "only_prod": None}, ["d", "t"]),
])
def test_conditions(tmp_path, params, expected, enabled):
    t = load(bundle(tmp_path, T), params)
    assert sorted(t.resources) == enabled
    # depends_on a resource whose condition is false is dropped (Heat)
    assert t.dependencies()["d"] == ({"p"} if "p" in enabled else {"t"})
    # Heat lists an output whose condition is false as null
    assert outputs(t) == expected
