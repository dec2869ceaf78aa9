"""Neutron (ML2/linuxbridge + VXLAN): what the service templates render with the mechanism's
environment (configs, Pods, literal declarations), and the element's scripts
(uc-neutron-start, uc-neutron-agent-alive, the ebtables fallback) loaded as modules."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from tests.unit import service_support
from tests.unit.service_support import ini, script_module
from undercloud.errors import InvalidInput
from undercloud.images import elements
from undercloud.overcloud import library

STATIC = elements.SHIPPED / "neutron" / "static" / "usr" / "local"
OVERCLOUD = Path(__file__).resolve().parents[2] / "undercloud" / "overcloud"
SERVICES = OVERCLOUD / "services"
ENV = OVERCLOUD / "environments" / "neutron-linuxbridge.yaml"
TEMPLATES = ("neutron-server", "neutron-linuxbridge-agent", "neutron-dhcp-agent", "neutron-metadata-agent")
AGENTS = {"neutron-linuxbridge-agent": "neutron-linuxbridge-agent", "neutron-dhcp-agent": "neutron-dhcp-agent",
          "neutron-metadata-agent": "neutron-metadata-agent"}
NODES = {"mysql": ["10.0.0.9"], "rabbitmq": ["10.0.0.9", "10.0.0.8"], "memcached": ["10.0.0.2", "10.0.0.3"],
         "neutron_api": ["10.0.0.3", "10.0.0.2"], "neutron_linuxbridge_agent": ["10.0.0.2", "10.0.0.3", "10.0.0.7"],
         "neutron_dhcp": ["10.0.0.2"], "neutron_metadata": ["10.0.0.2"]}
ENDPOINTS = {"keystone": "http://10.0.0.250:5000/v3", "network": "http://10.0.0.250:9696"}
SECRETS = {"NeutronPassword": "qp", "NeutronDbPassword": "qdb", "NovaPassword": "np", "RabbitPassword": "rp",
           "MetadataSecret": "ms"}


def render(name: str, extra: dict | None = None, env: bool = True) -> tuple[dict, dict, dict]:
    """(config files, Pod, role_data declarations) of a template with test values and the environment."""
    given = {"ServiceNodes": NODES, "EndpointMap": ENDPOINTS, "VirtualIP": "10.0.0.250", **SECRETS, **(extra or {})}
    return service_support.render(name, given, "localhost/undercloud/service-neutron:1", (ENV,) if env else ())


def module(path: Path):
    return script_module(path)


# ---- templates ------------------------------------------------------------------------

@pytest.mark.parametrize("name", TEMPLATES)
def test_templates_declare_literally_what_they_use(name):
    files, pod, rd = render(name)
    svc = library.read_service(rd["service_type"], SERVICES / f"{name}.yaml")  # the plan's own checks
    params = yaml.safe_load((SERVICES / f"{name}.yaml").read_text())["parameters"]
    assert svc.step == (4 if name == "neutron-server" else 5) and svc.name in NODES
    assert set(svc.images.values()) == {"service-neutron"}
    # every hidden parameter the template reads is declared, so the plan generates it
    assert {p for p, spec in params.items() if spec.get("hidden")} == set(svc.secrets)
    config = json.loads(files["config.json"])
    assert {Path(f["source"]).name for f in config["config_files"]} <= set(files)
    assert config["command"][0] == "/usr/local/bin/uc-neutron-start"
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["/usr/local/bin/uc-start"] and pod["spec"]["hostNetwork"] is True


@pytest.mark.parametrize("env_name,agent", [("neutron-linuxbridge", "neutron-linuxbridge-agent"),
                                            ("neutron-ovs", "neutron-ovs-agent")])
def test_one_environment_gives_every_mechanism_parameter(env_name, agent):
    """The templates leave the mechanism's parameters without defaults; the environment
    alone must supply all of them (a missing one would fail the stack, not a test), and it
    enables its own L2 agent and disables the other."""
    env_file = OVERCLOUD / "environments" / f"{env_name}.yaml"
    env = yaml.safe_load(env_file.read_text())["parameter_defaults"]
    for name in ("neutron-server", agent, "neutron-dhcp-agent", "neutron-metadata-agent"):
        params = yaml.safe_load((SERVICES / f"{name}.yaml").read_text())["parameters"]
        needed = {p for p, spec in params.items() if "default" not in spec and not spec.get("hidden")
                  and not p.startswith("Container") and p not in library.COMMON_PARAMETERS}
        assert needed <= set(env), f"{name}: {needed - set(env)}"
    registry = yaml.safe_load(env_file.read_text())["resource_registry"]
    enabled = {t for t, target in registry.items() if target != "OS::Heat::None"}
    assert {t for t in registry if t not in enabled} == {"OS::TripleO::Services::NeutronLinuxbridgeAgent",
                                                         "OS::TripleO::Services::NeutronOvsAgent"} - enabled
    for stype in enabled:
        assert (env_file.parent / registry[stype]).resolve() == library.builtin_registry()[stype] == SERVICES / f"{agent}.yaml"


def test_server_config_ml2_linuxbridge_vxlan_and_its_neighbours():
    files, pod, rd = render("neutron-server")
    conf, ml2 = ini(files["neutron.conf"]), ini(files["ml2_conf.ini"])
    d = conf["DEFAULT"]
    server = library.read_service(rd["service_type"], SERVICES / "neutron-server.yaml")  # the ports derived
    assert d["bind_port"] == "19696" == str(server.haproxy[0]["backend_port"])
    assert pod["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] == 19696
    assert server.endpoints == {"network": {"port": 9696}} and rd["haproxy"][0]["port"] == 9696
    assert d["transport_url"] == "rabbit://openstack:rp@10.0.0.9:5672,openstack:rp@10.0.0.8:5672/"  # every broker
    assert conf["oslo_messaging_rabbit"]["rabbit_quorum_queue"] == "true"  # a cluster: quorum queues
    assert d["service_plugins"] == "" and d["core_plugin"] == "ml2"
    assert conf["database"]["connection"] == "mysql+pymysql://neutron:qdb@10.0.0.9:13306/neutron"  # one MariaDB: directly
    assert conf["keystone_authtoken"]["password"] == "qp"
    assert conf["nova"]["username"] == "nova" and conf["nova"]["password"] == "np"
    assert conf["experimental"]["linuxbridge"] == "true"
    # One RPC worker, which takes the state reports too (no dedicated report worker), and one
    # API worker: 2025.1 refuses 0 API workers; Zed runs the API in neutron-server's own process.
    assert (d["api_workers"], d["rpc_workers"], d["rpc_state_report_workers"]) == ("1", "1", "0")  # 2025.1's
    zed = ini(render("neutron-server", {"OvercloudRelease": "zed"})[0]["neutron.conf"])["DEFAULT"]
    assert (zed["api_workers"], zed["rpc_workers"]) == ("0", "1")
    two = ini(render("neutron-server", {"NeutronWorkers": 2})[0]["neutron.conf"])["DEFAULT"]
    assert two["api_workers"] == "2"
    with pytest.raises(InvalidInput, match="NeutronRpcWorkers.*0 is out of range"):
        render("neutron-server", {"NeutronRpcWorkers": 0})
    assert ml2["ml2"]["mechanism_drivers"] == "linuxbridge,l2population"
    assert ml2["ml2"]["type_drivers"] == "vxlan,flat" and ml2["ml2"]["tenant_network_types"] == "vxlan"
    assert ml2["ml2_type_vxlan"]["vni_ranges"] == "1:1000"
    assert ml2["ml2_type_flat"]["flat_networks"] == "datacentre"  # provider networks (TripleO's physnet name)
    assert json.loads(files["uc-neutron.json"]) == {"bootstrap_node": "10.0.0.3", "api_port": 19696}
    # another mechanism does not switch the experimental linuxbridge driver on
    other = render("neutron-server", {"NeutronMechanismDrivers": ["openvswitch"]})[0]
    assert ini(other["neutron.conf"])["experimental"]["linuxbridge"] == "false"


def test_agents_meet_the_server_on_every_broker_and_probe_as_neutron():
    for name, binary in AGENTS.items():
        files, pod, _ = render(name)
        conf = ini(files["neutron.conf"])
        assert conf["DEFAULT"]["transport_url"] == "rabbit://openstack:rp@10.0.0.9:5672,openstack:rp@10.0.0.8:5672/", name
        assert conf["oslo_messaging_rabbit"]["rabbit_quorum_queue"] == "true", name
        # one broker: classic queues, as a lone broker always had
        one = ini(render(name, {"ServiceNodes": {**NODES, "rabbitmq": ["10.0.0.9"]}})[0]["neutron.conf"])
        assert one["DEFAULT"]["transport_url"] == "rabbit://openstack:rp@10.0.0.9:5672/", name
        assert one["oslo_messaging_rabbit"]["rabbit_quorum_queue"] == "false", name
        assert conf["agent"]["root_helper"] == "", name
        probe = json.loads(files["uc-neutron.json"])["probe"]
        assert probe == {"auth_url": ENDPOINTS["keystone"], "username": "neutron", "password": "qp",
                         "project_name": "service", "network_url": ENDPOINTS["network"]}
        (container,) = pod["spec"]["containers"]
        assert container["readinessProbe"]["exec"]["command"] == ["/usr/local/bin/uc-neutron-agent-alive", binary]


def test_linuxbridge_agent_vxlan_l2pop_iptables_privileged():
    files, pod, _ = render("neutron-linuxbridge-agent")
    lb = ini(files["linuxbridge_agent.ini"])
    assert lb["vxlan"]["enable_vxlan"] == "true" and lb["vxlan"]["l2_population"] == "true"
    assert lb["securitygroup"]["firewall_driver"] == "iptables" and lb["securitygroup"]["enable_security_group"] == "true"
    assert json.loads(files["uc-neutron.json"])["node_addresses"] == NODES["neutron_linuxbridge_agent"]
    assert pod["spec"]["containers"][0]["securityContext"] == {"privileged": True}
    noop = ini(render("neutron-linuxbridge-agent", {"NeutronFirewallDriver": "noop"})[0]["linuxbridge_agent.ini"])
    assert noop["securitygroup"]["enable_security_group"] == "false"
    # no provider network unless the nodes have the interface; container nodes: their `provider` port
    assert lb["linux_bridge"]["physical_interface_mappings"] == ""
    mapped = render("neutron-linuxbridge-agent", {"NeutronPhysicalInterfaceMappings": ["datacentre:provider"]})[0]
    assert ini(mapped["linuxbridge_agent.ini"])["linux_bridge"]["physical_interface_mappings"] == "datacentre:provider"


def test_dhcp_and_metadata_agents_share_the_state_claim():
    mounts = {}
    for name in ("neutron-dhcp-agent", "neutron-metadata-agent"):
        files, pod, _ = render(name)
        (container,) = pod["spec"]["containers"]
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
                  if "persistentVolumeClaim" in v}
        path = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        mounts[name] = {claims[n]: path[n] for n in claims}
    assert mounts["neutron-dhcp-agent"] == mounts["neutron-metadata-agent"] == {"neutron-data": "/var/lib/neutron"}
    dhcp_files, dhcp_pod, _ = render("neutron-dhcp-agent")
    dhcp = ini(dhcp_files["dhcp_agent.ini"])["DEFAULT"]
    assert dhcp["interface_driver"] == "linuxbridge"
    assert dhcp["enable_isolated_metadata"] == dhcp["force_metadata"] == "true"
    assert dhcp_pod["spec"]["containers"][0]["securityContext"] == {"privileged": True}
    meta_files, meta_pod, _ = render("neutron-metadata-agent")
    meta = ini(meta_files["metadata_agent.ini"])["DEFAULT"]
    assert (meta["nova_metadata_host"], meta["nova_metadata_port"]) == ("10.0.0.250", "8775")
    assert meta["metadata_proxy_shared_secret"] == "ms"
    assert meta["metadata_workers"] == "0"  # the proxy served from the agent's own process
    assert "securityContext" not in meta_pod["spec"]["containers"][0], "the metadata agent needs no privilege"


def test_the_library_declares_neutron_consistently_with_the_other_services():
    services = [library.read_service(t, p) for t, p in library.builtin_registry().items()]
    assert library.conflicts(services) == []
    assert "service-neutron" in library.library_images()


# ---- uc-neutron-start -----------------------------------------------------------------

@pytest.fixture
def start():
    return module(STATIC / "bin" / "uc-neutron-start")


def test_tunnel_address_is_this_nodes_address_among_the_agents_nodes(start, monkeypatch):
    monkeypatch.setattr(start, "fallback_address", lambda: ("198.51.100.1", "fallback"))
    assert start.tunnel_address({"node_addresses": ["192.0.2.77", "127.0.0.1"]}) == (
        "127.0.0.1", "this node's address among node_addresses")
    assert start.tunnel_address({"node_addresses": ["192.0.2.77"]}) == ("198.51.100.1", "fallback")
    assert start.tunnel_address({}) == ("198.51.100.1", "fallback")


def test_stale_namespace_files_of_a_restarted_container_are_removed(start, monkeypatch, tmp_path):
    netns = tmp_path / "netns"
    netns.mkdir()
    (netns / "qdhcp-stale").write_text("")
    (netns / "qdhcp-live").write_text("")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"1 2 0:4 net:[4026532] {netns}/qdhcp-live rw shared:5 - nsfs nsfs rw\n")
    monkeypatch.setattr(start, "NETNS", str(netns))
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: real_open(mountinfo if p == "/proc/self/mountinfo" else p,
                                                                       *a, **k))
    start.clean_stale_namespaces()
    assert sorted(os.listdir(netns)) == ["qdhcp-live"]
    monkeypatch.setattr(start, "NETNS", str(tmp_path / "none"))
    start.clean_stale_namespaces()  # no /run/netns yet: nothing to do


def test_bad_usage_is_one_line_and_exit_1():
    r = subprocess.run([sys.executable, str(STATIC / "bin" / "uc-neutron-start"), "l3-agent"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "uc-neutron-start: usage: uc-neutron-start server|linuxbridge-agent|openvswitch-agent|ovsdb-server|"
        "ovs-vswitchd|dhcp-agent|metadata-agent"]


# ---- uc-neutron-agent-alive -----------------------------------------------------------

@pytest.fixture
def api():
    """Keystone (POST /v3/auth/tokens) and Neutron (GET /v2.0/agents) with a recorded log."""
    state = {"agents": [], "calls": [], "valid": {"tok-1"}}

    class Handler(http.server.BaseHTTPRequestHandler):
        def reply(self, code, body, headers=()):
            data = json.dumps(body).encode()
            self.send_response(code)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state["calls"].append(("POST", self.path, body["auth"]["identity"]["password"]["user"]["name"]))
            self.reply(201, {"token": {"expires_at": "2999-01-01T00:00:00.000000Z"}}, [("X-Subject-Token", "tok-1")])

        def do_GET(self):  # noqa: N802
            state["calls"].append(("GET", self.path, self.headers.get("X-Auth-Token")))
            if self.headers.get("X-Auth-Token") not in state["valid"]:
                return self.reply(401, {})
            self.reply(200, {"agents": state["agents"]})

        def log_message(self, *args):
            pass
    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    state["url"] = f"http://127.0.0.1:{srv.server_port}"
    yield state
    srv.shutdown()


@pytest.fixture
def alive(api, tmp_path, monkeypatch):
    mod = module(STATIC / "bin" / "uc-neutron-agent-alive")
    conf = tmp_path / "uc-neutron.json"
    conf.write_text(json.dumps({"probe": {"auth_url": api["url"] + "/v3", "username": "neutron", "password": "pw",
                                          "project_name": "service", "network_url": api["url"]}}))
    monkeypatch.setattr(mod, "CONF", str(conf))
    monkeypatch.setattr(mod, "CACHE", str(tmp_path / "token.json"))
    monkeypatch.setattr(mod.socket, "gethostname", lambda: "overcloud-novacompute-0")
    return mod


def test_probe_passes_only_for_an_alive_agent_on_this_host(alive, api, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["uc-neutron-agent-alive", "neutron-dhcp-agent"])
    assert alive.main() == 1 and "not registered" in capsys.readouterr().err
    api["agents"] = [{"alive": False}]
    assert alive.main() == 1 and "registered but not alive" in capsys.readouterr().err
    api["agents"] = [{"alive": True}]
    assert alive.main() == 0
    gets = [c for c in api["calls"] if c[0] == "GET"]
    assert gets[-1][1] == "/v2.0/agents?host=overcloud-novacompute-0&binary=neutron-dhcp-agent"
    # the token is kept: one authentication for the three probes
    assert [c for c in api["calls"] if c[0] == "POST"] == [("POST", "/v3/auth/tokens", "neutron")]
    assert os.stat(alive.CACHE).st_mode & 0o777 == 0o600


def test_probe_authenticates_again_when_the_kept_token_is_refused(alive, api, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["uc-neutron-agent-alive", "neutron-linuxbridge-agent"])
    Path(alive.CACHE).write_text(json.dumps({"token": "revoked", "expires": "2999-01-01T00:00:00+00:00"}))
    api["agents"] = [{"alive": True}]
    assert alive.main() == 0
    assert [c[2] for c in api["calls"] if c[0] == "GET"] == ["revoked", "tok-1"]


# ---- ebtables fallback ----------------------------------------------------------------

FAKE_EBTABLES = """#!/bin/sh
# ebtables-nft 1.8.9 as seen here: -D with an among match fails; -L lists; -D N works
echo "$*" >> "{log}"
case "$*" in
  *"-D"*"--among-src"*) echo "RULE_DELETE failed (Invalid argument)" >&2; exit 4 ;;
  *"-L"*) printf 'Bridge chain: C, entries: 2\\n-i tap1 --among-src fa:16:3e:00:00:01 -j RETURN\\n-j DROP\\n' ;;
esac
exit 0
"""


def test_ebtables_deletes_an_among_rule_by_position_when_the_spec_fails(tmp_path, monkeypatch):
    mod = module(STATIC / "sbin" / "ebtables")
    log = tmp_path / "calls"
    fake = tmp_path / "ebtables-real"
    fake.write_text(FAKE_EBTABLES.replace("{log}", str(log)))
    fake.chmod(0o755)
    monkeypatch.setattr(mod, "REAL", str(fake))
    spec = ["-i", "tap1", "--among-src", "fa:16:3e:00:00:01", "-j", "RETURN"]
    assert mod.main(["-t", "nat", "--concurrent", "-D", "C", *spec]) == 0
    assert log.read_text().splitlines()[-2:] == ["-t nat --concurrent -L C", "-t nat --concurrent -D C 1"]
    # a rule that is not there stays an error; other commands pass straight through
    assert mod.main(["-t", "nat", "-D", "C", "-i", "tap2", "--among-src", "fa:16:3e:00:00:02", "-j", "RETURN"]) == 4
    assert mod.main(["-t", "nat", "-A", "C", "-j", "DROP"]) == 0
    assert log.read_text().splitlines()[-1] == "-t nat -A C -j DROP"
