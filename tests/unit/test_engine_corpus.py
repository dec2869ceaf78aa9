"""The OS::Heat-only templates of the heat-templates corpus create, update and delete.
Expected outputs are what real Heat printed for them (tools/heat_oracle.py)."""

from __future__ import annotations

import pytest

from tests.conftest import CORPUS
from tests.unit.test_engine_ops import Eng

HOT = CORPUS / "hot"
pytestmark = pytest.mark.skipif(not HOT.is_dir(), reason=f"corpus not found at {HOT}")


@pytest.fixture
def eng(tmp_path):
    return Eng(tmp_path)


def bundle(path):
    from undercloud.orchestration.template import Bundle

    return Bundle.from_paths(str(path)).to_json()


def cycle(eng, path, params, update_params):
    b = bundle(path)
    s = eng.create("corpus", b, params)
    assert s["stack_status"] == "CREATE_COMPLETE", s["stack_status_reason"]
    created = eng.outputs("corpus")
    s = eng.update("corpus", b, update_params)
    assert s["stack_status"] == "UPDATE_COMPLETE", s["stack_status_reason"]
    updated = eng.outputs("corpus")
    resources = eng.res("corpus", 5)
    eng.svc.delete("corpus", wait=True)
    assert eng.svc.list() == []
    return created, updated, resources


def test_condition(eng):
    created, updated, res = cycle(eng, HOT / "condition.yaml", {}, {"env_type": "prod", "zone": "xian"})
    # Heat (oracle), defaults: env_type=test, zone=beijing; the output whose condition is
    # false (res_value) is listed as null.
    assert created == {"beijing_prod_res": "no_prod_res", "prod_resource": "no_prod_res", "res_value": None,
                       "test_res1_value": "just in test env", "test_res_value": "env_is_test"}
    # Heat (oracle) with env_type=prod zone=xian: prod_resource is prod_res's reference
    assert updated["res_value"] == "prod_res"
    assert updated["test_res_value"] == "env_is_prod"
    assert updated["test_res1_value"] == "no_test_res1"
    assert updated["beijing_prod_res"] == "no_prod_res"
    assert updated["prod_resource"].startswith("corpus-prod_res-")
    # not_shannxi_res and test_res1 went away with their conditions; shannxi_res came
    assert sorted(res) == ["prod_res", "shannxi_res", "test_res"]


def test_resource_group(eng):
    created, updated, res = cycle(eng, HOT / "resource_group" / "resource_group.yaml", {}, {})
    assert sorted(res) == ["random_group", "random_group.0", "random_group.1"]
    assert [len(v) for v in created["all_values"]] == [32, 32]
    assert created["resource1_id"] == created["resource1_value"] == created["all_values"][0]
    assert created["resource2_id"] == created["resource2_value"] == created["all_values"][1]
    assert updated == created  # a no-op update keeps the random strings


def test_resource_group_index_lookup(eng):
    path = HOT / "resource_group" / "resource_group_index_lookup.yaml"
    created, updated, res = cycle(eng, path, {}, {"random_lengths": "7,8,9"})
    assert [len(v) for v in created["all_values"]] == [4, 5, 6]  # Heat (oracle): lengths 4, 5, 6
    assert [len(v) for v in updated["all_values"]] == [7, 8, 9]
    assert sorted(res) == ["random_group", "random_group.0", "random_group.0.random", "random_group.1",
                           "random_group.1.random", "random_group.2", "random_group.2.random"]


def test_server_with_volumes_is_refused_before_anything_is_made(eng):
    from undercloud.orchestration.template import TemplateError

    with pytest.raises(TemplateError) as e:
        eng.svc.create("corpus", bundle(HOT / "resource_group" / "server_with_volumes.yaml"), {})
    assert "is not a supported resource type" in str(e.value)
    assert eng.svc.list() == []
