"""TLS inside the overcloud (environments/tls-everywhere.yaml, overcloud/internal_tls.py): the
internal certificate issued by the undercloud's CA for the VIP, kept and renewed; what each
service template makes of EnableInternalTLS (haproxy's internal frontends, MariaDB and
RabbitMQ servers, their clients); the CA handed to every container by the deploy steps."""

from __future__ import annotations

import datetime
import json
import os

import pytest
import yaml
from cryptography import x509

from tests.conftest import run_cli
from undercloud import tls
from undercloud.errors import InvalidInput
from undercloud.overcloud import internal_tls
from undercloud.overcloud.library import LIBRARY

NOW = datetime.datetime(2026, 12, 6, tzinfo=datetime.UTC)
VIP = "192.0.2.250"
ON = LIBRARY / "environments" / "tls-everywhere.yaml"
MASK = "******"


def sans(pem: str) -> set[str]:
    cert = x509.load_pem_x509_certificate(pem.encode())
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(v) for v in ext.get_values_for_type(x509.IPAddress)} | set(ext.get_values_for_type(x509.DNSName))


def env(tmp_path, name: str, **defaults):
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"parameter_defaults": defaults}))
    return path


def test_issued_for_the_vip_kept_renewed_and_none_without_the_environment(tmp_path):
    home, ca_dir = tmp_path / "home", tmp_path / "home" / "tls"
    assert internal_tls.ensure(home, ca_dir, "overcloud", [], VIP, NOW) is None  # off by default
    assert internal_tls.ensure(home, ca_dir, "overcloud", [env(tmp_path, "off.yaml", EnableInternalTLS=False)],
                               VIP, NOW) is None
    first = internal_tls.ensure(home, ca_dir, "overcloud", [ON], VIP, NOW)
    cert, key, ca = (first.parameters[k] for k in ("InternalTLSCertificate", "InternalTLSKey", "InternalTLSCA"))
    assert sans(cert) == {VIP, "overcloud.internalapi.localdomain"} and ca == (ca_dir / "ca.pem").read_text()
    assert first.expires == NOW + datetime.timedelta(days=365)
    tls.check_pair(cert.encode(), key.encode(), names=[VIP], ca_pem=ca.encode(), now=NOW)
    key_file = home / "overcloud" / "overcloud" / "tls" / "internal.key"
    assert key_file.stat().st_mode & 0o777 == 0o600 and key_file.read_text() == key
    # kept while nothing changed; issued again 30 days before its end, or for another VIP or name
    later = internal_tls.ensure(home, ca_dir, "overcloud", [ON], VIP, NOW + datetime.timedelta(days=300))
    assert later.parameters == first.parameters
    renewed = internal_tls.ensure(home, ca_dir, "overcloud", [ON], VIP, NOW + datetime.timedelta(days=340))
    assert renewed.parameters["InternalTLSCertificate"] != cert
    named = internal_tls.ensure(home, ca_dir, "overcloud", [ON, env(tmp_path, "n.yaml", CloudNameInternal="db.lab")],
                                "192.0.2.251", NOW)
    assert sans(named.parameters["InternalTLSCertificate"]) == {"192.0.2.251", "db.lab"}
    # the public certificate is another one, in its own files
    assert not (home / "overcloud" / "overcloud" / "tls" / "public.pem").exists()


def test_bad_input_is_one_line_and_a_dry_run_writes_nothing(tmp_path):
    home, ca_dir = tmp_path / "home", tmp_path / "home" / "tls"
    with pytest.raises(InvalidInput) as no_vip:
        internal_tls.ensure(home, ca_dir, "inner", [ON], None, NOW)
    assert str(no_vip.value).startswith("EnableInternalTLS: internal TLS needs the virtual IP before the deploy")
    with pytest.raises(InvalidInput) as not_bool:
        internal_tls.ensure(home, ca_dir, "overcloud", [env(tmp_path, "b.yaml", EnableInternalTLS="sometimes")], VIP)
    assert str(not_bool.value) == "EnableInternalTLS: 'sometimes' is not a boolean (true or false)"
    dry = internal_tls.ensure(home, ca_dir, "overcloud", [ON], VIP, NOW, write=False)
    assert dry.expires is None and set(dry.parameters.values()) == {"(would issue the internal certificate)"}
    assert not home.exists()


