"""Durable files (undercloud/agent/files.py and its users): atomic private writes with their
mode from creation, a crash before the rename leaving the old file whole, content verified
before it takes its name, image blobs checked when served, and what a killed run left of
its token-holding temporaries removed at the service's start."""

from __future__ import annotations

import hashlib
import http.server
import json
import logging
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import HTTPS
from undercloud.agent import files
from undercloud.config import Home
from undercloud.errors import UndercloudError

REPO = Path(__file__).resolve().parents[2]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ---- write_atomic ---------------------------------------------------------------------
def test_a_private_file_is_never_readable_by_others_not_even_while_written(tmp_path, monkeypatch):
    seen = []
    real_fsync = os.fsync

    def fsync(fd):  # the moment the temporary file is complete: its mode then
        if stat.S_ISREG(os.fstat(fd).st_mode):
            seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    old = os.umask(0)  # even a careless umask does not widen it
    try:
        path = tmp_path / "secret"
        assert files.write_atomic(path, "token") is True
    finally:
        os.umask(old)
    assert path.read_text() == "token" and _mode(path) == 0o600 and seen == [0o600]
    # an existing file is replaced with the asked mode (a group/world-readable one narrowed)
    path.chmod(0o644)
    files.write_atomic(path, b"\x00new")
    assert path.read_bytes() == b"\x00new" and _mode(path) == 0o600
    # a mode that is asked for is the one it gets; a script keeps its executable bit
    files.write_atomic(tmp_path / "conf", "x", 0o644)
    files.write_atomic(tmp_path / "run.sh", "#!/bin/sh\n", 0o700)
    assert _mode(tmp_path / "conf") == 0o644 and _mode(tmp_path / "run.sh") == 0o700
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conf", "run.sh", "secret"]  # no temporary left


def test_made_once_the_first_writer_wins_whole(tmp_path):
    path = tmp_path / "d" / "admin.token"
    assert files.write_atomic(path, "first", exclusive=True) is True
    assert files.write_atomic(path, "second", exclusive=True) is False
    assert path.read_text() == "first" and _mode(path) == 0o600 and os.listdir(path.parent) == ["admin.token"]
    # Home.made_once is the same helper
    home = Home(tmp_path / "home")
    assert home.made_once("worker.id", "w1") == "w1" and home.made_once("worker.id", "w2") == "w1"
    assert _mode(home.file("worker.id")) == 0o600


def test_a_failure_before_the_rename_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    files.write_atomic(path, '{"old": 1}')

    def boom(*_a):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="No space"):
        files.write_atomic(path, '{"new": 2}')
    assert json.loads(path.read_text()) == {"old": 1} and os.listdir(tmp_path) == ["state.json"]


def test_a_process_killed_between_the_write_and_the_rename_leaves_the_old_file_whole(tmp_path):
    """For real: a process dies (os._exit, no clean-up runs) after the new content is
    written and fsync'ed but before the rename. The old file is intact; what it left is a
    temporary name, which remove_temps (the service's start) clears."""
    path = tmp_path / "container-network.json"
    files.write_atomic(path, json.dumps({"subnet": "10.1.0.0/24"}), 0o644)
    code = ("import os, sys; from undercloud.agent import files\n"
            "os.replace = lambda *a: os._exit(9)\n"
            "files.write_atomic(__import__('pathlib').Path(sys.argv[1]), '{\"subnet\": \"10.2.0.0/24\"}', 0o644)\n")
    r = subprocess.run([sys.executable, "-c", code, str(path)], cwd=REPO, timeout=60)
    assert r.returncode == 9
    assert json.loads(path.read_text()) == {"subnet": "10.1.0.0/24"}
    left = [p for p in os.listdir(tmp_path) if p != path.name]
    assert len(left) == 1 and files.is_temp(left[0]) and _mode(tmp_path / left[0]) == 0o644
    assert files.remove_temps(tmp_path) == [str(tmp_path / left[0])]
    assert os.listdir(tmp_path) == [path.name]


# ---- Verified / download --------------------------------------------------------------
DATA = os.urandom(3 * files.CHUNK + 123)
SHA = hashlib.sha256(DATA).hexdigest()


