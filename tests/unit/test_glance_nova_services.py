"""Glance and Nova control services: their start and probe scripts (uc-nova-start,
uc-nova-check, loaded from the element as modules) and what their service templates
render (configs, Pods, literal declarations)."""

from __future__ import annotations

import configparser
import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from tests.unit import service_support
from tests.unit.service_support import SERVICES, ini, script_module
from undercloud.images import elements
from undercloud.overcloud import library

BIN = elements.SHIPPED / "nova" / "static" / "usr" / "local" / "bin"

# `nova-manage cell_v2 list_cells` as nova 26 prints it (passwords masked).
LIST_CELLS = """\
+-------+--------------------------------------+-------------------------------------------+--------------------------------------------------+----------+
|  Name |                 UUID                 |               Transport URL               |               Database Connection                | Disabled |
+-------+--------------------------------------+-------------------------------------------+--------------------------------------------------+----------+
| cell0 | 00000000-0000-0000-0000-000000000000 |                   none:/                  | mysql+pymysql://nova:****@10.217.92.2/nova_cell0 |  False   |
| cell1 | beeebff4-0c52-4410-b595-c80bcf9e5c18 | rabbit://openstack:****@10.217.92.2:5672/ |    mysql+pymysql://nova:****@10.217.92.2/nova    |  False   |
+-------+--------------------------------------+-------------------------------------------+--------------------------------------------------+----------+
"""


def script(name: str):
    return script_module(BIN / name)


@pytest.fixture
def start():
    return script("uc-nova-start")


@pytest.fixture
def check():
    return script("uc-nova-check")


# ---- uc-nova-start --------------------------------------------------------------------

def test_cells_are_read_from_the_list_cells_table(start):
    assert start.cells(LIST_CELLS) == {"cell0": start.CELL0, "cell1": "beeebff4-0c52-4410-b595-c80bcf9e5c18"}
    assert start.cells("") == {}


def test_cell0_database_sits_beside_the_main_one(start):
    assert (start.cell0_connection("mysql+pymysql://nova:p%40ss@10.0.0.9/nova?charset=utf8")
            == "mysql+pymysql://nova:p%40ss@10.0.0.9/nova_cell0?charset=utf8")
    with pytest.raises(start.Failed, match="names no database"):
        start.cell0_connection("mysql+pymysql://nova:x@10.0.0.9/")


def _sync(start, monkeypatch, tmp_path, table):
    conf = tmp_path / "nova.conf"
    conf.write_text("[database]\nconnection = mysql+pymysql://nova:secret@db/nova\n")
    monkeypatch.setattr(start, "NOVA_CONF", str(conf))
    calls = []

    def manage(category, action, **kwargs):
        calls.append((category, action, kwargs))
        return table if (category, action) == ("cell_v2", "list_cells") else ""
    start.sync_databases(manage)
    return calls


def test_first_start_maps_cell0_and_creates_cell1(start, monkeypatch, tmp_path):
    calls = _sync(start, monkeypatch, tmp_path, "")
    assert calls == [("api_db", "sync", {}), ("cell_v2", "list_cells", {}),
                     ("cell_v2", "map_cell0", {"database_connection": "mysql+pymysql://nova:secret@db/nova_cell0"}),
                     ("cell_v2", "create_cell", {"name": "cell1"}), ("db", "sync", {})]


def test_a_restart_converges_the_cells_and_never_makes_a_second_cell1(start, monkeypatch, tmp_path):
    calls = _sync(start, monkeypatch, tmp_path, LIST_CELLS)
    assert ("cell_v2", "create_cell", {"name": "cell1"}) not in calls
    assert calls[2] == ("cell_v2", "update_cell", {"cell_uuid": start.CELL0, "transport_url": "none:///",
                                                   "db_connection": "mysql+pymysql://nova:secret@db/nova_cell0"})
    assert calls[3] == ("cell_v2", "update_cell", {"cell_uuid": "beeebff4-0c52-4410-b595-c80bcf9e5c18"})
    assert calls[-1] == ("db", "sync", {})


class _Commands:
    """nova-manage's command classes as NovaManage calls them: an instance per call."""

    def __init__(self):
        self.printed = "| cell1 | beeebff4-0c52-4410-b595-c80bcf9e5c18 |\n"

    def list_cells(self):
        print(self.printed, end="")
        return 0

    def create_cell(self, name=None):
        if name == "taken":
            print("The specified transport_url and/or database_connection combination already exists\n"
                  "for rabbit://nova:pw@mq:5672/\n")
            return 2

    def update_cell(self, cell_uuid, db_connection=None):
        raise RuntimeError(f"(pymysql.err.OperationalError) no access for {db_connection}\nsecond line")


