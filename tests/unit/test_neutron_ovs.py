"""Neutron ML2/OVS on Open vSwitch's userspace datapath (OpenStack 2025.1's networking):
what the templates render with environments/neutron-ovs.yaml, which mechanism a release
starts from, and uc-neutron-start's Open vSwitch steps (the tunnel endpoint, the node's
ports) loaded as a module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit import service_support
from tests.unit.service_support import ini, script_module
from undercloud.errors import InvalidInput
from undercloud.images import elements
from undercloud.images.catalog import DEFAULT_RELEASE
from undercloud.overcloud import plan as op
from undercloud.overcloud.roles import load_roles, roles_file_for

OVERCLOUD = Path(__file__).resolve().parents[2] / "undercloud" / "overcloud"
OVS_ENV = OVERCLOUD / "environments" / "neutron-ovs.yaml"
LB_ENV = OVERCLOUD / "environments" / "neutron-linuxbridge.yaml"
NODES = {"rabbitmq": ["10.0.0.9"], "neutron_ovs_agent": ["10.0.0.2", "10.0.0.7"]}
GIVEN = {"ServiceNodes": NODES, "EndpointMap": {"keystone": "http://10.0.0.250:5000/v3",
                                                "network": "http://10.0.0.250:9696"},
         "VirtualIP": "10.0.0.250", "NeutronPassword": "qp", "RabbitPassword": "rp"}


def render(name: str, extra: dict | None = None, env: Path = OVS_ENV):
    return service_support.render(name, {**GIVEN, **(extra or {})}, "localhost/undercloud/service-neutron:1", (env,))


def test_the_agent_pod_runs_open_vswitch_beside_the_agent_sharing_its_sockets_and_keeping_its_database():
    files, pod, rd = render("neutron-ovs-agent")
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    assert list(containers) == ["ovsdb-server", "ovs-vswitchd", "neutron-ovs-agent"]
    # each container its own start command, through uc-start and its own config file
    for name, command in (("ovsdb-server", "ovsdb-server"), ("ovs-vswitchd", "ovs-vswitchd"),
                          ("neutron-ovs-agent", "openvswitch-agent")):
        env = {e["name"]: e["value"] for e in containers[name].get("env", [])}
        config = env.get("UC_CONFIG", "/var/lib/undercloud/config/config.json").rsplit("/", 1)[1]
        assert json.loads(files[config])["command"] == ["/usr/local/bin/uc-neutron-start", command]
    mounts = {n: {m["name"]: m["mountPath"] for m in c["volumeMounts"]} for n, c in containers.items()}
    assert all(m["run"] == "/run/openvswitch" for m in mounts.values())  # sockets and pid files
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert "emptyDir" in volumes["run"]
    assert volumes["db"]["persistentVolumeClaim"]["claimName"] == "openvswitch-data"
    assert mounts["ovsdb-server"]["db"] == "/var/lib/openvswitch"
    assert "securityContext" not in containers["ovsdb-server"]
    assert containers["ovs-vswitchd"]["securityContext"] == {"privileged": True}
    assert rd["service_name"] == "neutron_ovs_agent" and rd["step"] == 5


def test_the_agent_uses_the_userspace_datapath_vxlan_l2pop_and_the_hybrid_firewall():
    files, _, _ = render("neutron-ovs-agent")
    agent = ini(files["openvswitch_agent.ini"])
    assert agent["ovs"]["datapath_type"] == "netdev"
    assert agent["ovs"]["ovsdb_connection"] == "tcp:127.0.0.1:6640"
    assert agent["agent"]["tunnel_types"] == "vxlan" and agent["agent"]["l2_population"] == "true"
    assert agent["securitygroup"]["firewall_driver"] == "iptables_hybrid"
    uc = json.loads(files["uc-neutron.json"])
    assert uc["node_addresses"] == NODES["neutron_ovs_agent"] and uc["tunnel_cidr"] == "172.30.0.0/16"
    assert uc["physical_interface_mappings"] == []
    mapped = json.loads(render("neutron-ovs-agent", {"NeutronPhysicalInterfaceMappings": ["datacentre:provider"]})[0]
                        ["uc-neutron.json"])
    assert mapped["physical_interface_mappings"] == ["datacentre:provider"]
    noop = ini(render("neutron-ovs-agent", {"NeutronFirewallDriver": "noop"})[0]["openvswitch_agent.ini"])
    assert noop["securitygroup"]["enable_security_group"] == "false"


@pytest.mark.parametrize("env,driver,veth", [(OVS_ENV, "openvswitch", "true"), (LB_ENV, "linuxbridge", "false")])
def test_the_dhcp_agent_plugs_by_veth_into_open_vswitch(env, driver, veth):
    files, _, _ = render("neutron-dhcp-agent", env=env)
    dhcp = ini(files["dhcp_agent.ini"])["DEFAULT"]
    assert (dhcp["interface_driver"], dhcp["ovs_use_veth"]) == (driver, veth)


def test_the_server_loads_the_openvswitch_mechanism_without_the_experimental_flag():
    files, _, _ = render("neutron-server", {"NeutronPassword": "qp", "NeutronDbPassword": "d", "NovaPassword": "n",
                                            "ServiceNodes": {**NODES, "mysql": ["10.0.0.9"], "memcached": ["10.0.0.9"],
                                                             "neutron_api": ["10.0.0.2"]}})
    assert ini(files["ml2_conf.ini"])["ml2"]["mechanism_drivers"] == "openvswitch,l2population"
    assert ini(files["neutron.conf"])["experimental"]["linuxbridge"] == "false"


# ---- which mechanism a deploy starts from ----------------------------------------------

def release_env(tmp_path: Path, release: str) -> Path:
    p = tmp_path / f"r-{release}.yaml"
    p.write_text(f"parameter_defaults:\n  OvercloudRelease: '{release}'\n")
    return p


def agents(envs: list[Path]) -> list[str]:
    lib = op.resolve(load_roles(roles_file_for(None, None)), envs)
    return [n for n in lib.service_names() if n in ("neutron_linuxbridge_agent", "neutron_ovs_agent")]


def test_a_release_starts_from_its_network_mechanism(tmp_path):
    zed, epoxy = release_env(tmp_path, "zed"), release_env(tmp_path, "2025.1")
    assert op.environments_for(None, [epoxy])[0] == OVS_ENV
    assert op.environments_for(None, [zed])[0] == LB_ENV
    assert agents(op.environments_for(None, [epoxy])) == ["neutron_ovs_agent"]
    assert agents(op.environments_for(None, [zed])) == ["neutron_linuxbridge_agent"]
    # no release given: the overcloud's own (kept in its deployed set), else the default
    assert op.environments_for(None, [], "2025.1")[0] == OVS_ENV
    assert op.environments_for("ha", [], "zed")[0] == LB_ENV
    assert op.environments_for(None, [])[0] == op.LIBRARY / op.RELEASE_ENVIRONMENTS[DEFAULT_RELEASE]
    # yours come after it and win: a role may still run the other agent if you say so
    assert op.environments_for(None, [epoxy], "zed")[1:] == [epoxy]
    with pytest.raises(InvalidInput, match="not a release"):
        op.environments_for(None, [release_env(tmp_path, "2023.1")])


# ---- uc-neutron-start: Open vSwitch --------------------------------------------------

@pytest.fixture
def start():
    return script_module(elements.SHIPPED / "neutron" / "static" / "usr" / "local" / "bin" / "uc-neutron-start")


@pytest.mark.parametrize("addr,prefix,cidr,endpoint", [
    ("10.89.3.17", 24, "172.30.0.0/16", "172.30.0.17/16"),
    ("10.89.3.17", 24, "172.31.9.0/24", "172.31.9.17/24"),
    ("192.168.7.200", 22, "172.30.0.0/16", "172.30.3.200/16"),
])
def test_the_tunnel_endpoint_is_the_nodes_host_part_in_the_tunnel_network(start, monkeypatch, addr, prefix, cidr,
                                                                          endpoint):
    monkeypatch.setattr(start, "tunnel_address", lambda conf: (addr, "this node's address among node_addresses"))
    monkeypatch.setattr(start, "interface_of", lambda a: ("eth0", prefix) if a == addr else (None, None))
    assert start.tunnel_endpoint({"tunnel_cidr": cidr}) == (endpoint, "eth0")


def test_a_node_network_larger_than_the_tunnel_network_is_one_line(start, monkeypatch, capsys):
    monkeypatch.setattr(start, "tunnel_address", lambda conf: ("10.89.3.17", "x"))
    monkeypatch.setattr(start, "interface_of", lambda a: ("eth0", 16))
    with pytest.raises(SystemExit) as exc:
        start.tunnel_endpoint({"tunnel_cidr": "172.30.9.0/24"})
    assert exc.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "uc-neutron-start: the node network 10.89.0.0/16 is larger than tunnel_cidr 172.30.9.0/24: "
        "give a larger NeutronTunnelCidr"]


def test_physical_bridges_fit_a_linux_interface_name(start):
    assert start.physical_bridge("datacentre") == "br-datacentre"
    assert len(start.physical_bridge("a-very-long-physnet-name")) == 15
