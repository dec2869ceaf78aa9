"""uc-http-check, keepalived's check of haproxy (haproxy element), against a server on
loopback: a 2xx answers yes; an error status, a closed port, a hung server and a bad URL
answer no, each with one line saying why."""

from __future__ import annotations

import http.server
import socket
import subprocess
import threading
from pathlib import Path

import pytest

import undercloud

CHECK = Path(undercloud.__file__).parent / "images/elements/haproxy/static/usr/local/bin/uc-http-check"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the standard library's name
        self.send_response(200 if self.path == "/healthz" else 503)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()


def check(url: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(CHECK), url], capture_output=True, text=True, timeout=10)


def test_a_healthy_answer_passes(server):
    r = check(f"http://127.0.0.1:{server}/healthz")
    assert (r.returncode, r.stderr) == (0, "")


def test_an_error_status_fails_naming_it(server):
    r = check(f"http://127.0.0.1:{server}/other")
    assert r.returncode == 1 and r.stderr == f"uc-http-check: http://127.0.0.1:{server}/other: answered '503'\n"


def test_a_closed_port_and_a_bad_url_fail_in_one_line():
    with socket.socket() as s:  # a port just freed: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = check(f"http://127.0.0.1:{port}/healthz")
    assert r.returncode == 1 and r.stderr == f"uc-http-check: http://127.0.0.1:{port}/healthz: cannot connect\n"
    r = check("https://127.0.0.1/healthz")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "not an http://HOST:PORT/PATH URL" in r.stderr


def test_a_server_that_accepts_but_never_answers_fails_after_two_seconds():
    with socket.socket() as s:  # listening, never reading: a hung haproxy
        s.bind(("127.0.0.1", 0))
        s.listen()
        r = check(f"http://127.0.0.1:{s.getsockname()[1]}/healthz")
    assert r.returncode == 1 and "no answer within 2 s" in r.stderr
