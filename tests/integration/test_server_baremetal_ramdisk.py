"""The deploy ramdisk's own logic (undercloud/agent/ramdisk.py) and the first boot's
(undercloud/agent/first_boot.py), run here on the host: root device hints, the resumable,
verified download, the config drive partition, the call-back; the config drive read back.

No VM needed (the whole path under TCG is in test_server_baremetal.py); the download and
call-back talk to a real HTTP server on loopback, the disk is a sparse file.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from undercloud.agent import first_boot, ramdisk

GIB = 1024 ** 3


def dev(name: str, gib: int, **kw) -> dict:
    return {"name": name, "size": gib * GIB, "model": kw.get("model", ""), "vendor": kw.get("vendor", ""),
            "serial": kw.get("serial", ""), "wwn": kw.get("wwn", ""), "rotational": kw.get("rotational", False)}


DISKS = [dev("/dev/vda", 2), dev("/dev/vdb", 100, serial="S-BIG", rotational=True), dev("/dev/sda", 20, model="QEMU HDD")]


def test_root_device_without_hints_is_the_smallest_disk_of_at_least_4_gib():
    assert ramdisk.pick_root_device({}, DISKS)["name"] == "/dev/sda"


@pytest.mark.parametrize("hints,want", [
    ({"serial": "s-big"}, "/dev/vdb"),            # case-insensitive, like Ironic
    ({"size": 100}, "/dev/vdb"),
    ({"size": ">= 10"}, "/dev/sda"),              # the smallest that matches
    ({"size": "< 10"}, "/dev/vda"),               # hints may pick a small disk on purpose
    ({"model": "QEMU HDD", "rotational": False}, "/dev/sda"),
    ({"name": "vdb"}, "/dev/vdb"),
    ({"rotational": "true"}, "/dev/vdb"),
])
def test_root_device_hints(hints, want):
    assert ramdisk.pick_root_device(hints, DISKS)["name"] == want


def test_root_device_hints_that_match_nothing_name_the_disks():
    with pytest.raises(ramdisk.DeployError) as e:
        ramdisk.pick_root_device({"serial": "nope"}, DISKS)
    assert str(e.value) == ('no disk matching root_device hints {"serial": "nope"} '
                            '(disks: /dev/vda 2 GiB; /dev/vdb 100 GiB; /dev/sda 20 GiB)')
    with pytest.raises(ramdisk.DeployError, match="unsupported hint.*hctl"):
        ramdisk.pick_root_device({"hctl": "0:0:0:0"}, DISKS)
    with pytest.raises(ramdisk.DeployError, match=r"size: cannot read 'big'"):
        ramdisk.pick_root_device({"size": "big"}, DISKS)


class _Server:
    """Serves `data` with Range support; can cut the first response short, corrupt it,
    and records call-backs."""

    def __init__(self, data: bytes, cut_at: int | None = None, corrupt: bool = False, status: int = 202):
        self.data, self.cut_at, self.corrupt, self.status = data, cut_at, corrupt, status
        self.ranges: list[str | None] = []
        self.paths: list[str] = []
        self.calls: list[tuple[str, str | None, dict]] = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.paths.append(self.path)
                if not self.path.endswith("/file"):
                    self.send_error(404)
                    return
                rng = self.headers.get("Range")
                outer.ranges.append(rng)
                start = int(re.match(r"bytes=(\d+)-", rng).group(1)) if rng else 0
                body = outer.data[start:]
                if outer.corrupt:
                    body = bytes([body[0] ^ 1]) + body[1:]
                self.send_response(206 if rng else 200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if outer.cut_at is not None and len(outer.ranges) == 1:
                    self.wfile.write(body[:outer.cut_at])  # then the connection drops
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                self.wfile.write(body)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.calls.append((self.path, self.headers.get("X-Deploy-Token"), body))
                self.send_response(outer.status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *_a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


DATA = bytes(range(256)) * 8192  # 2 MiB
SHA = hashlib.sha256(DATA).hexdigest()


def test_download_resumes_with_range_and_verifies_the_checksum(tmp_path, monkeypatch):
    monkeypatch.setattr(ramdisk.time, "sleep", lambda _s: None)
    srv = _Server(DATA, cut_at=300_000)
    try:
        dest = tmp_path / "image"
        ramdisk.download(srv.url + "/file", dest, len(DATA), SHA)
        assert dest.read_bytes() == DATA
        assert srv.ranges[0] is None and srv.ranges[1] == f"bytes={300_000}-"  # resumed where it broke
    finally:
        srv.close()


def test_a_corrupted_download_is_caught_with_both_checksums(tmp_path):
    srv = _Server(DATA, corrupt=True)
    try:
        with pytest.raises(ramdisk.DeployError) as e:
            ramdisk.download(srv.url + "/file", tmp_path / "image", len(DATA), SHA)
        got = hashlib.sha256(bytes([DATA[0] ^ 1]) + DATA[1:]).hexdigest()
        assert str(e.value) == (f"image checksum mismatch: the {len(DATA)} bytes downloaded have sha256 {got}, "
                                f"expected {SHA}")
    finally:
        srv.close()


def test_a_refused_download_is_not_retried(tmp_path):
    srv = _Server(DATA)
    try:
        with pytest.raises(ramdisk.DeployError, match=r"^image download refused: HTTP 404$"):
            ramdisk.download(srv.url + "/missing", tmp_path / "i", len(DATA), SHA)
        assert srv.paths == ["/missing"]  # asked once, not again
    finally:
        srv.close()


def test_call_back_carries_the_deploy_token_in_a_header_only(monkeypatch, capsys):
    srv = _Server(b"")
    try:
        req = {"url": srv.url, "server_id": "sid-1", "token": "t0ken-secret"}
        ramdisk.call_back(req, False, "image checksum mismatch: x")
        assert srv.calls == [("/v1/deploy/servers/sid-1/callback", "t0ken-secret",
                              {"ok": False, "error": "image checksum mismatch: x"})]
        assert "t0ken-secret" not in capsys.readouterr().out
    finally:
        srv.close()


def test_config_drive_goes_to_the_end_of_the_disk_leaving_room_to_grow_root(tmp_path):
    for tool in ("sfdisk", "xorriso"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    disk = tmp_path / "disk.raw"
    with open(disk, "wb") as f:
        f.truncate(64 * 1024 * 1024)
    subprocess.run(["sfdisk", "-q", str(disk)], input="label: dos\nstart=2048, size=40960, type=83\n",
                   text=True, check=True)
    (tmp_path / "cd" / "openstack" / "latest").mkdir(parents=True)
    (tmp_path / "cd" / "openstack" / "latest" / "meta_data.json").write_text('{"uuid": "u1"}')
    iso = tmp_path / "cd.iso"
    subprocess.run(["xorriso", "-as", "mkisofs", "-quiet", "-o", str(iso), "-V", "config-2", "-J", "-r",
                    str(tmp_path / "cd")], check=True)
    start = ramdisk.write_config_drive(iso, str(disk))
    table = json.loads(subprocess.run(["sfdisk", "--json", str(disk)], capture_output=True, text=True,
                                      check=True).stdout)["partitiontable"]["partitions"]
    assert [p["start"] for p in table] == [2048, start]
    sectors = 64 * 1024 * 1024 // 512
    end = start + table[1]["size"]
    assert start % 2048 == 0 and sectors - 2048 <= end < sectors  # in the disk's last MiB, not after root
    with open(disk, "rb") as f:
        f.seek(start * 512)
        assert f.read(iso.stat().st_size) == iso.read_bytes()
    label = subprocess.run(["blkid", "-p", "-O", str(start * 512), "-s", "LABEL", "-o", "value", str(disk)],
                           capture_output=True, text=True).stdout.strip()
    assert label == "config-2"


def test_network_data_of_the_config_drive_maps_macs_to_addresses(monkeypatch):
    done = []
    monkeypatch.setattr(first_boot, "set_address", lambda mac, a, p, persist, gw: done.append((mac, a, p, gw)) or "eth9")
    data = {"links": [{"id": "eth0", "ethernet_mac_address": "fa:16:3e:00:00:01"}],
            "networks": [{"link": "eth0", "type": "ipv4", "ip_address": "192.168.24.100",
                          "netmask": "255.255.255.0"}, {"link": "eth0", "type": "ipv6"}]}
    assert first_boot.apply_network_data(data) == ["192.168.24.100/24 on eth9"]
    assert done == [("fa:16:3e:00:00:01", "192.168.24.100", 24, None)]
    # a default route (Nova's form) names the gateway; other routes are not the default
    data["networks"][0]["routes"] = [{"network": "10.0.0.0", "netmask": "255.0.0.0", "gateway": "192.168.24.9"},
                                     {"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "192.168.24.254"}]
    assert first_boot.apply_network_data(data) == ["192.168.24.100/24 on eth9 via 192.168.24.254"]
    assert done[-1] == ("fa:16:3e:00:00:01", "192.168.24.100", 24, "192.168.24.254")


def test_a_config_drive_gateway_becomes_the_nodes_default_route(tmp_path):
    """For real, in a network namespace: the undercloud's config drive contents (a
    provisioning network with a gateway), read by the node side, give an address and a
    default route through that gateway on the interface with the node's MAC."""
    from tests.conftest import need_root
    from undercloud.provisioning.servers.base import Spec
    from undercloud.provisioning.servers.vm_configdrive import contents

    need_root()
    spec = Spec(id="sid", name="bm0", hypervisor_type="baremetal", flavor={}, image={}, image_path=None,
                first_boot={}, networks=[])
    mac = "fa:16:3e:00:00:07"
    net = contents(spec, mac, "192.168.77.10", 24, "192.168.77.254")["openstack/latest/network_data.json"]
    ns = f"uc-gw-{tmp_path.name[-8:]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "nic0", "address", mac, "type", "veth", "peer", "name", "nic0p"],
                       check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "nic0p", "up"], check=True)  # so nic0 gets a carrier
        code = ("import json, sys; from undercloud.agent import first_boot; "
                "print(first_boot.apply_network_data(json.loads(sys.stdin.read()), persist=False))")
        r = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code], input=net.decode(),
                           capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
        assert r.returncode == 0, r.stderr
        assert "192.168.77.10/24 on nic0 via 192.168.77.254" in r.stdout
        routes = subprocess.run(["ip", "-n", ns, "route", "show", "default"], capture_output=True, text=True).stdout
        assert routes.split()[:5] == ["default", "via", "192.168.77.254", "dev", "nic0"], routes
    finally:
        subprocess.run(["ip", "netns", "del", ns])


