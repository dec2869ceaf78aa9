"""Hostile input against a real service (issue 17): every route answers bad input with a
4xx and one line, never a 500, writes nothing, and the service answers /v1/health within
1 s afterwards. Body limits are lowered through their variables so the tests send little.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import HTTPS
from undercloud.api import limits

HIDDEN = "hid-den-4711"
TEMPLATE = """\
heat_template_version: 2018-08-31
parameters:
  p: {type: string, hidden: true}
resources:
  none: {type: OS::Heat::None}
"""
ENV = {"UNDERCLOUD_MAX_BODY_BYTES": "65536", "UNDERCLOUD_MAX_STACK_BODY_BYTES": "1048576",
       "UNDERCLOUD_MAX_IMPORT_BODY_BYTES": "262144", "UNDERCLOUD_MAX_IMAGE_BYTES": "1048576",
       "UNDERCLOUD_MAX_JSON_DEPTH": "32"}


class Service:
    def __init__(self, home):
        self.home = home
        self.env = {**os.environ, "UNDERCLOUD_HOME": str(home), **ENV}
        self.env.pop("UNDERCLOUD_DB", None)
        r = subprocess.run([sys.executable, "-m", "undercloud", "service", "start", "-f", "json"],
                           capture_output=True, text=True, env=self.env, timeout=120)
        assert r.returncode == 0, r.stderr
        info = json.loads(r.stdout)
        self.url = info["url"]
        self.bare = httpx.Client(timeout=30, verify=info["ca"])  # no token
        self.http = httpx.Client(base_url=self.url, timeout=30, verify=info["ca"],
                                 headers={"X-Undercloud-Token": (home / "admin.token").read_text().strip()})

    def stop(self):
        subprocess.run([sys.executable, "-m", "undercloud", "service", "stop"], env=self.env, timeout=60)


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    s = Service(tmp_path_factory.mktemp("hardening") / "uc")
    yield s
    s.stop()


def healthy(svc: Service) -> None:
    """The service still answers, and fast."""
    t0 = time.monotonic()
    r = svc.bare.get(svc.url + "/v1/health", timeout=1.0)
    assert r.status_code == 200 and time.monotonic() - t0 < 1.0


def refused(r: httpx.Response, status: int | tuple = (400, 404, 409, 413)) -> str:
    """A 4xx whose body is {error, where} with a one-line error; returns the error."""
    statuses = status if isinstance(status, tuple) else (status,)
    assert r.status_code in statuses, (r.status_code, r.text[:300])
    body = r.json()
    assert set(body) == {"error", "where"}, body
    assert body["error"] and "\n" not in body["error"] and "Traceback" not in body["error"]
    assert len(body["error"]) < 400
    return body["error"]


def bundle(text: str = TEMPLATE) -> dict:
    return {"template": "t.yaml", "environments": [], "files": {"t.yaml": text}}


def raw_post(svc: Service, path: str, text: str, method: str = "POST") -> httpx.Response:
    return svc.http.request(method, path, content=text.encode("utf-8", "surrogatepass"),
                            headers={"Content-Type": "application/json"})


# ---- stacks ------------------------------------------------------------------------------
def test_a_lone_surrogate_in_a_parameter_is_refused_and_no_stack_is_made(svc):
    text = json.dumps({"name": "surrogate", "bundle": bundle(), "parameters": {"p": "\ud800"}})
    assert "\\ud800" in text  # json.dumps escapes it, as any client would send it
    err = refused(raw_post(svc, "/v1/stacks", text), 400)
    assert "surrogate" in err
    assert svc.http.get("/v1/stacks/surrogate").status_code == 404
    # raw (unescaped) surrogate bytes are not UTF-8
    refused(raw_post(svc, "/v1/stacks", text.replace("\\ud800", "\ud800")), 400)
    healthy(svc)


def test_bad_stack_requests(svc):
    ok = {"name": "fine", "bundle": bundle(), "parameters": {"p": HIDDEN}}
    for bad, where in (
        ({**ok, "timeout": -5}, "timeout"),
        ({**ok, "timeout": 10**30}, "timeout"),
        ({**ok, "name": "x" * 100_000}, "name"),
        ({**ok, "name": "a\x00b"}, "body.name"),
        ({**ok, "parameters": "nope"}, "parameters"),
        ({**ok, "bundle": []}, "bundle"),
    ):
        r = svc.http.post("/v1/stacks", json=bad)
        refused(r, (400, 413))
        assert r.json()["where"] == where or r.status_code == 413, r.json()
    assert svc.http.get("/v1/stacks").json() == []
    for q in ("limit=100000000000000000000000000000", "limit=-1", "after=-1", "nested_depth=99999999999999999999"):
        refused(svc.http.get(f"/v1/stacks/fine/events?{q}"), 400)
    refused(svc.http.get("/v1/stacks/fine/resources?nested_depth=-3"), 400)
    refused(svc.http.get("/v1/stacks/a%00b"), 400)
    healthy(svc)


def test_showing_a_stack_may_wait_for_its_operation_to_end(svc):
    slow = bundle("heat_template_version: 2018-08-31\nresources:\n"
                  "  r: {type: OS::Heat::TestResource, properties: {value: v, action_wait_secs: {create: 1.5}}}\n")
    assert svc.http.post("/v1/stacks", json={"name": "slow", "bundle": slow}).status_code == 201
    assert svc.http.get("/v1/stacks/slow").json()["stack_status"] == "CREATE_IN_PROGRESS"
    # A long poll: answered when the create ends (well within its 10 s), with the end's status.
    assert svc.http.get("/v1/stacks/slow", params={"wait": 10}).json()["stack_status"] == "CREATE_COMPLETE"
    for bad in ("-1", "10.5", "soon"):
        refused(svc.http.get("/v1/stacks/slow", params={"wait": bad}), 400)
    refused(svc.http.get("/v1/stacks/nothing", params={"wait": 1}), 404)
    assert svc.http.delete("/v1/stacks/slow").status_code == 200
    healthy(svc)


def test_a_body_over_its_routes_limit_is_413_before_it_is_read(svc):
    big = {"name": "x", "vcpus": 1, "ram": 1, "disk": 1, "properties": {"k": "v" * 70_000}}
    err = refused(svc.http.post("/v1/flavors", json=big), 413)
    assert "UNDERCLOUD_MAX_BODY_BYTES" in err
    # the same size is fine where the route allows more: a stack body (refused for its template, not its size)
    r = svc.http.post("/v1/stacks", json={"name": "big", "bundle": bundle(TEMPLATE + "#" + "x" * 70_000 + "\n"),
                                          "parameters": {"p": "v"}})
    assert r.status_code != 413, r.text[:200]
    svc.http.delete("/v1/stacks/big")
    # a body streamed without Content-Length is cut at the limit too
    def chunks():
        for _ in range(40):
            yield b"x" * 4096
    refused(svc.http.post("/v1/flavors", content=chunks(), headers={"Content-Type": "application/json"}), 413)
    # image content: streamed, bounded by its own limit (1 MiB here)
    sha = "0" * 64
    refused(svc.http.put(f"/v1/images/blobs/{sha}?size={2 << 20}", content=b"x"), 400)
    r = svc.http.put(f"/v1/images/blobs/{sha}?size=1000", content=(b"y" * 65536 for _ in range(20)))
    refused(r, (400, 413))
    healthy(svc)


def test_json_that_is_not_json_or_nests_too_deep(svc):
    refused(raw_post(svc, "/v1/flavors", "{not json"), 400)
    r = svc.http.post("/v1/flavors", content=b"\xff\xfe{}", headers={"Content-Type": "application/json"})
    refused(r, 400)
    err = refused(raw_post(svc, "/v1/stacks", "[" * 50 + "]" * 50), 400)
    assert "UNDERCLOUD_MAX_JSON_DEPTH" in err
    refused(raw_post(svc, "/v1/stacks", "[" * 60_000 + "]" * 60_000), (400, 413))
    healthy(svc)


# ---- flavors -----------------------------------------------------------------------------
@pytest.mark.parametrize("body", [
    {"name": "a/b", "vcpus": 1, "ram": 512, "disk": 1},
    {"name": "a b", "vcpus": 1, "ram": 512, "disk": 1},
    {"name": "a\x00b", "vcpus": 1, "ram": 512, "disk": 1},
    {"name": "x" * 100_000, "vcpus": 1, "ram": 512, "disk": 1},
    {"name": "", "vcpus": 1, "ram": 512, "disk": 1},
    {"name": "huge", "vcpus": 10**30, "ram": 512, "disk": 1},
    {"name": "huge", "vcpus": 1, "ram": 2**63, "disk": 1},
    {"name": "huge", "vcpus": 1, "ram": 512, "disk": -1},
    {"name": "huge", "vcpus": "many", "ram": 512, "disk": 1},
    {"name": "props", "vcpus": 1, "ram": 512, "disk": 1, "properties": {"k": 5}},
    {"name": 7, "vcpus": 1, "ram": 512, "disk": 1},
])
def test_bad_flavors_are_refused_in_one_line(svc, body):
    refused(svc.http.post("/v1/flavors", json=body), (400, 413))
    names = {f["name"] for f in svc.http.get("/v1/flavors").json()}
    assert not names - {"baremetal", "control", "compute", "container", "vm", "vm-control"}
    healthy(svc)


def test_a_good_flavor_still_works(svc):
    r = svc.http.post("/v1/flavors", json={"name": "ok.flavor-1_a", "vcpus": 2, "ram": 1024, "disk": 5})
    assert r.status_code == 201, r.text
    assert svc.http.get("/v1/flavors/ok.flavor-1_a").json()["vcpus"] == 2
    assert svc.http.delete("/v1/flavors/ok.flavor-1_a").status_code == 200


# ---- images ------------------------------------------------------------------------------
@pytest.mark.parametrize("body", [
    {"name": 5, "disk_format": "qcow2", "sha256": "0" * 64},
    {"name": "img", "disk_format": [], "sha256": "0" * 64},
    {"name": "img", "disk_format": "qcow2", "sha256": {"a": 1}},
    {"name": "img", "disk_format": "qcow2", "sha256": "0" * 64, "properties": []},
    {"name": "a/b", "disk_format": "qcow2", "sha256": "0" * 64},
    {"name": "x" * 100_000, "disk_format": "qcow2", "sha256": "0" * 64},
    {"images": "x"},
    {"images": [{"name": "img"}]},
    {"images": [], "replace": "sometimes"},
    {"nonsense": True},
])
def test_bad_image_registrations(svc, body):
    refused(svc.http.post("/v1/images", json=body), (400, 404, 413))
    assert svc.http.get("/v1/images").json() == []
    healthy(svc)


# ---- nodes -------------------------------------------------------------------------------
def node(name: str, **extra) -> dict:
    return {"name": name, "pm_type": "fake", "pm_addr": f"addr-{name}", "pm_user": "admin",
            "pm_password": "pw-secret-1", **extra}


@pytest.mark.parametrize("entry", [
    {**node("rf"), "pm_type": "redfish", "pm_addr": "http://[::1"},
    {**node("rf2"), "pm_type": "redfish", "pm_addr": "http://host:99999999"},
    {**node("ipmi"), "pm_type": "ipmi", "pm_port": "nine"},
    node("a/b"),
    node("x" * 100_000),
    node("nul\x00"),
    {**node("uuid"), "uuid": "not-a-uuid"},
    {**node("long"), "pm_addr": "h" * 5000},
])
def test_bad_node_imports_name_the_problem_and_import_nothing(svc, entry):
    content = json.dumps({"nodes": [node("good-0"), entry]})
    r = svc.http.post("/v1/nodes/import", json={"content": content, "filename": "env.json"})
    assert r.status_code in (400, 413), r.text[:300]
    body = r.json()
    assert "Traceback" not in body["error"] and "pw-secret-1" not in body["error"]
    assert body["error"].count("\n") <= 2  # the problem line and the count ("nothing was imported")
    assert svc.http.get("/v1/nodes").json() == []
    healthy(svc)


def test_bad_node_requests(svc):
    r = svc.http.post("/v1/nodes/import", json={"content": json.dumps({"nodes": [node("n-0")]})})
    assert r.status_code == 201, r.text
    refused(svc.http.get("/v1/nodes/n-0/events?limit=99999999999999999999999"), 400)
    refused(svc.http.post("/v1/nodes/n-0/provision", json={"verb": 5}), 400)
    refused(svc.http.post("/v1/nodes/n-0/callback", json={"inventory": {"macs": 5}}), 400)
    refused(svc.http.post("/v1/nodes/n-0/callback", json={"inventory": {"cpus": 10**40}}), 400)
    refused(svc.http.post("/v1/scheduler/claims", json={"instance_uuid": "i", "cpus": "x"}), 400)
    refused(svc.http.post("/v1/scheduler/claims", json={"instance_uuid": "i", "memory_mb": 10**30}), 400)
    refused(svc.http.post("/v1/scheduler/claims", json={"instance_uuid": "i", "what": 1}), 400)
    refused(svc.http.post("/v1/deploy/servers/x/callback", json={"ok": "perhaps"}), 400)
    assert svc.http.delete("/v1/nodes/n-0").status_code == 204
    healthy(svc)


def test_network_boot_answers_only_an_armed_mac(svc):
    """PUBLIC routes a node's firmware calls: nothing is armed here, so every MAC, secret and
    file name, odd or not, gets a 404 and one line."""
    for path in ("/v1/deploy/boot/52:54:00:aa:bb:01", "/v1/deploy/boot/${mac}", "/v1/deploy/boot/" + "a" * 5000,
                 "/v1/deploy/boot/52:54:00:aa:bb:01/secret/vmlinuz", "/v1/deploy/boot/52:54:00:aa:bb:01/s/request",
                 "/v1/deploy/boot/..%2F..%2Fadmin.token/s/initrd", "/v1/deploy/boot/52-54-00-aa-bb-01/s/..%2Fx",
                 "/v1/deploy/boot/x%0Ay%0B%C2%A7"):  # a new line in the MAC stays out of the one line
        refused(svc.bare.get(svc.url + path), 404)
    healthy(svc)


def test_admin_token_odd_values_are_401_not_500(svc):
    refused(svc.bare.get(svc.url + "/v1/flavors", headers={"X-Undercloud-Token": "wrong"}), 401)
    refused(svc.bare.get(svc.url + "/v1/flavors"), 401)
    for token in ("é" * 10, "x" * 5000):
        r = svc.bare.get(svc.url + "/v1/flavors", headers={"X-Undercloud-Token": token.encode("utf-8")})
        refused(r, 401) if r.status_code == 401 else None
        assert r.status_code in (400, 401, 431), r.status_code
    healthy(svc)


def test_the_openapi_document_says_400_not_422(svc):
    doc = svc.http.get("/openapi.json").json()
    codes = {c for item in doc["paths"].values() for op in item.values() for c in op.get("responses", {})}
    assert "422" not in codes and "400" in codes


# ---- internal errors (in-process: a route made to fail) ----------------------------------
def test_an_unexpected_failure_is_internal_error_id_without_values(tmp_path, caplog, monkeypatch):
    from fastapi.testclient import TestClient

    from undercloud.api.app import create_app
    from undercloud.api.context import Context
    from undercloud.config import Home

    ctx = Context(Home(tmp_path / "uc"))
    monkeypatch.setattr(type(ctx.servers.flavors), "list", lambda self: {}["value-" + HIDDEN])
    client = TestClient(create_app(ctx), base_url=HTTPS)
    with caplog.at_level(logging.ERROR, logger="undercloud"):
        r = client.get("/v1/flavors", headers={"X-Undercloud-Token": ctx.admin_token})
    assert r.status_code == 500
    msg = r.json()["error"]
    ident = msg.split()[-1]
    assert msg == f"internal error {ident}" and len(ident) == 8
    logged = caplog.text
    assert ident in logged and "KeyError" in logged and HIDDEN not in logged


def test_limits_are_settable_and_checked():
    assert limits.body_limit("PUT", "/v1/images/blobs/abc")[0] == "image_bytes"
    assert limits.body_limit("POST", "/v1/stacks")[0] == "stack_body_bytes"
    assert limits.body_limit("POST", "/v1/flavors")[0] == "body_bytes"
    with limits.override(body_bytes=10):
        assert limits.body_limit("POST", "/v1/flavors") == ("body_bytes", 10)
    assert limits.Limits({"UNDERCLOUD_MAX_BODY_BYTES": "2_000"}).body_bytes == 2000
    with pytest.raises(Exception, match="UNDERCLOUD_MAX_BODY_BYTES"):
        limits.Limits({"UNDERCLOUD_MAX_BODY_BYTES": "-1"})
