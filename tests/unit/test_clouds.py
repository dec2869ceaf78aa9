"""`undercloud cloud ...` through the real CLI and service. The refusals (no such file, cloud
or server; a refused login) are real; the accepted cloud is a minimal Keystone v3 on
loopback (version document, token, catalog) that openstacksdk authenticates against. The
overcloud e2e adds the project's own overcloud as a cloud with its real Keystone."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
import yaml

from tests.conftest import TEST_STORE, free_port, run_cli
from undercloud.provisioning.clouds import masked

PASSWORD = "cloud-secret-5150"


class Keystone(http.server.BaseHTTPRequestHandler):
    """Answers what keystoneauth asks of Keystone v3: the version document and a password token
    (only for PASSWORD), whose catalog has the services the test sets."""

    services: list[str] = ["compute", "image", "network"]

    def log_message(self, *args):
        pass

    def _json(self, status: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def do_GET(self):
        self._json(200, {"version": {"id": "v3.14", "status": "stable", "links": [
            {"rel": "self", "href": f"{self.base()}/v3/"}]}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["auth"]["identity"]["password"]["user"].get("password") != PASSWORD:
            return self._json(401, {"error": {"code": 401, "message": "The request you have made requires "
                                              "authentication.", "title": "Unauthorized"}})
        catalog = [{"type": t, "name": t, "id": t, "endpoints": [
            {"id": f"{t}-1", "interface": "public", "region": "RegionOne", "region_id": "RegionOne",
             "url": f"{self.base()}/{t}"}]} for t in self.services]
        self._json(201, {"token": {
            "expires_at": "2099-01-01T00:00:00.000000Z", "issued_at": "2026-01-01T00:00:00.000000Z",
            "methods": ["password"], "catalog": catalog, "roles": [{"id": "r", "name": "admin"}],
            "user": {"id": "u", "name": "admin", "domain": {"id": "default", "name": "Default"}},
            "project": {"id": "p", "name": "admin", "domain": {"id": "default", "name": "Default"}}}},
            {"X-Subject-Token": "tok-1"})


@pytest.fixture
def keystone():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Keystone)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v3"
    server.shutdown()
    Keystone.services = ["compute", "image", "network"]


def clouds_yaml(path, auth_url: str, password: str = PASSWORD, name: str = "host") -> str:
    path.write_text(yaml.safe_dump({"clouds": {name: {
        "auth": {"auth_url": auth_url, "username": "admin", "password": password, "project_name": "admin",
                 "user_domain_name": "Default", "project_domain_name": "Default"},
        "region_name": "RegionOne", "identity_api_version": 3}}}))
    return str(path)


def one_error(r) -> str:
    assert r.returncode == 1, r.stdout
    assert "Traceback" not in r.stderr
    lines = [x for x in r.stderr.strip().splitlines() if x.startswith("error: ")]
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_add_list_show_remove_with_secrets_masked_and_encrypted(uc_home, tmp_path, keystone):
    path = clouds_yaml(tmp_path / "clouds.yaml", keystone)
    r = run_cli("cloud", "add", "lab", "--clouds-yaml", path, "--cloud", "host", "-f", "json")
    assert r.returncode == 0, r.stderr
    added = json.loads(r.stdout)
    assert added["endpoints"]["compute"] == keystone.removesuffix("/v3") + "/compute"
    assert added["config"]["auth"]["password"] == "******" and added["username"] == "admin"
    assert added["source"].endswith("clouds.yaml (host)")

    listed = json.loads(run_cli("cloud", "list", "-f", "json").stdout)
    assert [(c["name"], c["auth_url"]) for c in listed] == [("lab", keystone)]
    shown = run_cli("cloud", "show", "lab", "--check", "-f", "json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["endpoints"]["image"].endswith("/image")

    r = run_cli("cloud", "add", "lab", "--clouds-yaml", path, "--cloud", "host")
    assert "a cloud named 'lab' exists" in one_error(r)

    everything = "".join(run_cli("cloud", *a).stdout for a in (["list"], ["show", "lab"], ["list", "-f", "json"]))
    assert PASSWORD not in everything + (uc_home.path / "service.log").read_text()
    if TEST_STORE == "sqlite":  # encrypted at rest (the PostgreSQL run's store is no file here)
        assert PASSWORD.encode() not in (uc_home.path / "undercloud.db").read_bytes()

    assert run_cli("cloud", "remove", "lab").returncode == 0
    assert json.loads(run_cli("cloud", "list", "-f", "json").stdout) == []
    assert "no cloud 'lab'" in one_error(run_cli("cloud", "show", "lab"))


def test_a_cloud_its_servers_use_cannot_be_removed(tmp_path, keystone):
    from undercloud.api.context import Context
    from undercloud.config import Home
    from undercloud.errors import Conflict
    from undercloud.store.servers import Server

    ctx = Context(Home(tmp_path / "home"))
    entry = yaml.safe_load(open(clouds_yaml(tmp_path / "clouds.yaml", keystone)))["clouds"]["host"]
    ctx.clouds.add("lab", entry)
    with ctx.store.session() as s:
        s.add(Server(id="s1", name="inner-0", hypervisor_type="openstack:lab", flavor={}, image_id="i",
                     image_name="overcloud-full", status="ACTIVE"))
    with pytest.raises(Conflict) as e:
        ctx.clouds.remove("lab")
    assert e.value.message == "cloud lab has 1 server(s) of this undercloud: inner-0 (delete their stacks first)"
    assert [c["name"] for c in ctx.clouds.list()] == ["lab"]
    with ctx.store.session() as s:
        s.delete(s.get(Server, "s1"))
    assert ctx.clouds.remove("lab")["removed"] is True


def test_refused_unreachable_or_without_compute_stores_nothing(uc_home, tmp_path, keystone):
    r = run_cli("cloud", "add", "host", "--clouds-yaml", clouds_yaml(tmp_path / "bad.yaml", keystone, "wrong-pw"))
    line = one_error(r)
    assert line == f"error: cloud host: cannot authenticate at {keystone}: authentication refused (HTTP 401)"
    assert "wrong-pw" not in r.stderr

    port = free_port()
    r = run_cli("cloud", "add", "host", "--clouds-yaml",
                clouds_yaml(tmp_path / "closed.yaml", f"http://127.0.0.1:{port}/v3"))
    assert one_error(r) == f"error: cloud host: cannot authenticate at http://127.0.0.1:{port}/v3: Connection refused"

    Keystone.services = ["image"]
    r = run_cli("cloud", "add", "host", "--clouds-yaml", clouds_yaml(tmp_path / "nocompute.yaml", keystone))
    assert one_error(r) == "error: cloud host: its catalog has no compute service (Nova) for this region and interface"
    assert json.loads(run_cli("cloud", "list", "-f", "json").stdout) == []
    assert PASSWORD not in (uc_home.path / "service.log").read_text()


def test_clouds_yaml_problems_are_one_line_naming_the_file(uc_home, tmp_path, monkeypatch):
    good = clouds_yaml(tmp_path / "clouds.yaml", "http://127.0.0.1:1/v3")
    assert "no cloud 'other' (clouds in it: host)" in one_error(
        run_cli("cloud", "add", "other", "--clouds-yaml", good))
    assert "cannot read: No such file or directory" in one_error(
        run_cli("cloud", "add", "x", "--clouds-yaml", str(tmp_path / "missing.yaml")))
    (tmp_path / "broken.yaml").write_text("clouds:\n  host: [unclosed\n")
    assert f"{tmp_path / 'broken.yaml'}:3: not YAML" in one_error(
        run_cli("cloud", "add", "host", "--clouds-yaml", str(tmp_path / "broken.yaml")))
    (tmp_path / "flat.yaml").write_text("host: {}\n")
    assert "no `clouds:` map" in one_error(run_cli("cloud", "add", "host", "--clouds-yaml", str(tmp_path / "flat.yaml")))
    (tmp_path / "noauth.yaml").write_text("clouds: {host: {region_name: R}}\n")
    assert "cloud host: its entry has no auth.auth_url" in one_error(
        run_cli("cloud", "add", "host", "--clouds-yaml", str(tmp_path / "noauth.yaml")))
    assert "cloud name 'a b': only letters" in one_error(run_cli("cloud", "add", "a b", "--clouds-yaml", good,
                                                                 "--cloud", "host"))
    assert json.loads(run_cli("cloud", "list", "-f", "json").stdout) == []


def test_the_clouds_yaml_found_as_openstacksdk_finds_it_with_its_secure_yaml(uc_home, tmp_path, keystone):
    conf = tmp_path / "conf"
    conf.mkdir()
    path = clouds_yaml(conf / "clouds.yaml", keystone, password="")
    (conf / "secure.yaml").write_text(yaml.safe_dump({"clouds": {"host": {"auth": {"password": PASSWORD}}}}))
    r = run_cli("cloud", "add", "host", "-f", "json", env={"OS_CLIENT_CONFIG_FILE": path})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["source"] == f"{conf / 'clouds.yaml'} (host)"


def test_a_secure_yaml_is_deep_merged_into_the_entry_as_openstacksdk_does(tmp_path):
    from undercloud.cli.cloud import read_entry
    from undercloud.errors import InvalidInput

    (tmp_path / "clouds.yaml").write_text(yaml.safe_dump({"clouds": {"c": {
        "auth": {"auth_url": "http://k:5000/v3", "username": "u", "password": ""}, "regions": ["a", "b"]}}}))
    secure = tmp_path / "secure.yaml"
    secure.write_text(yaml.safe_dump({"clouds": {"c": {"auth": {"password": "p"}, "regions": ["c"],
                                                        "verify": False}}}))
    entry, _ = read_entry(str(tmp_path / "clouds.yaml"), "c")
    assert entry == {"auth": {"auth_url": "http://k:5000/v3", "username": "u", "password": "p"},
                     "regions": ["c"], "verify": False}  # maps merge; anything else replaces
    secure.write_text(yaml.safe_dump({"clouds": {"c": "p"}}))
    with pytest.raises(InvalidInput, match=r"secure\.yaml: clouds\.c is not a map$"):
        read_entry(str(tmp_path / "clouds.yaml"), "c")


def test_masked_hides_every_secret_named_value():
    entry = {"auth": {"password": "p", "application_credential_secret": "s", "token": "t", "username": "u"},
             "key": "/etc/client.key", "region_name": "R", "list": [{"password": "q"}], "empty_password": ""}
    assert masked(entry) == {"auth": {"password": "******", "application_credential_secret": "******", "token": "******",
                                      "username": "u"},
                             "key": "******", "region_name": "R", "list": [{"password": "******"}], "empty_password": ""}
