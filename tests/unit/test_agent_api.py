"""The node-facing API and the metadata service: auth, ETag/304, HEAD + Last-Modified,
long-poll, signals, Heat's document shape, and state that survives a restart."""

from __future__ import annotations

import email.utils
import json
import threading

import pytest
from fastapi.testclient import TestClient

from tests.conftest import HTTPS
from tests.unit.agent_support import deployment
from undercloud.api.app import create_app
from undercloud.api.context import Context
from undercloud.config import Home
from undercloud.store.agent import AgentServer


@pytest.fixture
def ctx(tmp_path):
    return Context(Home(tmp_path / "uc"))


@pytest.fixture
def client(ctx):
    return TestClient(create_app(ctx), base_url=HTTPS)


def md(client, sid, token, **headers):
    return client.get(f"/v1/agent/servers/{sid}/metadata", headers={"X-Server-Token": token, **headers})


def test_document_in_heat_shape_sorted_by_name(ctx, client):
    meta = ctx.server_metadata
    tok = meta.register("s1", "n1")
    meta.set_extra("s1", {"os-collect-config": {"x": 1}, "deployments": "ignored"})
    meta.put_deployment("s1", deployment("b-id", "20_second", "script", "b"))
    meta.put_deployment("s1", deployment("a-id", "10_first", "script", "a"))
    r = md(client, "s1", tok)
    assert r.status_code == 200
    doc = r.json()
    assert [d["name"] for d in doc["deployments"]] == ["10_first", "20_second"]
    assert doc["os-collect-config"] == {"x": 1}
    assert set(doc["deployments"][0]) == {"id", "name", "group", "config", "inputs", "outputs", "options"}


def test_etag_304_and_head_last_modified(ctx, client):
    meta = ctx.server_metadata
    tok = meta.register("s1", "n1")
    r1 = md(client, "s1", tok)
    etag, lm = r1.headers["etag"], r1.headers["last-modified"]
    assert md(client, "s1", tok, **{"If-None-Match": etag}).status_code == 304
    h = client.head(f"/v1/agent/servers/s1/metadata?token={tok}")
    assert h.status_code == 200 and h.headers["etag"] == etag and h.content == b""
    meta.put_deployment("s1", deployment("d1", "x", "script", ""))
    r2 = md(client, "s1", tok, **{"If-None-Match": etag})
    assert r2.status_code == 200 and r2.headers["etag"] != etag
    # Last-Modified (1 s resolution, what os-collect-config compares) strictly increases.
    assert email.utils.parsedate_to_datetime(r2.headers["last-modified"]) > email.utils.parsedate_to_datetime(lm)


def test_tokens_are_scoped_and_stored_hashed(ctx, client):
    meta = ctx.server_metadata
    t1, t2 = meta.register("s1", "n1"), meta.register("s2", "n2")
    meta.put_deployment("s1", deployment("d1", "x", "script", ""))
    assert md(client, "s1", t2).status_code == 401
    assert md(client, "s1", "").status_code == 401
    assert md(client, "nope", t1).json()["error"] == md(client, "s1", t2).json()["error"]  # no oracle
    r = client.post("/v1/agent/servers/s2/deployments/d1/signal", headers={"X-Server-Token": t2}, json={})
    assert r.status_code == 404
    with ctx.store.session() as s:
        rows = {r.id: r.token_hash for r in s.query(AgentServer)}
    assert t1 not in json.dumps(rows) and len(rows["s1"]) == 64
    # Rotating the token locks the old one out.
    t1b = meta.register("s1")
    assert md(client, "s1", t1).status_code == 401
    assert md(client, "s1", t1b).status_code == 200


def test_signal_validation(ctx, client):
    meta = ctx.server_metadata
    tok = meta.register("s1", "n1")
    meta.put_deployment("s1", deployment("d1", "x", "script", ""))
    url = "/v1/agent/servers/s1/deployments/d1/signal"
    h = {"X-Server-Token": tok}
    r = client.post(url, headers=h, content=b"not json")
    assert r.status_code == 400 and "not JSON" in r.json()["error"]
    assert client.post(url, headers=h, json=[1]).status_code == 400
    big = client.post(url, headers=h, content=b"{" + b" " * (9 * 1024 * 1024) + b"}")
    assert big.status_code == 413
    assert meta.signal_of("d1") is None
    r = client.post(url, headers=h, json={"deploy_status_code": 0})
    assert r.json() == {"acknowledged": True, "deployment": "d1"}
    assert client.post(url, headers=h, json={"deploy_status_code": 0}).status_code == 200  # idempotent
    assert client.get(f"/v1/agent/servers/s1/metadata?wait=soon&token={tok}",
                      headers={"If-None-Match": md(client, "s1", tok).headers["etag"]}).status_code == 400


def test_long_poll_wakes_on_change(ctx, client):
    meta = ctx.server_metadata
    tok = meta.register("s1", "n1")
    etag = md(client, "s1", tok).headers["etag"]
    threading.Timer(0.3, lambda: meta.set_extra("s1", {"k": "v"})).start()
    r = client.get("/v1/agent/servers/s1/metadata?wait=30", headers={"X-Server-Token": tok, "If-None-Match": etag})
    assert r.status_code == 200 and r.json()["k"] == "v"
    # Nothing changes: the long-poll ends with 304 after the wait.
    r = client.get("/v1/agent/servers/s1/metadata?wait=0.2",
                   headers={"X-Server-Token": tok, "If-None-Match": r.headers["etag"]})
    assert r.status_code == 304