def _nova_manage(start):
    manage = object.__new__(start.NovaManage)  # without importing nova
    manage.categories = {"cell_v2": _Commands}
    return manage


def test_nova_manage_returns_what_a_command_printed_and_prints_nothing(start, capsys):
    assert _nova_manage(start)("cell_v2", "list_cells") == "| cell1 | beeebff4-0c52-4410-b595-c80bcf9e5c18 |\n"
    out, err = capsys.readouterr()
    assert out == "" and err == "uc-nova-start: nova-manage cell_v2 list_cells\n"
    assert _nova_manage(start)("cell_v2", "create_cell", name="cell1") == ""


def test_nova_manage_failures_are_one_line_without_passwords(start):
    with pytest.raises(start.Failed, match=r"^nova-manage cell_v2 create_cell failed with exit 2: for rabbit://nova:\*\*\*\*@mq:5672/$"):
        _nova_manage(start)("cell_v2", "create_cell", name="taken")
    with pytest.raises(start.Failed) as err:
        _nova_manage(start)("cell_v2", "update_cell", cell_uuid="x", db_connection="mysql+pymysql://nova:s3cret@db/n")
    assert str(err.value) == ("nova-manage cell_v2 update_cell failed: RuntimeError: (pymysql.err.OperationalError) "
                              "no access for mysql+pymysql://nova:****@db/n")


def test_database_connection_is_read_from_nova_conf(start, tmp_path):
    conf = tmp_path / "nova.conf"
    conf.write_text("[DEFAULT]\nx = %(y)s\n[database]\nconnection = mysql+pymysql://nova:a%b@db/nova\n")
    assert start.database_connection(str(conf)) == "mysql+pymysql://nova:a%b@db/nova"
    conf.write_text("[DEFAULT]\n")
    with pytest.raises(start.Failed, match=r"\[database\] connection is not set"):
        start.database_connection(str(conf))


def test_commands_per_service(start, monkeypatch, tmp_path):
    nodisc = tmp_path / "no-discover.conf"
    monkeypatch.setattr(start, "NO_DISCOVER", str(nodisc))
    api = start.command("api", {"listen": "0.0.0.0:18774", "processes": 2}, True)
    assert api[:6] == ["uwsgi", "--plugin", "python3", "--http-socket", "0.0.0.0:18774", "--wsgi-file"]
    assert api[6] == "/usr/bin/nova-api-wsgi" and api[api.index("--processes") + 1] == "2"
    assert "--lazy-apps" in api and api[api.index("--threads") + 1] == "1"
    meta = start.command("metadata", {"listen": "0.0.0.0:18775"}, False)
    assert meta[4:7] == ["0.0.0.0:18775", "--wsgi-file", "/usr/bin/nova-metadata-wsgi"]
    assert start.command("conductor", {}, False) == ["nova-conductor", "--config-file", start.NOVA_CONF]
    assert start.command("scheduler", {}, True) == ["nova-scheduler", "--config-file", start.NOVA_CONF]
    assert not nodisc.exists()
    # Only the bootstrap scheduler maps new compute hosts: the others turn it off.
    assert start.command("scheduler", {}, False)[-2:] == ["--config-file", str(nodisc)]
    parsed = configparser.ConfigParser()
    parsed.read(nodisc)
    assert parsed.getint("scheduler", "discover_hosts_in_cells_interval") == -1


@pytest.fixture
def http_server():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(300)  # nova's version document answers 300 on some paths
            self.end_headers()

        def log_message(self, *args):
            pass
    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}/"
    srv.shutdown()


def test_wait_http_returns_once_the_api_answers_and_fails_after_its_timeout(start, http_server):
    start.wait_http(http_server, timeout=5)
    with pytest.raises(start.Failed, match="did not answer within 0 s"):
        start.wait_http("http://127.0.0.1:9/", timeout=0.5, pause=0.1)


def test_bad_usage_is_one_line_and_exit_1():
    r = subprocess.run([sys.executable, str(BIN / "uc-nova-start"), "compute"], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "uc-nova-start: usage: uc-nova-start api|metadata|conductor|scheduler"]


# ---- uc-nova-check --------------------------------------------------------------------