def test_the_library_environment_is_found_by_its_relative_name(tmp_path, monkeypatch):
    """`deploy -e environments/tls-everywhere.yaml` from anywhere: the library's file, unless
    one of that name is where you are."""
    from undercloud.overcloud.workflows import deploy_input, library_environment

    monkeypatch.chdir(tmp_path)
    assert library_environment("environments/tls-everywhere.yaml") == str(ON)
    assert deploy_input(None, None, ["environments/tls-everywhere.yaml"], "container", 60, False)["environments"] == [
        str(ON)]
    mine = tmp_path / "environments" / "tls-everywhere.yaml"
    mine.parent.mkdir()
    mine.write_text("parameter_defaults: {}\n")
    assert deploy_input(None, None, ["environments/tls-everywhere.yaml"], "container", 60, False)["environments"] == [
        str(mine)]
    assert library_environment("environments/missing.yaml") == "environments/missing.yaml"  # refused as given


PARAMETERS = {
    "ServiceNodes": {"haproxy": ["10.1.2.2"], "mysql": ["10.1.2.2"], "rabbitmq": ["10.1.2.2"],
                     "memcached": ["10.1.2.2"], "keystone": ["10.1.2.2"], "nova_api": ["10.1.2.2"]},
    "VirtualIP": VIP,
    "EndpointMap": {"keystone": f"https://{VIP}:5000/v3"},
    "ServiceData": {"databases": [], "haproxy": [
        {"name": "keystone_public", "port": 5000, "backend_port": 15000, "mode": "http", "check": "GET /v3",
         "public_port": 13000, "servers": ["10.1.2.2"]},
        {"name": "mysql", "port": 3306, "backend_port": 13306, "mode": "tcp", "check": "GET /", "check_port": 9200,
         "backup": True, "servers": ["10.1.2.2"]}]},
}
SECRETS = {k: "s3cret-" + k for k in ("RabbitPassword", "RabbitCookie", "NovaPassword", "NovaDbPassword",
                                      "NovaApiDbPassword", "NeutronPassword", "MetadataSecret")}
IMAGES = {k: "localhost/undercloud/x:1" for k in ("ContainerHaproxyImage", "ContainerMysqlImage",
                                                   "ContainerRabbitmqImage", "ContainerNovaConductorImage",
                                                   "ContainerNeutronMetadataImage")}


def role_data(tmp_path, service: str, environments=(), shown: list | None = None) -> dict:
    """A library service's role_data as the engine evaluates it (`shown`: add what `resource
    show` gives of its ConfigFiles)."""
    base = env(tmp_path, "base.yaml", **{k: json.dumps(v) if isinstance(v, dict) else v
                                         for k, v in PARAMETERS.items()}, **SECRETS, **IMAGES)
    name = service.replace("-", "")
    args = ["stack", "create", name, "-t", str(LIBRARY / "services" / f"{service}.yaml"), "--wait", "-e", str(base)]
    for e in environments:
        args += ["-e", str(e)]
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    out = run_cli("stack", "output", "show", name, "role_data", "-f", "json")
    assert out.returncode == 0, out.stderr
    if shown is not None:
        res = run_cli("stack", "resource", "show", name, "ConfigFiles", "-f", "json")
        shown.append(res.stdout + res.stderr)
    assert run_cli("stack", "delete", name, "--wait").returncode == 0
    return json.loads(out.stdout)["output_value"]