def test_an_argument_shows_usage(capsys):
    assert first_boot.main(["nope"]) == 2
    assert "usage: python3 -m undercloud.agent.first_boot" in capsys.readouterr().err
    assert ramdisk.main(["nope"]) == 2
    assert "usage: python3 -m undercloud.agent.ramdisk" in capsys.readouterr().err


def test_vm_config_drive_layout_is_what_firstboot_reads(tmp_path):
    """The undercloud side (vm_configdrive) and the node side (first_boot.firstboot) agree."""
    from undercloud.provisioning.servers.base import Spec
    from undercloud.provisioning.servers.vm_configdrive import contents

    spec = Spec(id="sid", name="vm0", hypervisor_type="vm", flavor={}, image={}, image_path=None,
                first_boot={"server_id": "sid", "token": "tok", "url": "http://192.168.24.1:9",
                            "metadata": {"role": "x"}, "user_data": "#!/bin/sh\n"}, networks=[])
    files = contents(spec, "fa:16:3e:00:00:02", "192.168.24.101")
    meta = json.loads(files["openstack/latest/meta_data.json"])
    net = json.loads(files["openstack/latest/network_data.json"])
    agent = json.loads(files["openstack/latest/vendor_data2.json"])["undercloud"]
    assert meta["hostname"] == "vm0" and meta["uuid"] == "sid" and meta["meta"] == {"role": "x"}
    assert agent["url"] == "http://192.168.24.1:9" and agent["token"] == "tok" and agent["server_id"] == "sid"
    assert files["openstack/latest/user_data"] == b"#!/bin/sh\n"
    seen = []
    first_boot_set = first_boot.set_address
    try:
        first_boot.set_address = lambda mac, a, p, persist, gw: seen.append((mac, a, p, gw)) or "ens3"  # type: ignore[assignment]
        first_boot.apply_network_data(net)
    finally:
        first_boot.set_address = first_boot_set  # type: ignore[assignment]
    assert seen == [("fa:16:3e:00:00:02", "192.168.24.101", 24, None)]  # no gateway given: no route
    # Settings.load reads the agent part as the agent's configuration file.
    from undercloud.agent.settings import Settings

    path = Path(tmp_path / "config.json")
    path.write_text(json.dumps(agent))
    s = Settings.load(path)
    assert (s.url, s.server_id, s.token) == ("http://192.168.24.1:9", "sid", "tok")