def test_check_reads_the_database_and_host_from_nova_conf(check, tmp_path, monkeypatch):
    conf = tmp_path / "nova.conf"
    conf.write_text("[DEFAULT]\nservice_down_time = 30\n"
                    "[database]\nconnection = mysql+pymysql://nova:p%40ss@10.0.0.9:3307/nova\n")
    monkeypatch.setattr(check.socket, "gethostname", lambda: "ctl-0")
    db, host, down = check.settings(str(conf))
    assert db == {"host": "10.0.0.9", "port": 3307, "user": "nova", "password": "p@ss", "database": "nova"}
    assert (host, down) == ("ctl-0", 30)
    conf.write_text("[DEFAULT]\nhost = h1\n[database]\nconnection = mysql+pymysql://nova:x@db/nova\n")
    assert check.settings(str(conf))[1:] == ("h1", 60)
    # Internal TLS: the server verified with the CA nova's URL names (SQLAlchemy's ssl_ca).
    conf.write_text("[database]\nconnection = mysql+pymysql://nova:x@10.0.0.9/nova?ssl_ca=/etc/ca.pem\n")
    assert check.settings(str(conf))[0] == {"host": "10.0.0.9", "port": 3306, "user": "nova", "password": "x",
                                            "database": "nova", "ssl": {"ca": "/etc/ca.pem"}}
    conf.write_text("[database]\nconnection = sqlite:////var/lib/nova/nova.sqlite\n")
    with pytest.raises(ValueError, match="not a MySQL URL"):
        check.settings(str(conf))


def test_check_verdict_is_up_only_for_a_recent_report_not_forced_down(check):
    assert check.verdict("nova-conductor", "h", (3, 0), 60) is None
    assert "no service record" in check.verdict("nova-conductor", "h", None, 60)
    assert "last report 61 s ago" in check.verdict("nova-scheduler", "h", (61, 0), 60)
    assert "forced down" in check.verdict("nova-scheduler", "h", (1, 1), 60)
    # a replaced container does not pass on the reports of the one before it
    assert "before this service started 2 s ago" in check.verdict("nova-conductor", "h", (8, 0), 60, 2.0)
    assert check.verdict("nova-conductor", "h", (2, 0), 60, 5.0) is None