@pytest.fixture
def certificate(tmp_path):
    ca, ca_key = tls.ensure_ca(tmp_path / "tls")
    cert, key = tls.issue(ca.read_bytes(), ca_key.read_bytes(), [VIP])
    return env(tmp_path, "internal.yaml", EnableInternalTLS=True, InternalTLSCertificate=cert.decode(),
               InternalTLSKey=key.decode(), InternalTLSCA=ca.read_text()), cert.decode(), key.decode()


def test_the_servers_speak_tls_only_with_the_certificate_and_never_show_its_key(uc_home, tmp_path, certificate):
    tls_env, cert, key = certificate
    key_line = key.splitlines()[1]
    shown: list = []
    # haproxy: the internal port of an http frontend with the internal certificate, the
    # public one with the public certificate (none here); the database's tcp frontend as it was
    hap = role_data(tmp_path, "haproxy", [tls_env], shown)["kube"][0]["data"]
    assert ("listen keystone_public\n  bind *:5000 ssl crt /etc/haproxy/internal.pem\n"
            "  http-request set-header X-Forwarded-Proto https if { ssl_fc }\n") in hap["haproxy.cfg"]
    assert "listen mysql\n  bind *:3306\n  mode tcp" in hap["haproxy.cfg"]
    assert hap["internal.pem"].startswith(cert) and MASK in hap["internal.pem"]
    # MariaDB: its certificate and key (mysql's, 0600), clients over TLS only
    db = role_data(tmp_path, "mariadb", [tls_env], shown)["kube"][0]["data"]
    command = json.loads(db["config.json"])["command"]
    assert command[-4:] == ["--ssl-cert=/etc/mysql/internal.pem", "--ssl-key=/etc/mysql/internal.key",
                            "--ssl-ca=/var/lib/undercloud/config/ca.pem", "--require-secure-transport=ON"]
    assert {"source": "/var/lib/undercloud/config/internal.key", "dest": "/etc/mysql/internal.key",
            "owner": "mysql:mysql", "perm": "0600"} in json.loads(db["config.json"])["config_files"]
    assert db["internal.pem"] == cert and db["internal.key"] == MASK
    # RabbitMQ: AMQP over TLS on 5671, no plain listener; its readiness probe on 5671
    rabbit = role_data(tmp_path, "rabbitmq", [tls_env], shown)
    conf = rabbit["kube"][0]["data"]["rabbitmq.conf"]
    assert "listeners.tcp = none\nlisteners.ssl.default = 5671\n" in conf and "listeners.tcp.default" not in conf
    assert rabbit["kube"][1]["spec"]["containers"][0]["readinessProbe"] == {"tcpSocket": {"port": 5671}}
    assert key_line not in json.dumps([hap, db, rabbit]) and all(key_line not in s for s in shown)


def test_without_it_the_servers_are_as_before(uc_home, tmp_path):
    hap = role_data(tmp_path, "haproxy")["kube"][0]["data"]
    assert " ssl " not in hap["haproxy.cfg"] and hap["internal.pem"] == ""
    db = role_data(tmp_path, "mariadb")["kube"][0]["data"]
    assert not [a for a in json.loads(db["config.json"])["command"] if "ssl" in a or "secure" in a]
    rabbit = role_data(tmp_path, "rabbitmq")
    assert rabbit["kube"][0]["data"]["rabbitmq.conf"].startswith("listeners.tcp.default = 5672\n")
    assert rabbit["kube"][1]["spec"]["containers"][0]["readinessProbe"] == {"tcpSocket": {"port": 5672}}