def test_verified_content_takes_its_name_only_when_size_and_sha256_match(tmp_path):
    dest = tmp_path / "blob"
    with files.Verified(dest, SHA, len(DATA)) as w:
        w.write(DATA[:10])
        with pytest.raises(files.VerifyError, match=f"truncated: received 10 of {len(DATA)} bytes"):
            w.finish()
    assert os.listdir(tmp_path) == []
    with files.Verified(dest, SHA, len(DATA)) as w:
        with pytest.raises(files.VerifyError, match="larger than the announced"):
            w.write(DATA + b"x")
    bad = bytearray(DATA)
    bad[7] ^= 1
    with files.Verified(dest, SHA, len(DATA)) as w:
        w.write(bytes(bad))
        with pytest.raises(files.VerifyError, match=f"have sha256 {hashlib.sha256(bad).hexdigest()}, expected {SHA}"):
            w.finish()
    assert os.listdir(tmp_path) == []
    with files.Verified(dest, SHA, len(DATA), mode=0o640) as w:
        w.write(DATA)
        assert w.finish() == dest
    assert dest.read_bytes() == DATA and _mode(dest) == 0o640 and os.listdir(tmp_path) == ["blob"]


class _Serve:
    """Serves DATA (Range-aware), with or without its X-Image-Sha256, cut or corrupt."""

    def __init__(self, header: str | None = SHA, corrupt: bool = False, cut_first: int | None = None):
        self.ranges = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                rng = self.headers.get("Range")
                outer.ranges.append(rng)
                start = int(rng.split("=")[1].rstrip("-")) if rng else 0
                body = DATA[start:]
                if corrupt:
                    body = bytes([body[0] ^ 0xFF]) + body[1:]  # never the byte it was (random DATA)
                self.send_response(206 if rng else 200)
                if header:
                    self.send_header("X-Image-Sha256", header)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if cut_first is not None and len(outer.ranges) == 1:
                    self.wfile.write(body[:cut_first])
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                self.wfile.write(body)

            def log_message(self, *_a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/file"

    def __enter__(self):
        return self

    def __exit__(self, *_a):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_download_verifies_against_the_sha256_the_server_sends_and_never_takes_it_unchecked(tmp_path):
    dest = tmp_path / "image.tar"
    with _Serve() as s:
        assert files.download(s.url, dest, mode=0o600) == dest
    assert dest.read_bytes() == DATA and _mode(dest) == 0o600
    dest.unlink()
    with _Serve(corrupt=True) as s, pytest.raises(files.VerifyError, match="corrupt: .* expected " + SHA):
        files.download(s.url, dest)
    with _Serve(header=None) as s, pytest.raises(files.VerifyError, match="X-Image-Sha256 missing"):
        files.download(s.url, dest)
    assert os.listdir(tmp_path) == []  # nothing half-written, nothing unverified


def test_download_resumes_a_broken_transfer_where_it_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(files.time, "sleep", lambda _s: None)
    dest = tmp_path / "image"
    with _Serve(cut_first=100_000) as s:
        files.download(s.url, dest, SHA, len(DATA), attempts=3)
        assert s.ranges == [None, "bytes=100000-"]
    assert dest.read_bytes() == DATA and os.listdir(tmp_path) == ["image"]


# ---- the image store: blobs durable and checked when served ---------------------------
@pytest.fixture
def ctx(tmp_path):
    from undercloud.api.context import Context

    c = Context(Home(tmp_path / "home"))
    yield c
    c.stacks.stop()


def _upload(ctx, content: bytes) -> dict:
    sha = hashlib.sha256(content).hexdigest()
    ctx.images.put_blob([content], sha, len(content))
    return ctx.images.register([{"name": "disk", "disk_format": "raw", "sha256": sha, "properties": {}}])[0]


def test_a_blob_is_fsynced_before_its_rename_and_its_directory_after(ctx, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("rename", str(b))), real_replace(a, b))[1])
    path = ctx.images.put_blob([DATA], SHA, len(DATA))
    tmp = events[0][1]
    assert Path(tmp).parent == ctx.images.tmp and files.is_temp(Path(tmp).name)
    assert events == [("fsync", tmp), ("rename", str(path)), ("fsync", str(ctx.images.blobs))]
    assert _mode(path) == 0o644


def test_a_blob_corrupted_on_disk_is_refused_when_served_logged_and_removed(ctx, caplog):
    from fastapi.testclient import TestClient

    from undercloud.api.app import create_app

    img = _upload(ctx, DATA)
    client = TestClient(create_app(ctx), raise_server_exceptions=False, base_url=HTTPS)
    r = client.get(f"/v1/images/{img['id']}/file")
    assert r.status_code == 200 and r.content == DATA
    blob = ctx.images.blob_path(SHA)
    with open(blob, "r+b") as f:  # a bit flips on disk (written again: a new mtime)
        f.seek(12345)
        f.write(bytes([DATA[12345] ^ 1]))
    with caplog.at_level(logging.ERROR, logger="undercloud.images"):
        r = client.get(f"/v1/images/{img['id']}/file")
    assert r.status_code == 404 and r.content != DATA
    err = r.json()["error"]
    assert "\n" not in err and "corrupt on disk" in err and "upload or build it again" in err
    assert "Traceback" not in r.text
    assert any("corrupt on disk" in m and "removed" in m for m in caplog.messages)
    assert not blob.exists() and ctx.images.by_id(img["id"])["status"] == "missing"
    # an uploader asking whether the content is stored hears no: it sends it again
    admin = {"X-Undercloud-Token": ctx.home.admin_token()}
    assert client.head(f"/v1/images/blobs/{SHA}", headers=admin).status_code == 404
    ctx.images.put_blob([DATA], SHA, len(DATA))
    assert client.head(f"/v1/images/blobs/{SHA}", headers=admin).status_code == 200
    r = client.get(f"/v1/images/{img['id']}/file")
    assert r.status_code == 200 and r.content == DATA


