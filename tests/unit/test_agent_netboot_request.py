"""The deploy ramdisk booted from the network: its request comes from the URL on its kernel
command line (agent/deploy.request_from_cmdline), served here by a real HTTP server on
loopback."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from undercloud.agent.deploy import DeployError, boot_mac, cmdline_args, request_from_cmdline


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
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

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
    ("/missing", None, "could not be fetched"),
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


def test_the_boot_mac_is_read_as_ipxe_and_pxelinux_write_it():
    assert boot_mac(cmdline_args("BOOTIF=52:54:00:AA:bb:01")) == "52:54:00:aa:bb:01"
    assert boot_mac(cmdline_args("BOOTIF=01-52-54-00-aa-bb-01")) == "52:54:00:aa:bb:01"
    assert boot_mac(cmdline_args("BOOTIF=nonsense")) is None
    assert boot_mac(cmdline_args("quiet")) is None
    assert cmdline_args("a=1 b=x=y a=2 flag") == {"a": "2", "b": "x=y"}