def test_the_clients_verify_the_database_the_broker_and_nova_metadata(uc_home, tmp_path, certificate):
    """nova-conductor as every database and AMQP client: the database through haproxy on the
    VIP (the name the certificate has) with the CA, AMQP on 5671 with the CA; the metadata
    agent asks nova's metadata API over https with the CA. Without: as before."""
    tls_env = certificate[0]
    conf = role_data(tmp_path, "nova-conductor", [tls_env])["kube"][0]["data"]["nova.conf"]
    ca = "/var/lib/undercloud/config/ca.pem"
    assert f"connection = mysql+pymysql://nova:{MASK}@{VIP}/nova?ssl_ca={ca}\n" in conf
    assert f"connection = mysql+pymysql://nova_api:{MASK}@{VIP}/nova_api?ssl_ca={ca}\n" in conf
    assert "@10.1.2.2:5671/\n" in conf and f"ssl = true\nssl_ca_file = {ca}\n" in conf
    plain = role_data(tmp_path, "nova-conductor")["kube"][0]["data"]["nova.conf"]
    assert f"connection = mysql+pymysql://nova:{MASK}@10.1.2.2:13306/nova\n" in plain
    assert "@10.1.2.2:5672/\n" in plain and "ssl = false\n" in plain
    agent = role_data(tmp_path, "neutron-metadata-agent", [tls_env])["kube"][0]["data"]["metadata_agent.ini"]
    assert f"nova_metadata_host = {VIP}\nnova_metadata_port = 8775\nnova_metadata_protocol = https\n" \
           f"auth_ca_cert = {ca}\n" in agent


def test_each_deploy_step_hands_every_container_the_ca(tmp_path):
    """The rendered step's items: with internal TLS every ConfigMap carries ca.pem (mounted
    with the service's configuration) and every container trusts it alone (OpenSSL's and
    requests' CA file), but those of a service declaring `internal_tls_client: false`
    (nova_libvirt: its instances live in it); without, the items as the services declared them."""
    from tests.unit.test_overcloud_plan import plan_for
    from undercloud.orchestration.template.functions import Yaql

    plan = plan_for(tmp_path, "minimal")
    doc = yaml.safe_load(plan.template.read_text())
    items = doc["resources"]["ControllerConfig_Step2"]["properties"]["config"]["items"]["yaql"]["expression"]
    chain = [{"step": 2, "kube": [
        {"kind": "ConfigMap", "metadata": {"name": "mysql-config"}, "data": {"config.json": "{}"}},
        {"kind": "Pod", "metadata": {"name": "mysql"}, "spec": {"containers": [
            {"name": "mysql", "env": [{"name": "A", "value": "1"}]}, {"name": "side"}]}}]},
        {"step": 2, "internal_tls_client": False, "kube": [
            {"kind": "ConfigMap", "metadata": {"name": "memcached-config"}, "data": {}},
            {"kind": "Pod", "metadata": {"name": "memcached"}, "spec": {"containers": [{"name": "memcached"}]}}]},
        {"step": 3, "kube": [{"kind": "ConfigMap", "metadata": {"name": "keystone-config"}, "data": {}}]}]
    parser, context = Yaql.engine()

    def evaluate(ca):
        return parser(items).evaluate({"data": {"chain": chain, "ca": ca}}, context.create_child_context())

    assert evaluate("") == chain[0]["kube"] + chain[1]["kube"]
    cm, pod, *untouched = evaluate("PEM")
    assert untouched == chain[1]["kube"]  # a service that calls nothing over internal TLS: as declared
    assert cm["data"] == {"config.json": "{}", "ca.pem": "PEM"}
    trust = [{"name": "SSL_CERT_FILE", "value": "/var/lib/undercloud/config/ca.pem"},
             {"name": "REQUESTS_CA_BUNDLE", "value": "/var/lib/undercloud/config/ca.pem"}]
    assert [c["env"] for c in pod["spec"]["containers"]] == [[{"name": "A", "value": "1"}, *trust], trust]
    # and the catalog's internal URLs are https with it
    endpoint = doc["resources"]["EndpointMap"]["properties"]["value"]["keystone"]["str_replace"]
    assert endpoint["template"].startswith("SCHEME://VIP:5000") and \
        endpoint["params"]["SCHEME"] == {"if": ["internal_tls", "https", "http"]}
    assert os.path.basename(str(ON)) in os.listdir(LIBRARY / "environments")