def _firstboot_from(tmp_path, monkeypatch, files: dict[str, bytes]) -> Path:
    """Run firstboot on a config drive holding `files` (a directory stands for the mount)."""
    import contextlib

    media = tmp_path / "media"
    for name, data in files.items():
        (media / name).parent.mkdir(parents=True, exist_ok=True)
        (media / name).write_bytes(data)
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    monkeypatch.setattr(first_boot, "find_config_drive", lambda: "/dev/sr9")
    monkeypatch.setattr(first_boot, "Mounted", lambda device: contextlib.nullcontext(media))
    monkeypatch.setattr(first_boot.subprocess, "run", lambda *a, **k: None)  # `hostname`
    assert first_boot.firstboot(root) == 0
    return root


def test_firstboot_takes_the_agent_configuration_from_user_data_of_another_nova(tmp_path, monkeypatch):
    """An openstack server's config drive is written by that cloud's Nova: no vendor data of
    ours; the agent configuration is the user data, with the server's own user data inside."""
    agent = {"server_id": "sid", "token": "tok", "url": "http://10.1.2.1:9", "hostname": "inner-0",
             "user_data": "#!/bin/sh\necho hi\n"}
    root = _firstboot_from(tmp_path, monkeypatch, {
        "openstack/latest/meta_data.json": json.dumps({"uuid": "nova-id", "hostname": "inner-0.novalocal"}).encode(),
        "openstack/latest/vendor_data2.json": json.dumps({"nova": {}}).encode(),
        "openstack/latest/user_data": json.dumps({"undercloud": agent}).encode()})
    written = json.loads((root / "etc/undercloud-agent/config.json").read_text())
    assert written == agent
    assert oct((root / "etc/undercloud-agent/config.json").stat().st_mode & 0o777) == "0o600"
    assert (root / "var/lib/undercloud-agent/user_data").read_bytes() == b"#!/bin/sh\necho hi\n"
    assert (root / "etc/hostname").read_text() == "inner-0\n"


