"""The deploy ends when every API answers through the virtual IP (real HTTP on loopback)."""

from __future__ import annotations

import http.server
import threading

import pytest

from tests.conftest import free_port
from undercloud.overcloud.deploy import _endpoint_answer, wait_for_endpoints


@pytest.fixture
def api():
    """An API behind a 'haproxy' that answers 503 to the first `down` requests, then `status`."""
    state = {"down": 0, "status": 200, "seen": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            state["seen"] += 1
            code = 503 if state["seen"] <= state["down"] else state["status"]
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", state
    server.shutdown()


def test_an_api_that_answers_401_or_300_counts_as_up(api):
    url, state = api
    for code in (200, 300, 401, 404):
        state["status"] = code
        assert _endpoint_answer(url) is None
    state["status"] = 502
    assert _endpoint_answer(url) == "HTTP 502"


def test_waits_for_a_backend_haproxy_has_not_taken_back_yet(api):
    url, state = api
    state["down"] = 2  # two checks see 503, the third the API
    assert wait_for_endpoints({"glance": url + "/v2"}, timeout=30) == {}
    assert state["seen"] == 3


def test_names_what_does_not_answer_after_the_timeout(api):
    url, state = api
    state["down"] = 10**6
    failing = wait_for_endpoints({"glance": url, "nova": f"http://127.0.0.1:{free_port()}/v2.1",
                                  "keystone": url.replace("127.0.0.1", "localhost")}, timeout=1.5)
    assert failing["glance"] == "HTTP 503"
    assert "refused" in failing["nova"].lower()
    assert failing.keys() == {"glance", "nova", "keystone"}


def test_no_endpoints_is_nothing_to_wait_for():
    assert wait_for_endpoints({}, timeout=0) == {}
