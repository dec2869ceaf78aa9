"""What resource plugins use of the undercloud, through one typed interface
(orchestration/services.py): an engine on its own has the store and its own lookups, and a
resource needing more fails in one line; the running service's Context has them all."""

from __future__ import annotations

import pytest

from tests.unit.test_engine_ops import Eng
from undercloud.api.context import Context
from undercloud.config import Home
from undercloud.orchestration.services import EngineOnly, PluginServices

CONFIG = """\
heat_template_version: wallaby
resources:
  config:
    type: OS::Heat::SoftwareConfig
    properties: {group: script, config: "echo hi"}
outputs:
  id: {value: {get_resource: config}}
"""

NEEDS = """\
heat_template_version: wallaby
parameters:
  config: {type: string}
resources:
  %s
"""


@pytest.fixture
def eng(tmp_path):
    return Eng(tmp_path)


def test_an_engine_on_its_own_finds_a_config_of_another_stack_by_id(eng):
    eng.create("configs", eng.bundle("c.yaml", CONFIG))
    config_id = eng.outputs("configs")["id"]
    found = eng.svc.services.stacks.software_config(config_id, ("OS::Heat::SoftwareConfig",))
    assert found["config"] == "echo hi" and found["group"] == "script"
    assert eng.svc.software_config(config_id, ("OS::Heat::StructuredConfig",)) is None  # not of that type
    assert eng.svc.software_config("no-such-id", ("OS::Heat::SoftwareConfig",)) is None


@pytest.mark.parametrize("resource, reason", [
    ("server: {type: OS::Nova::Server, properties: {image: x, flavor: y}}",
     "no servers service in this undercloud"),
    ("deployed: {type: OS::Heat::DeployedServer}", "no agent metadata service in this undercloud"),
    ("deployment: {type: OS::Heat::SoftwareDeployment, properties: {server: s1, config: {get_param: config}}}",
     "no agent metadata service in this undercloud"),
])
def test_a_resource_needing_a_service_the_engine_lacks_fails_in_one_line(eng, resource, reason):
    eng.create("configs", eng.bundle("c.yaml", CONFIG))
    params = {"config": eng.outputs("configs")["id"]}
    shown = eng.create("s", eng.bundle("s.yaml", NEEDS % resource), params)
    assert shown["stack_status"] == "CREATE_FAILED"
    assert reason in shown["stack_status_reason"] and "\n" not in shown["stack_status_reason"]
    # ... and deleting it needs none of them.
    eng.svc.delete("s", wait=True)
    assert [s["stack_name"] for s in eng.svc.list()] == ["configs"]


def test_the_store_is_there_without_the_rest(eng):
    shown = eng.create("n", eng.bundle("n.yaml", """\
        heat_template_version: wallaby
        resources:
          net: {type: OS::Neutron::Net, properties: {name: n1}}
          sub: {type: OS::Neutron::Subnet, properties: {network: {get_resource: net}, cidr: 10.9.0.0/24}}
        """))
    assert shown["stack_status"] == "CREATE_COMPLETE", shown["stack_status_reason"]
    assert isinstance(eng.svc.services, EngineOnly) and eng.svc.services.api_url.startswith("http://")


def test_the_services_context_has_every_member_of_the_interface(tmp_path):
    ctx = Context(Home(tmp_path / "home"))
    members = [m for m in vars(PluginServices) if not m.startswith("_")]
    assert sorted(members) == ["api_url", "home", "server_metadata", "servers", "stacks", "store"]
    for name in members:
        assert getattr(ctx, name) is not None, name
    assert ctx.stacks.services is ctx
