"""The overcloud's virtual IP: kept addresses, the per-stack choice, keepalived in the
haproxy service when the VIP is its own address."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import HTTPS, own_store_url, run_cli
from undercloud.errors import InvalidInput
from undercloud.masking import MASK
from undercloud.overcloud import addresses as oc
from undercloud.overcloud.library import LIBRARY
from undercloud.overcloud.secrets import stack_dir
from undercloud.provisioning.servers import base

NET = "uc1-lab"


def test_the_lab_networks_plan_gives_each_address_one_taker():
    """The ports', the servers', the virtual IPs', the undercloud's and the host's numbers of a
    lab /24, declared once in labnet: no two overlap, and what the realisers offer is read there."""
    from undercloud.host import labnet

    assert base.virtual_ips("10.130.7.0/24") == ["10.130.7.250", "10.130.7.251", "10.130.7.252", "10.130.7.253"]
    takers = [set(labnet.PORT_HOSTS), set(labnet.SERVER_HOSTS), set(labnet.VIP_HOSTS), {labnet.UNDERCLOUD_ADDRESS},
              {labnet.HOST_ADDRESS}]
    assert sum(len(t) for t in takers) == len(set().union(*takers))
    assert set().union(*takers) <= set(range(1, 255))


def table(tmp_path):
    from undercloud.store import Store
    from undercloud.store.addresses import AddressTable

    return AddressTable(Store(own_store_url(tmp_path / "uc.db"), tmp_path / "store.key").create_schema())


def test_container_addresses_skip_the_virtual_ips(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from undercloud.provisioning.servers import container

    # containers made before the address table: their labels say which addresses they hold
    taken = [{"Labels": {"undercloud.ip": f"10.1.2.{n}", "undercloud.server": f"s{n}"}} for n in range(2, 250)]
    monkeypatch.setattr(container.hp, "podman", lambda *a, **k: SimpleNamespace(stdout=json.dumps(taken)))
    env = SimpleNamespace(home=SimpleNamespace(instance="uc1", path=tmp_path), addresses=table(tmp_path))
    r = container.ContainerRealiser(env)
    info = {"subnet": "10.1.2.0/24", "gateway": "10.1.2.1"}
    spec = SimpleNamespace(id="new", networks=[], state={})
    assert r.net.allocate(spec, info) == "10.1.2.254"  # .250-.253 skipped
    with pytest.raises(base.RealiserError, match="fixed_ip 10.1.2.251 is kept for virtual IPs"):
        r.net.allocate(SimpleNamespace(id="other", networks=[{"fixed_ip": "10.1.2.251"}], state={}), info)
    with pytest.raises(base.RealiserError, match="fixed_ip 10.1.2.7 is held by server s7"):
        r.net.allocate(SimpleNamespace(id="other", networks=[{"fixed_ip": "10.1.2.7"}], state={}), info)
    with pytest.raises(base.RealiserError, match=r"the lab network 10.1.2.0/24 has no free address"):
        r.net.allocate(SimpleNamespace(id="other", networks=[], state={}), info)
    assert r.net.allocate(SimpleNamespace(id="new", networks=[], state={"ip": "10.1.2.254"}), info) == "10.1.2.254"


def test_each_stack_keeps_its_own_virtual_ip_until_deleted(tmp_path):
    from undercloud.orchestration.engine import StackService
    from undercloud.orchestration.template import Bundle

    home = tmp_path / "home"
    t = table(tmp_path)
    kept = base.virtual_ips("10.1.2.0/24")
    a = oc.choose_virtual_ip(t, home, NET, "overcloud", kept)
    assert a == "10.1.2.250"
    assert oc.choose_virtual_ip(t, home, NET, "overcloud", kept) == a  # the same at every deploy
    b = oc.choose_virtual_ip(t, home, NET, "other", kept)
    assert b == "10.1.2.251"
    for name in ("c", "d"):
        oc.choose_virtual_ip(t, home, NET, name, kept)
    with pytest.raises(InvalidInput, match=r"all held by other overclouds \(c, d, other, overcloud\)"):
        oc.choose_virtual_ip(t, home, NET, "e", kept)
    # Deleting an overcloud (its stack) frees its VIP.
    stacks = StackService(t.store)
    path = tmp_path / "empty.yaml"
    path.write_text("heat_template_version: wallaby\nresources: {}\n")
    stacks.create("other", Bundle.from_paths(str(path)).to_json(), {}, wait=True)
    stacks.delete("other", wait=True)
    assert oc.choose_virtual_ip(t, home, NET, "e", kept) == b
    # VRRP router ids: distinct for the VIPs of one home, in 1..255.
    ids = {oc.virtual_router_id("uc123456", v) for v in kept}
    assert len(ids) == len(kept) and all(1 <= i <= 255 for i in ids)


def test_the_virtual_ip_files_of_an_older_home_are_taken_into_the_table(tmp_path):
    home = tmp_path / "home"
    t = table(tmp_path)
    kept = base.virtual_ips("10.1.2.0/24")
    for stack, vip in (("old", "10.1.2.250"), ("elsewhere", "10.9.9.250")):
        stack_dir(home, stack).mkdir(parents=True)
        (stack_dir(home, stack) / "virtual-ip").write_text(vip + "\n")
    assert oc.choose_virtual_ip(t, home, NET, "new", kept) == "10.1.2.251"  # never the old one's
    assert oc.choose_virtual_ip(t, home, NET, "old", kept) == "10.1.2.250"  # which keeps it
    assert not (stack_dir(home, "old") / "virtual-ip").exists()
    assert (stack_dir(home, "elsewhere") / "virtual-ip").exists()  # another network's: left for it


def test_deploy_gets_the_stacks_virtual_ip_from_the_service(tmp_path):
    from fastapi.testclient import TestClient

    from undercloud.api.app import create_app
    from undercloud.api.context import Context
    from undercloud.config import Home
    from undercloud.provisioning.servers.fake import FakeRealiser

    class OnALab(FakeRealiser):
        def network_info(self) -> dict:
            return {"network": NET, "subnet": "10.1.2.0/24", "gateway": "10.1.2.1",
                    "virtual_ips": base.virtual_ips("10.1.2.0/24")}

    ctx = Context(Home(tmp_path / "home"))
    ctx.servers._realisers["container"] = OnALab(ctx.servers.env)
    api = TestClient(create_app(ctx), base_url=HTTPS)
    admin = {"X-Undercloud-Token": ctx.admin_token}
    url = "/v1/hypervisors/container/network/virtual-ip"
    first = api.post(url, json={"stack": "overcloud"}, headers=admin)
    assert first.status_code == 200, first.text
    assert first.json()["virtual_ip"] == "10.1.2.250" and first.json()["subnet"] == "10.1.2.0/24"
    assert api.post(url, json={"stack": "overcloud"}, headers=admin).json()["virtual_ip"] == "10.1.2.250"
    assert api.post(url, json={"stack": "other"}, headers=admin).json()["virtual_ip"] == "10.1.2.251"
    assert ctx.addresses.on(NET) == {"10.1.2.250": "vip:overcloud", "10.1.2.251": "vip:other"}
    bad = api.post(url, json={"stack": "../x"}, headers=admin)
    assert bad.status_code in (400, 422) and ctx.addresses.held("vip:../x") is None
    ctx.stacks.stop()


FRONTENDS = [{"name": "keystone_public", "port": 5000, "backend_port": 15000, "mode": "http", "check": "GET /v3",
              "servers": ["10.1.2.2"]},
             {"name": "db", "port": 3306, "backend_port": 13306, "mode": "tcp", "check": "",
              "servers": ["10.1.2.2", "10.1.2.3"]},
             {"name": "mysql", "port": 3307, "backend_port": 13306, "mode": "tcp", "check": "GET /",
              "check_port": 9200, "backup": True, "servers": ["10.1.2.2", "10.1.2.3", "10.1.2.4"]}]


def haproxy_role_data(tmp_path, vip: str, frontends: list = FRONTENDS, environment: Path | None = None,
                      shown: list | None = None) -> dict:
    """haproxy's role_data for `vip` (`shown`: add the ConfigFiles resource as `resource
    show` gives it)."""
    nodes = {"haproxy": ["10.1.2.2", "10.1.2.3"], "keystone": ["10.1.2.2"], "placement": ["10.1.2.3"]}
    r = run_cli("stack", "create", "hap", "-t", str(LIBRARY / "services" / "haproxy.yaml"), "--wait",
                *(["-e", str(environment)] if environment else []),
                "-P", f"ServiceNodes={json.dumps(nodes)}", "-P", f"VirtualIP={vip}",
                "-P", f"ServiceData={json.dumps({'haproxy': frontends})}",
                "-P", "ContainerHaproxyImage=localhost/undercloud/service-haproxy:1", "-P", "KeepalivedVirtualRouterId=77")
    assert r.returncode == 0, r.stderr
    out = run_cli("stack", "output", "show", "hap", "role_data", "-f", "json")
    assert out.returncode == 0, out.stderr
    if shown is not None:
        res = run_cli("stack", "resource", "show", "hap", "ConfigFiles", "-f", "json")
        assert res.returncode == 0, res.stderr
        shown.append(res.stdout)
    assert run_cli("stack", "delete", "hap", "--wait").returncode == 0
    return json.loads(out.stdout)["output_value"]


def test_keepalived_holds_a_dedicated_vip_and_nothing_else(uc_home, tmp_path):
    rd = haproxy_role_data(tmp_path, "10.1.2.250")
    kinds = [(i["kind"], i["metadata"]["name"]) for i in rd["kube"]]
    assert kinds == [("ConfigMap", "haproxy-config"), ("Pod", "haproxy"),
                     ("ConfigMap", "keepalived-config"), ("Pod", "keepalived")]
    conf = rd["kube"][2]["data"]["keepalived.conf"]
    assert "virtual_router_id 77" in conf and "10.1.2.250/32" in conf and "interface $VIP_INTERFACE" in conf
    assert json.loads(rd["kube"][2]["data"]["config.json"])["command"] == ["/usr/local/bin/uc-keepalived-start",
                                                                          "10.1.2.250"]
    (ka,) = rd["kube"][3]["spec"]["containers"]
    assert ka["securityContext"]["capabilities"]["add"] == ["NET_ADMIN", "NET_RAW", "NET_BROADCAST"]
    assert ka["readinessProbe"]["httpGet"]["host"] == "10.1.2.250"
    # One frontend per declaration, balancing over the nodes running its service.
    cfg = rd["kube"][0]["data"]["haproxy.cfg"]
    assert ("listen keystone_public\n  bind *:5000\n  mode http\n  balance roundrobin\n  option httpchk GET /v3\n"
            "  server keystone_public-10.1.2.2 10.1.2.2:15000 check\n") in cfg
    assert ("listen db\n  bind *:3306\n  mode tcp\n  balance roundrobin\n"
            "  option tcpka\n  timeout client 90m\n  timeout server 90m\n"
            "  server db-10.1.2.2 10.1.2.2:13306 check\n"
            "  server db-10.1.2.3 10.1.2.3:13306 check\n") in cfg
    # One writer at a time, checked on another port (MariaDB's :9200, ready when Synced).
    assert ("listen mysql\n  bind *:3307\n  mode tcp\n  balance roundrobin\n"
            "  option tcpka\n  timeout client 90m\n  timeout server 90m\n  option httpchk GET /\n"
            "  server mysql-10.1.2.2 10.1.2.2:13306 check port 9200\n"
            "  server mysql-10.1.2.3 10.1.2.3:13306 check port 9200 backup\n"
            "  server mysql-10.1.2.4 10.1.2.4:13306 check port 9200 backup\n"
            ) in cfg
    # A lost server's connections end by TCP keepalive, not by shutdown-sessions, which haproxy
    # 3.0 applies to a connection still being made by leaving it open with no server, for good.
    assert "shutdown-sessions" not in cfg
    # The VIP being a haproxy node's own address (no PublicVirtualIP): no keepalived.
    rd = haproxy_role_data(tmp_path, "10.1.2.2")
    assert [i["metadata"]["name"] for i in rd["kube"]] == ["haproxy-config", "haproxy"]


def test_haproxy_serves_the_api_endpoints_over_tls_too_with_the_key_never_shown(uc_home, tmp_path):
    """With a certificate (SSLCertificate, SSLKey from parameter_defaults, as a deploy gives
    them) each frontend with a public_port also binds it with TLS and says so to the service
    (X-Forwarded-Proto); the tcp database frontends do not. The key reaches the node's
    files (public.pem: certificate, then key) but no output or resource shows it."""
    from undercloud import tls

    ca, ca_key = tls.ensure_ca(tmp_path / "tls")
    cert, key = tls.issue(ca.read_bytes(), ca_key.read_bytes(), ["10.1.2.250", "overcloud.localdomain"])
    env = tmp_path / "tls-env.yaml"
    env.write_text(yaml.safe_dump({"parameter_defaults": {"SSLCertificate": cert.decode(), "SSLKey": key.decode()}}))
    frontends = [{**FRONTENDS[0], "public_port": 13000}, *[{**f, "public_port": 0} for f in FRONTENDS[1:]]]
    shown: list = []
    rd = haproxy_role_data(tmp_path, "10.1.2.250", frontends, env, shown)
    cfg = rd["kube"][0]["data"]["haproxy.cfg"]
    assert ("listen keystone_public\n  bind *:5000\n  bind *:13000 ssl crt /etc/haproxy/public.pem\n"
            "  http-request set-header X-Forwarded-Proto https if { ssl_fc }\n"
            "  http-request set-header X-Forwarded-Proto http if !{ ssl_fc }\n  mode http\n") in cfg
    assert cfg.count(" ssl crt ") == 1 and "listen db\n  bind *:3306\n  mode tcp" in cfg
    files = json.loads(rd["kube"][0]["data"]["config.json"])["config_files"]
    assert {"source": "/var/lib/undercloud/config/public.pem", "dest": "/etc/haproxy/public.pem",
            "owner": "root:haproxy", "perm": "0640"} in files
    pem = rd["kube"][0]["data"]["public.pem"]
    assert pem.startswith(cert.decode()) and MASK in pem  # the key, masked where it is shown
    key_body = key.decode().splitlines()[1]
    assert key_body not in json.dumps(rd) and key_body not in shown[0] and MASK in shown[0]
    # Without a certificate: no TLS port, an empty public.pem.
    rd = haproxy_role_data(tmp_path, "10.1.2.250", frontends)
    assert " ssl " not in rd["kube"][0]["data"]["haproxy.cfg"] and rd["kube"][0]["data"]["public.pem"] == ""