def test_state_survives_a_restart(tmp_path):
    ctx1 = Context(Home(tmp_path / "uc"))
    meta = ctx1.server_metadata
    tok = meta.register("s1", "n1")
    meta.put_deployment("s1", deployment("d1", "x", "script", "echo"), owner="res-1")
    meta.record_signal("s1", "d1", {"deploy_status_code": 0})
    etag = TestClient(create_app(ctx1), base_url=HTTPS).get("/v1/agent/servers/s1/metadata",
                                           headers={"X-Server-Token": tok}).headers["etag"]
    ctx1.store.engine.dispose()

    ctx2 = Context(Home(tmp_path / "uc"))  # a new process: cache rebuilt from the store
    c2 = TestClient(create_app(ctx2), base_url=HTTPS)
    assert md(c2, "s1", tok, **{"If-None-Match": etag}).status_code == 304  # same document, same ETag
    assert ctx2.server_metadata.signal_of("d1") == {"deploy_status_code": 0}
    # A new revision from the same owner replaces the old one in one change.
    ctx2.server_metadata.put_deployment("s1", deployment("d2", "x", "script", "echo 2"), owner="res-1")
    assert [d["id"] for d in md(c2, "s1", tok).json()["deployments"]] == ["d2"]
    ctx2.server_metadata.remove_owner("res-1")
    assert md(c2, "s1", tok).json()["deployments"] == []
    ctx2.server_metadata.forget("s1")
    assert md(c2, "s1", tok).status_code == 401


def test_admin_routes_need_the_admin_token(ctx, client):
    ctx.server_metadata.register("s1", "n1")
    assert client.get("/v1/agent/servers").status_code == 401
    r = client.get("/v1/agent/servers", headers={"X-Undercloud-Token": ctx.admin_token})
    assert [s["name"] for s in r.json()] == ["n1"]
    r = client.post("/v1/agent/servers/n1/credentials", headers={"X-Undercloud-Token": ctx.admin_token})
    assert r.json()["server_id"] == "s1" and r.json()["token"]


def test_get_input_substitution_as_heat():
    from undercloud.orchestration.resources.base import ResourceFailure
    from undercloud.orchestration.resources.software_deployment import parse_inputs
    cfg = {"a": {"get_input": "x"}, "l": [{"get_input": "y"}, "plain"], "two": {"get_input": "x", "k": 1},
           "other": {"get_param": "x"}, "nested": {"deep": {"get_input": "missing"}}}
    assert parse_inputs(cfg, {"x": 1, "y": [2]}) == {
        "a": 1, "l": [[2], "plain"], "two": {"get_input": "x", "k": 1},  # only a one-key map is a call
        "other": {"get_param": "x"}, "nested": {"deep": None}}  # LAX: a missing input is null
    assert parse_inputs({"v": {"my_in": "x"}}, {"x": "X"}, input_key="my_in") == {"v": "X"}
    with pytest.raises(ResourceFailure, match="'missing' is needed by the config"):
        parse_inputs(cfg, {"x": 1, "y": 2}, strict=True)


def test_kube_pods_are_what_the_servers_kube_deployments_declare(ctx):
    """What a container node's podman proxy lets its agent create: the Pods of the server's
    `kube` deployments, with their image overrides applied; other groups, other servers and
    configs the agent would refuse declare nothing; the stored documents are not changed."""
    meta = ctx.server_metadata
    meta.register("s1", "n1")
    meta.register("s2", "n2")
    web = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
           "spec": {"containers": [{"name": "c", "image": "img:1"}]}}
    db = {**web, "metadata": {"name": "db"}}
    meta.put_deployment("s1", deployment("k1", "step1", "kube", {"kind": "List", "items": [
        {"kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}}, web]}, options={"image_overrides": {"img:1": "img:2"}}))
    meta.put_deployment("s1", deployment("k2", "step2", "kube", json.dumps(db)))
    meta.put_deployment("s1", deployment("k3", "step3", "kube", {"kind": "Pod", "metadata": {}}))  # no name: refused
    meta.put_deployment("s1", deployment("sc", "script", "script", "echo"))
    meta.put_deployment("s2", deployment("k4", "other", "kube", {**web, "metadata": {"name": "theirs"}}))
    pods = sorted(meta.kube_pods("s1"), key=lambda p: p["metadata"]["name"])
    assert [(p["metadata"]["name"], p["spec"]["containers"][0]["image"]) for p in pods] == [("db", "img:1"),
                                                                                            ("web", "img:2")]
    assert [p["metadata"]["name"] for p in meta.kube_pods("s2")] == ["theirs"]
    assert meta.kube_pods("nobody") == []
    meta.kube_pods("s1")
    assert b"img:2" in meta._get("s1").doc and b'"image": "img:1"' in meta._get("s1").doc  # as published