def test_a_corrupt_blob_is_not_handed_to_a_server_either(ctx):
    img = _upload(ctx, DATA)
    path = ctx.images.blob_path(SHA)
    path.write_bytes(DATA[:-1])  # cut short (a crash of a version that did not fsync)
    assert not ctx.images.ensure_blob(img).exists()  # what realisers get: "missing", they say so
    assert not ctx.images.has_blob(SHA)


# ---- token temporaries: beside their output, gone on every path and at start ----------
def test_config_drive_temporaries_are_in_the_home_and_gone_on_failure(tmp_path, monkeypatch):
    from undercloud.provisioning.servers import vm_configdrive
    from undercloud.provisioning.servers.base import Spec

    spec = Spec(id="sid", name="bm0", hypervisor_type="baremetal", flavor={}, image={}, image_path=None,
                first_boot={"server_id": "sid", "token": "tok-secret", "url": "http://x"}, networks=[])
    d = tmp_path / "baremetal" / "sid"
    d.mkdir(parents=True)
    seen = []

    def failing_run(argv, **_kw):
        src = Path(argv[-1])
        seen.append((src, _mode(src), (src / "openstack/latest/vendor_data2.json").read_text()))
        raise UndercloudError("xorriso: killed")

    monkeypatch.setattr(vm_configdrive, "require", lambda *_a: None)
    monkeypatch.setattr(vm_configdrive, "run", failing_run)
    with pytest.raises(UndercloudError, match="xorriso"):
        vm_configdrive.make(spec, "fa:16:3e:00:00:01", "10.0.0.5", d / "configdrive.iso")
    src, mode, vendor = seen[0]
    assert src.parent == d and files.is_temp(src.name) and mode == 0o700 and "tok-secret" in vendor
    assert os.listdir(d) == []  # the token's copy went with the failure


def test_leftover_token_temporaries_are_removed_at_the_service_start(tmp_path):
    from tests.unit.test_servers import UC

    home = tmp_path / "home"
    left = [home / "servers" / "s1" / ".configdrive.iso.0a1b2c3d.tmp" / "openstack" / "latest" / "vendor_data2.json",
            home / "baremetal" / "s2" / ".deploy.json.0a1b2c3d.tmp",
            home / "baremetal" / "s2" / ".deploy.iso.0a1b2c3d.tmp",
            home / "netboot" / "armed" / ".52-54-00-00-00-01.json.0a1b2c3d.tmp"]
    kept = [home / "servers" / "s1" / "first-boot" / "config.json", home / "baremetal" / "s2" / "deploy.iso"]
    for p in left + kept:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text('{"token": "tok-secret"}')
    uc = UC(tmp_path)  # its start: ServersService.startup
    try:
        assert not any(p.exists() for p in left)
        assert not (home / "servers" / "s1" / ".configdrive.iso.0a1b2c3d.tmp").exists()
        assert all(p.exists() for p in kept)
    finally:
        uc.ctx.stacks.stop()


def test_container_network_json_is_replaced_whole(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from undercloud.provisioning.servers.container import ContainerRealiser

    r = ContainerRealiser(SimpleNamespace(home=Home(tmp_path)))
    path = tmp_path / "servers" / "container-network.json"
    path.parent.mkdir()
    path.write_text('{"subnet": "10.130.4.0/24", "gat')  # half-written by an older version
    info = {"subnet": "10.130.4.0/24", "gateway": "10.130.4.1", "address": "10.130.4.1"}
    r.net.save(info)
    assert json.loads(path.read_text()) == info and _mode(path) == 0o644
    assert next(r.net.subnet_choices()) == "10.130.4.0/24"

    def crash(*_a):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        r.net.save(dict(info, address="10.130.4.2"))
    assert json.loads(path.read_text()) == info and os.listdir(path.parent) == [path.name]