def test_firstboot_keeps_user_data_that_is_not_ours_and_writes_no_agent_configuration(tmp_path, monkeypatch):
    for data in (b"#cloud-config\n{}", b'{"other": 1}', b"\xff\xfe", b'["undercloud"]'):
        root = _firstboot_from(tmp_path / str(len(data)) / data.hex()[:8], monkeypatch,
                               {"openstack/latest/user_data": data})
        assert not (root / "etc/undercloud-agent/config.json").exists()
        assert (root / "var/lib/undercloud-agent/user_data").read_bytes() == data


def test_the_ramdisk_waits_for_its_cd_to_show_and_gives_up_in_time(monkeypatch):
    """An emulated IDE controller (Nova rescue's CD) shows its drive seconds after its driver
    loaded: the ramdisk looks again until the request is there, within its wait."""
    looks, plugs, now = [], [], [0.0]
    found = ({"server_id": "s1"}, None)
    monkeypatch.setattr(ramdisk, "find_request", lambda: looks.append(now[0]) or (found if len(looks) == 4 else None))
    monkeypatch.setattr(ramdisk, "cdroms", lambda: [] if len(looks) < 3 else ["/dev/sr0"])
    monkeypatch.setattr(ramdisk, "coldplug", lambda rounds=3: plugs.append(rounds))
    monkeypatch.setattr(ramdisk.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(ramdisk.time, "sleep", lambda s: now.__setitem__(0, now[0] + s))
    assert ramdisk.wait_for_request(timeout=30) == found
    assert looks == [0.0, 2.0, 4.0, 6.0] and plugs == [1, 1]  # drivers loaded again while no drive showed
    looks.clear()
    monkeypatch.setattr(ramdisk, "find_request", lambda: looks.append(now[0]))  # no request ever
    start = now[0]
    assert ramdisk.wait_for_request(timeout=10) is None
    assert now[0] - start <= 12 and len(looks) == 6
