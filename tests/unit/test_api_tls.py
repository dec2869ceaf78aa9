"""The API over TLS (issue 46): one port answers TLS with a certificate of the undercloud's
CA and plain HTTP (api/tls_port.py); the CLI and the agents verify it against that CA alone.

A real service (uvicorn in a thread, the service's own protocol), the real agent transport
and runner, the real client connection of the CLI.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time

import pytest

from tests.unit.agent_support import LiveService, settings
from undercloud import daemon, tls
from undercloud.agent.logs import Log
from undercloud.agent.runner import Agent
from undercloud.agent.transport import Undercloud, Unreachable
from undercloud.config import connection


@pytest.fixture
def svc(tmp_path):
    s = LiveService(tmp_path / "uc").start()
    yield s
    s.stop()


def other_ca(tmp_path) -> str:
    cert, _ = tls.ensure_ca(tmp_path / "other-ca")
    return cert.read_text()


def https_get(port: int, path: str, context: ssl.SSLContext, host: str = "127.0.0.1") -> tuple[int, bytes]:
    """GET over TLS from loopback, the certificate checked for `host` (the name a node dials)."""
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname=host) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_one_port_answers_tls_verified_by_the_homes_ca_and_plain_http(svc):
    ca = svc.home.ca_file
    assert ca.exists() and (svc.home.tls_dir / "ca.key").stat().st_mode & 0o077 == 0
    status, body = https_get(svc.port, "/v1/health", ssl.create_default_context(cafile=str(ca)))
    assert status == 200 and json.loads(body)["status"] == "ok"
    plain = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=10)
    plain.request("GET", "/v1/health")
    assert plain.getresponse().status == 200
    plain.close()
    # the CLI's connection: the home's CA, https
    conn = connection(daemon.url(svc.home), ca, 10)
    conn.request("GET", "/v1/health")
    assert conn.getresponse().status == 200 and daemon.url(svc.home).startswith("https://")
    conn.close()


def test_a_client_trusting_another_ca_or_the_systems_is_refused(svc, tmp_path):
    for context in (ssl.create_default_context(cadata=other_ca(tmp_path)), ssl.create_default_context()):
        with pytest.raises(ssl.SSLCertVerificationError):
            https_get(svc.port, "/v1/health", context)


def test_a_name_given_to_nodes_is_covered_from_the_next_handshake(svc):
    context = ssl.create_default_context(cafile=str(svc.home.ca_file))
    with pytest.raises(ssl.SSLCertVerificationError, match="node-net.example"):
        https_get(svc.port, "/v1/health", context, host="node-net.example")
    before = (svc.home.tls_dir / tls.SERVICE_CERT).read_bytes()
    svc.ctx.tls.serve_name("node-net.example")  # a realiser hands nodes this name (Env.agent_url)
    assert https_get(svc.port, "/v1/health", context, host="node-net.example")[0] == 200
    assert https_get(svc.port, "/v1/health", context)[0] == 200  # the names it had stay covered
    assert (svc.home.tls_dir / tls.SERVICE_CERT).read_bytes() != before
    svc.ctx.tls.serve_name("node-net.example")  # known already: not issued again
    assert https_get(svc.port, "/v1/health", context, host="node-net.example")[0] == 200


def test_an_agent_given_the_ca_fetches_and_signals_and_one_with_a_wrong_ca_gets_nothing(svc, tmp_path):
    token = svc.meta.register("s1", "n1")
    config = svc.meta.agent_config("s1", token)
    assert config["url"].startswith("https://") and config["ca"] == svc.home.ca_file.read_text()
    url = f"https://127.0.0.1:{svc.port}"
    got = Undercloud(url, "s1", token, ca=config["ca"]).fetch(None)
    assert got.changed and got.metadata is not None
    for wrong in (other_ca(tmp_path), ""):  # another CA, or none (the system's trust)
        with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
            Undercloud(url, "s1", token, ca=wrong).fetch(None)
    # The whole agent: its first round over TLS, and the CA kept for its hooks.
    agent = Agent(settings(tmp_path / "node", url, "s1", token, ca=config["ca"]), Log())
    metadata, changed = agent.collect()
    assert changed and metadata is not None
    assert agent.ca_file.read_text() == config["ca"]
    assert agent.hook_env()["UNDERCLOUD_CA_FILE"] == str(agent.ca_file)


def test_a_client_idling_on_a_kept_alive_tls_connection_does_not_hold_the_stop(tmp_path):
    svc = LiveService(tmp_path / "uc").start()
    sock = ssl.create_default_context(cafile=str(svc.home.ca_file)).wrap_socket(
        socket.create_connection(("127.0.0.1", svc.port), timeout=10), server_hostname="127.0.0.1")
    sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert sock.recv(100).startswith(b"HTTP/1.1 200")  # then idle, never answering close_notify
    t0 = time.monotonic()
    svc.stop()
    assert time.monotonic() - t0 < 10  # asyncio alone would wait 30 s for the client's close_notify
    sock.close()


def test_the_ramdisk_calls_back_over_tls_with_the_requests_ca_and_not_with_another(svc, tmp_path, capsys,
                                                                                 monkeypatch):
    """The deploy ramdisk's call-back (agent/ramdisk.py): verified against the CA its request
    carries; this service knows no such deploy, so the answer is a refusal (a 4xx), which
    shows the TLS connection was made; with another CA it never reaches the service."""
    from undercloud.agent import ramdisk

    monkeypatch.delenv("UNDERCLOUD_CA_FILE", raising=False)
    monkeypatch.setattr(ramdisk.time, "sleep", lambda s: None)
    url = f"https://127.0.0.1:{svc.port}"
    req = {"url": url, "server_id": "s-none", "token": "t", "ca": svc.home.ca_file.read_text()}
    ramdisk.trust(req, tmp_path / "ca.pem")
    ramdisk.call_back(req, True, attempts=1)
    assert "the undercloud refused the call-back (HTTP 4" in capsys.readouterr().out
    ramdisk.trust({**req, "ca": other_ca(tmp_path)}, tmp_path / "other.pem")
    ramdisk.call_back(req, True, attempts=1)
    out = capsys.readouterr().out
    assert "CERTIFICATE_VERIFY_FAILED" in out and "giving up" in out


def test_a_running_service_renews_its_certificate_within_30_days_of_its_end(svc):
    import datetime

    first = svc.ctx.tls.expires
    assert svc.ctx.tls.renew() is False and svc.ctx.tls.expires == first  # far from its end: kept
    ends = datetime.datetime.fromisoformat(first)
    assert svc.ctx.tls.renew(now=ends - datetime.timedelta(days=29)) is True  # the daily check, 29 days before
    assert svc.ctx.tls.expires > first
    assert svc.ctx.tls.renew(now=ends - datetime.timedelta(days=29)) is False  # once


def test_plain_http_is_closed_to_an_agent_given_the_ca_and_open_to_one_configured_before(svc, monkeypatch):
    """A token made for an agent given the https URL and the CA is refused over plain HTTP
    (426, header or ?token=, before any route runs); over TLS it works. A server registered
    while agents were told http:// (an agent configured before TLS, or UNDERCLOUD_AGENT_URL
    http) keeps plain HTTP."""
    from undercloud import tokens

    token = svc.meta.register("s1", "n1")
    assert token.startswith(tokens.TLS_SERVER)

    def plain(path: str, headers: dict | None = None) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=10)
        try:
            conn.request("GET", path, headers=headers or {})
            r = conn.getresponse()
            return r.status, json.loads(r.read() or b"{}")
        finally:
            conn.close()

    for path, headers in (("/v1/agent/servers/s1/metadata", {"X-Server-Token": token}),
                          (f"/v1/agent/servers/s1/metadata?token={token}", {})):
        status, body = plain(path, headers)
        assert status == 426 and "its token is taken over https only" in json.dumps(body), (status, body)
    ca = svc.home.ca_file.read_text()
    assert Undercloud(f"https://127.0.0.1:{svc.port}", "s1", token, ca=ca).fetch(None).metadata is not None
    monkeypatch.setattr(svc.meta, "_url", lambda: f"http://127.0.0.1:{svc.port}")
    old = svc.meta.register("s2", "n2")
    assert not old.startswith(tokens.TLS_SERVER)
    assert plain("/v1/agent/servers/s2/metadata", {"X-Server-Token": old})[0] == 200
    assert plain("/v1/agent/servers/s2/metadata", {"X-Server-Token": "tls-forged"})[0] == 426  # never reaches auth


def test_the_workers_token_is_refused_over_plain_http_by_a_worker_whose_url_is_https(svc, monkeypatch):
    """A worker forwards to another at the URL that one gives (https by default): the
    workers' token sent in the clear is refused there (426, before any route runs); over TLS
    it works. A worker given an http URL (UNDERCLOUD_AGENT_URL, or one of an older version)
    still takes it over plain HTTP."""
    import httpx

    headers = {"X-Undercloud-Worker-Token": svc.ctx.worker_token}
    assert svc.ctx.agent_url.startswith("https://")
    r = httpx.get(f"http://127.0.0.1:{svc.port}/v1/stacks", headers=headers, timeout=10)
    assert r.status_code == 426 and "the workers' token is taken over https only" in r.text, r.text
    assert svc.ctx.worker_token not in r.text
    ok = httpx.get(f"https://127.0.0.1:{svc.port}/v1/stacks", headers=headers, timeout=10,
                   verify=str(svc.home.ca_file))
    assert ok.status_code == 200, ok.text
    monkeypatch.setenv("UNDERCLOUD_AGENT_URL", f"http://127.0.0.1:{svc.port}")
    assert httpx.get(f"http://127.0.0.1:{svc.port}/v1/stacks", headers=headers, timeout=10).status_code == 200
    # a wrong worker token over plain HTTP to it: 401 as ever
    assert httpx.get(f"http://127.0.0.1:{svc.port}/v1/stacks", headers={"X-Undercloud-Worker-Token": "x"},
                     timeout=10).status_code == 401
