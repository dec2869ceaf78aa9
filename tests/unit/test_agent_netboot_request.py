"""The deploy ramdisk booted from the network: its request comes from the URL on its kernel
command line (agent/ramdisk.request_from_cmdline), served here by a real HTTP server on
loopback."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import free_port
from undercloud.agent.ramdisk import DeployError, boot_mac, cmdline_args, request_from_cmdline


@pytest.fixture
def served():
    """(base URL, {path: body}) of a loopback HTTP server answering 404 to other paths."""
    bodies: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = bodies.get(self.path)
            if body is None:
                self.send_error(404)
                return
            status, length = 200, None
            if isinstance(body, list):  # answers in turn: (status, body, Content-Length announced)
                status, body, length = body.pop(0)
            self.send_response(status)
            self.send_header("Content-Length", str(length or len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

        def log_message(self, *_args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", bodies
    server.shutdown()
    server.server_close()


def test_the_request_and_its_config_drive_come_from_the_command_lines_url(served):
    url, bodies = served
    drive = b"\x00CD001 config drive bytes"
    req = {"server_id": "s1", "url": "http://192.168.30.1:8080", "token": "t",
           "image": {"id": "i", "size": 3, "checksum": "x"}, "config_drive": base64.b64encode(drive).decode()}
    bodies["/v1/boot/secret/deploy.json"] = json.dumps(req).encode()
    got = request_from_cmdline(f"BOOT_IMAGE=vmlinuz quiet undercloud.request={url}/v1/boot/secret/deploy.json "
                               "BOOTIF=52:54:00:aa:bb:cc", attempts=1)
    assert got is not None
    want = dict(req)
    del want["config_drive"]
    assert got == (want, drive)

    bodies["/nodrive"] = json.dumps({"server_id": "s2"}).encode()
    assert request_from_cmdline(f"undercloud.request={url}/nodrive", attempts=1) == ({"server_id": "s2"}, None)


def test_a_ramdisk_booted_without_a_request_url_gets_none():
    assert request_from_cmdline("BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet") is None


@pytest.mark.parametrize("path, body, says", [
    ("/missing", None, r"refused the deploy request \(HTTP 404\): Not Found"),
    ("/notjson", b"<html>hello</html>", "not a JSON object"),
    ("/list", b"[1, 2]", "not a JSON object"),
    ("/baddrive", json.dumps({"config_drive": "not base64!"}).encode(), "base64 config drive"),
])
def test_a_bad_request_is_one_line_naming_what(served, path, body, says):
    url, bodies = served
    if body is not None:
        bodies[path] = body
    with pytest.raises(DeployError, match=says) as err:
        request_from_cmdline(f"undercloud.request={url}{path}", attempts=1)
    assert "\n" not in str(err.value)


def test_a_refused_request_is_final_and_named_in_one_line(served):
    """The undercloud hands the request out once: its refusal is not retried (a retry could
    only be refused again), and the ramdisk says what the undercloud said."""
    url, bodies = served
    said = "a second request for the boot credentials of node n0 was refused (handed out once): its deploy is failed"
    answers = [(410, json.dumps({"error": said, "where": None}).encode(), None)] * 3
    bodies["/again"] = list(answers)
    with pytest.raises(DeployError) as err:
        request_from_cmdline(f"undercloud.request={url}/again", attempts=3)
    assert str(err.value) == f"the undercloud refused the deploy request (HTTP 410): {said}"
    assert len(bodies["/again"]) == 2   # asked once
    bodies["/elsewhere"] = [(403, b"<html>\nnot json\n</html>", None)]
    with pytest.raises(DeployError, match=r"^the undercloud refused the deploy request \(HTTP 403\): Forbidden$"):
        request_from_cmdline(f"undercloud.request={url}/elsewhere", attempts=3)


def test_an_undercloud_that_does_not_answer_is_named():
    with pytest.raises(DeployError, match=r"^the deploy request could not be fetched \(.*refused"):
        request_from_cmdline(f"undercloud.request=http://127.0.0.1:{free_port()}/r", attempts=1)


def test_a_request_cut_short_is_asked_again_and_its_refusal_ends_the_boot(served):
    """The connection broke after the undercloud answered: the retry is refused (the request
    was handed out), which fails the deploy at once on the undercloud's side."""
    url, bodies = served
    refusal = json.dumps({"error": "a second request for the boot credentials of node n0 was refused"}).encode()
    bodies["/cut"] = [(200, b'{"server_id": "s1", "tok', 5000), (410, refusal, None)]
    with pytest.raises(DeployError, match=r"refused the deploy request \(HTTP 410\): a second request"):
        request_from_cmdline(f"undercloud.request={url}/cut", attempts=5)
    assert bodies["/cut"] == []   # asked twice: the cut one, then the refused one


def test_the_boot_mac_is_read_as_ipxe_and_pxelinux_write_it():
    assert boot_mac(cmdline_args("BOOTIF=52:54:00:AA:bb:01")) == "52:54:00:aa:bb:01"
    assert boot_mac(cmdline_args("BOOTIF=01-52-54-00-aa-bb-01")) == "52:54:00:aa:bb:01"
    assert boot_mac(cmdline_args("BOOTIF=nonsense")) is None
    assert boot_mac(cmdline_args("quiet")) is None
    assert cmdline_args("a=1 b=x=y a=2 flag") == {"a": "2", "b": "x=y"}
