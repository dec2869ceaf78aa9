"""Lab addresses for VM and bare-metal servers, and the API relay into a network namespace
(vm_net.py). Fast; the relay test needs root (setns), and uses a namespace it makes."""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import own_store_url
from undercloud.config import Home
from undercloud.provisioning.servers.base import RealiserError
from undercloud.provisioning.servers.vm_net import GUEST_RELAY, Addresses, serve_api, server_mac
from undercloud.store import Store
from undercloud.store.addresses import AddressTable


@pytest.fixture
def addrs(tmp_path):
    store = Store(own_store_url(tmp_path / "uc.db"), tmp_path / "store.key").create_schema()
    return Addresses(Home(tmp_path / "uc"), "192.168.77.1", AddressTable(store))


def test_addresses_are_stable_per_server_unique_and_released(addrs):
    a = addrs.take("s1")
    assert a == "192.168.77.100" and addrs.take("s1") == a  # the same again for a repeated create
    with ThreadPoolExecutor(8) as pool:  # concurrent creates never share an address
        got = list(pool.map(addrs.take, [f"p{i}" for i in range(40)]))
    assert len(set(got) | {a}) == 41
    assert addrs.release("s1") == [a] and addrs.release("s1") == []
    assert addrs.take("s2") == a  # freed addresses are handed out again


def test_fixed_ips_are_checked_and_held(addrs):
    assert addrs.take("s1", "192.168.77.10") == "192.168.77.10"
    with pytest.raises(RealiserError, match=r"fixed_ip 192.168.77.10 is held by server s1"):
        addrs.take("s2", "192.168.77.10")
    for bad, why in (("192.168.77.1", "the undercloud"), ("10.0.0.5", "192.168.77.0/24"),
                     ("192.168.77.255", "not a free host address")):
        with pytest.raises(RealiserError, match=why):
            addrs.take("s3", bad)
    with pytest.raises(RealiserError, match="is not an IP address"):
        addrs.take("s3", "nope")
    assert addrs.held() == {"192.168.77.10": "s1"}  # refused requests took nothing


def test_the_range_runs_out_with_a_clear_error(addrs):
    for i in range(150):
        addrs.take(f"s{i}")
    with pytest.raises(RealiserError, match=r"no free address left on ctlplane \(150 in use\)"):
        addrs.take("one-more")


def test_macs_are_stable_per_server_in_openstacks_range():
    assert server_mac("a") == server_mac("a") != server_mac("b")
    assert server_mac("a").startswith("fa:16:3e:")


def test_the_api_is_relayed_into_a_network_namespace(tmp_path):
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 (a network namespace)")

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"hello from {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_a):
            pass

    api = http.server.ThreadingHTTPServer((GUEST_RELAY, 0), H)  # the relay leads to the guests' listener
    threading.Thread(target=api.serve_forever, daemon=True).start()
    port = api.server_address[1]
    name = f"uctest-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        ns = f"/run/netns/{name}"
        subprocess.run(["nsenter", f"--net={ns}", "ip", "link", "set", "lo", "up"], check=True)
        serve_api(ns, "127.0.0.1", port)  # loopback of the namespace: nothing else there
        serve_api(ns, "127.0.0.1", port)  # idempotent
        out = subprocess.run(["nsenter", f"--net={ns}", "python3", "-c",
                              f"import urllib.request;print(urllib.request.urlopen("
                              f"'http://127.0.0.1:{port}/v1/x',timeout=10).read().decode())"],
                             capture_output=True, text=True, timeout=60)
        assert out.stdout.strip() == "hello from /v1/x", out.stderr
        # The host's own loopback still serves the API directly; the relay is only in the namespace.
        assert urllib.request.urlopen(f"http://{GUEST_RELAY}:{port}/h", timeout=5).read() == b"hello from /h"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        api.shutdown()