def test_service_uptime_is_the_age_of_a_process(check):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert 0 <= check.service_uptime(proc.pid) < 10
        assert check.service_uptime(1) >= check.service_uptime(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_cells_are_ready_only_when_they_map_this_confs_databases_and_broker(check, start):
    db = "mysql+pymysql://nova:p%40ss@10.0.0.9/nova?ssl_ca=/var/lib/undercloud/config/ca.pem"
    mq = "rabbit://openstack:pw@10.0.0.9:5671/"
    cell0 = start.cell0_connection(db)  # as the bootstrap nova-api maps it
    cell1 = "beeebff4-0c52-4410-b595-c80bcf9e5c18"
    good = [(check.CELL0, "cell0", cell0, "none:///"), (cell1, "cell1", db, mq)]
    assert check.cells_verdict(good, db, mq) is None
    # before internal TLS: the old database URL (no ssl_ca) and broker (5672) still mapped
    old = [(check.CELL0, "cell0", cell0.replace("?ssl_ca=/var/lib/undercloud/config/ca.pem", ""), "none:///"),
           (cell1, "cell1", db.split("?")[0], mq.replace("5671", "5672"))]
    why = check.cells_verdict(old, db, mq)
    assert why.startswith("cell0 maps another database") and "p%40ss" not in why and "10.0.0.9" not in why
    assert check.cells_verdict([good[0], old[1]], db, mq).startswith("cell1 maps another database or broker")
    assert check.cells_verdict([good[0], (cell1, "cell1", db, mq.replace("5671", "5672"))], db, mq) \
        .startswith("cell1 maps another")
    assert check.cells_verdict([], db, mq) == "cell0 is not mapped yet"
    assert check.cells_verdict(good[:1], db, mq) == "cell1 is not mapped yet"


def test_the_api_database_is_reached_as_nova_conf_says(check, tmp_path):
    conf = tmp_path / "nova.conf"
    conf.write_text("[api_database]\nconnection = mysql+pymysql://nova_api:x@10.0.0.9/nova_api?ssl_ca=/ca.pem\n")
    assert check.connect_args(check.read_conf(str(conf)), "api_database", str(conf)) == {
        "host": "10.0.0.9", "port": 3306, "user": "nova_api", "password": "x", "database": "nova_api",
        "ssl": {"ca": "/ca.pem"}}


def test_a_service_waits_for_the_cells_saying_each_reason_once(start, monkeypatch, capsys):
    said = iter([(1, "uc-nova-check: cell0 is not mapped yet"), (1, "uc-nova-check: cell0 is not mapped yet"),
                 (1, "uc-nova-check: cell1 maps another database or broker than this nova.conf's"), (0, "")])

    def run(argv, **_kw):
        assert argv == ["uc-nova-check", "cells"]
        rc, err = next(said)
        return subprocess.CompletedProcess(argv, rc, "", err)

    monkeypatch.setattr(start.subprocess, "run", run)
    start.wait_cells(timeout=10, pause=0)
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["uc-nova-start: waiting for the cell mappings: cell0 is not mapped yet",
                     "uc-nova-start: waiting for the cell mappings: cell1 maps another database or broker than "
                     "this nova.conf's"]
    monkeypatch.setattr(start.subprocess, "run", lambda argv, **_kw: subprocess.CompletedProcess(
        argv, 1, "", "uc-nova-check: cell1 is not mapped yet\n"))
    with pytest.raises(start.Failed, match="did not match this nova.conf within 0 s: cell1 is not mapped yet"):
        start.wait_cells(timeout=0, pause=0)


def test_check_usage_is_exit_2():
    r = subprocess.run([sys.executable, str(BIN / "uc-nova-check")], capture_output=True, text=True)
    assert r.returncode == 2 and "usage: uc-nova-check" in r.stderr


# ---- templates ------------------------------------------------------------------------

NODES = {"mysql": ["10.0.0.9"], "rabbitmq": ["10.0.0.9", "10.0.0.8"], "memcached": ["10.0.0.2", "10.0.0.3"],
         "glance_api": ["10.0.0.3", "10.0.0.2"], "nova_api": ["10.0.0.2", "10.0.0.3"],
         "nova_conductor": ["10.0.0.3"], "nova_scheduler": ["10.0.0.3", "10.0.0.2"], "nova_metadata": ["10.0.0.2"]}
SECRETS = {"GlancePassword": "gp", "GlanceDbPassword": "gdb", "NovaPassword": "np", "NovaDbPassword": "ndb",
           "NovaApiDbPassword": "nadb", "NeutronPassword": "qp", "RabbitPassword": "rp", "MetadataSecret": "ms"}
TEMPLATES = ("glance-api", "nova-api", "nova-conductor", "nova-scheduler", "nova-metadata")


def render(name: str) -> tuple[dict, dict, dict]:
    """(config files, Pod, role_data declarations) of a service template with test values."""
    return service_support.render(name, {"ServiceNodes": NODES, "EndpointMap": {"keystone": "http://10.0.0.250:5000/v3"},
                                         "VirtualIP": "10.0.0.250", **SECRETS}, "localhost/undercloud/service-x:1")


@pytest.mark.parametrize("name", TEMPLATES)
def test_templates_declare_literally_what_they_use(name):
    files, pod, rd = render(name)
    params = yaml.safe_load((SERVICES / f"{name}.yaml").read_text())["parameters"]
    assert rd["step"] == 4 and rd["service_type"].startswith("OS::TripleO::Services::")
    assert rd["service_name"] in NODES
    for secret, kind in rd["secrets"].items():
        assert kind == "password" and params[secret].get("hidden") is True, secret
    assert all(p in params for p in rd["images"]) and set(rd["images"].values()) <= {"service-glance", "service-nova"}
    for db in rd.get("databases", []):
        assert db["password"] in rd["secrets"]
    # every hidden parameter the template reads is declared, so the plan generates it
    assert {p for p, spec in params.items() if spec.get("hidden")} == set(rd["secrets"])
    config = json.loads(files["config.json"])
    assert {Path(f["source"]).name for f in config["config_files"]} <= set(files)
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["/usr/local/bin/uc-start"] and pod["spec"]["hostNetwork"] is True
    # its frontend's backend is its probe's port (declared once, in the probe: overcloud/library.py)
    for f in library.read_service(rd["service_type"], SERVICES / f"{name}.yaml").haproxy:
        assert container["readinessProbe"]["httpGet"]["port"] == f["backend_port"]


def test_glance_keeps_images_on_its_claim():
    files, pod, rd = render("glance-api")
    conf = ini(files["glance-api.conf"])
    (container,) = pod["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
              if "persistentVolumeClaim" in v}
    assert claims == {"images": "glance-images"}
    assert conf["file"]["filesystem_store_datadir"].rstrip("/") == mounts["images"]
    glance = library.read_service(rd["service_type"], SERVICES / "glance-api.yaml")
    assert conf["DEFAULT"]["bind_port"] == "19292" and glance.haproxy[0]["backend_port"] == 19292
    # one MariaDB: directly (a Galera cluster: through haproxy at VIP:3306)
    assert conf["database"]["connection"] == "mysql+pymysql://glance:gdb@10.0.0.9:13306/glance"
    assert conf["keystone_authtoken"]["memcached_servers"] == "10.0.0.2:11211,10.0.0.3:11211"
    assert json.loads(files["uc-glance.json"]) == {"bootstrap_node": "10.0.0.3", "port": 19292}


def test_nova_services_share_broker_and_databases_and_wait_for_the_bootstrap_api():
    confs = {n: ini(render(n)[0]["nova.conf"]) for n in TEMPLATES[1:]}
    for name, conf in confs.items():
        assert conf["DEFAULT"]["transport_url"] == "rabbit://openstack:rp@10.0.0.9:5672,openstack:rp@10.0.0.8:5672/"
        assert conf["database"]["connection"] == "mysql+pymysql://nova:ndb@10.0.0.9:13306/nova", name
        assert conf["api_database"]["connection"] == "mysql+pymysql://nova_api:nadb@10.0.0.9:13306/nova_api", name
        assert "host" not in conf["DEFAULT"], "nova's host stays the node's hostname"
        boot = json.loads(render(name)[0]["uc-nova.json"])
        assert boot["api_url"] == "http://10.0.0.2:18774/"
    assert json.loads(render("nova-scheduler")[0]["uc-nova.json"])["bootstrap_node"] == "10.0.0.3"
    assert confs["nova-scheduler"].getint("scheduler", "discover_hosts_in_cells_interval") > 0
    api = confs["nova-api"]
    assert api["keystone_authtoken"]["username"] == "nova" and api["neutron"]["username"] == "neutron"
    assert api["neutron"]["password"] == "qp" and api["vnc"]["enabled"] == "false"
    meta = confs["nova-metadata"]
    assert meta["neutron"]["service_metadata_proxy"] == "true" and meta["neutron"]["metadata_proxy_shared_secret"] == "ms"
    assert render("nova-api")[2]["databases"] == [
        {"name": "nova_api", "user": "nova_api", "password": "NovaApiDbPassword"},
        {"name": "nova", "user": "nova", "password": "NovaDbPassword"},
        {"name": "nova_cell0", "user": "nova", "password": "NovaDbPassword"}]


@pytest.mark.parametrize("name", ["nova-conductor", "nova-scheduler"])
def test_rpc_services_probe_their_service_record(name):
    files, pod, _ = render(name)
    assert pod["spec"]["containers"][0]["readinessProbe"] == {
        "exec": {"command": ["/usr/local/bin/uc-nova-check", name]}}
    assert json.loads(files["config.json"])["command"] == ["/usr/local/bin/uc-nova-start", name.split("-")[1]]


def test_keystone_caches_in_every_memcached_and_only_when_there_is_one():
    given = {"VirtualIP": "10.0.0.250", "AdminPassword": "ap", "KeystoneDbPassword": "kdb",
             "EndpointMap": {"keystone": "http://10.0.0.250:5000/v3"},
             **{f"Keystone{kind}Key{i}": "k" * 44 for kind in ("Fernet", "Credential") for i in (0, 1)}}
    files, _, _ = service_support.render("keystone", {"ServiceNodes": NODES, **given}, "localhost/undercloud/service-x:1")
    cache = ini(files["keystone.conf"])["cache"]
    assert (cache["enabled"], cache["backend"]) == ("true", "oslo_cache.memcache_pool")
    assert cache["memcache_servers"] == "10.0.0.2:11211,10.0.0.3:11211"
    alone = {**NODES, "memcached": []}  # a role set without memcached (the plan gives every service a list)
    files, _, _ = service_support.render("keystone", {"ServiceNodes": alone, **given}, "localhost/undercloud/service-x:1")
    assert ini(files["keystone.conf"])["cache"]["enabled"] == "false"


def test_keystones_catalog_is_public_over_tls_internal_and_admin_on_the_internal_endpoint(tmp_path):
    """Keystone's own identity endpoints (its bootstrap) and those it registers for the
    others: public at the PublicEndpointMap URL, internal and admin at the EndpointMap one;
    registering again PATCHes what differs only (here: an older deploy's http public URL)."""
    given = {"VirtualIP": "10.0.0.250", "AdminPassword": "ap", "KeystoneDbPassword": "kdb",
             "EndpointMap": {"keystone": "http://10.0.0.250:5000/v3"},
             "ServiceData": {"public_endpoints": {"keystone": "https://10.0.0.250:13000/v3"}},
             **{f"Keystone{kind}Key{i}": "k" * 44 for kind in ("Fernet", "Credential") for i in (0, 1)}}
    files, _, _ = service_support.render("keystone", {"ServiceNodes": NODES, **given}, "localhost/undercloud/service-x:1")
    boot = json.loads(files["uc-bootstrap.json"])
    assert (boot["public_url"], boot["internal_url"]) == ("https://10.0.0.250:13000/v3", "http://10.0.0.250:5000/v3")
    assert ini(files["keystone.conf"])["oslo_middleware"]["enable_proxy_headers_parsing"] == "true"

    register = script_module(elements.SHIPPED / "keystone-register" / "static" / "usr" / "local" / "bin"
                             / "uc-keystone-register")
    endpoints = [{"id": "e1", "interface": "public", "url": "http://10.0.0.250:9292"}]
    calls = []

    def call(method, url, body=None, token=None):
        calls.append((method, url.split("/v3", 1)[1], body))
        path = url.split("/v3", 1)[1]
        if path.startswith("/auth/tokens"):
            return "token", {}
        if path.startswith("/projects"):
            return None, {"projects": [{"id": "p"}]}
        if path.startswith("/roles"):
            return None, {"roles": [{"id": "admin"}]}
        if path.startswith("/users"):
            return None, {"users": [{"id": "u"}]}
        if path.startswith("/services"):
            return None, {"services": [{"id": "s"}]}
        if path.startswith("/endpoints?"):
            return None, {"endpoints": endpoints}
        return None, {}

    register.call = call
    conf = tmp_path / "register.json"
    conf.write_text(json.dumps({"auth_url": "http://keystone/v3", "admin_password": "ap", "region": "RegionOne",
                                "register": [{"user": "glance", "password": "gp", "name": "glance", "type": "image",
                                              "url": "http://10.0.0.250:9292",
                                              "public_url": "https://10.0.0.250:13292"}]}))
    assert register.main(str(conf)) == 0
    writes = [(m, p, b) for m, p, b in calls if m in ("POST", "PATCH") and "endpoints" in p]
    assert writes == [
        ("PATCH", "/endpoints/e1", {"endpoint": {"url": "https://10.0.0.250:13292"}}),
        ("POST", "/endpoints", {"endpoint": {"service_id": "s", "interface": "internal",
                                             "url": "http://10.0.0.250:9292", "region_id": "RegionOne"}}),
        ("POST", "/endpoints", {"endpoint": {"service_id": "s", "interface": "admin",
                                             "url": "http://10.0.0.250:9292", "region_id": "RegionOne"}})]


def test_check_reads_again_once_after_a_socket_hiccup(check, monkeypatch):
    """EAGAIN from the socket (BlockingIOError, seen under load) or a lost connection is tried
    once more; a second failure, or another error, is the probe's answer."""
    import types

    class OperationalError(Exception):
        pass

    calls, script = [], []

    class Conn:
        def cursor(self):
            return self

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def execute(self, sql, args):
            calls.append(args)

        def fetchone(self):
            return (3, 0)

        def close(self):
            pass

    def connect(**kwargs):
        err = script.pop(0) if script else None
        if err:
            raise err
        return Conn()

    fake = types.SimpleNamespace(connect=connect, err=types.SimpleNamespace(OperationalError=OperationalError))
    monkeypatch.setitem(sys.modules, "pymysql", fake)
    monkeypatch.setattr(check.time, "sleep", lambda s: None)
    script[:] = [BlockingIOError(11, "Resource temporarily unavailable")]
    assert check.service_row({}, "nova-scheduler", "h") == (3, 0) and calls == [("nova-scheduler", "h")]
    script[:] = [OperationalError("lost"), OperationalError("lost again")]
    with pytest.raises(OperationalError, match="lost again"):
        check.service_row({}, "nova-scheduler", "h")
    script[:] = [ValueError("bad")]
    with pytest.raises(ValueError):
        check.service_row({}, "nova-scheduler", "h")
    assert script == []
