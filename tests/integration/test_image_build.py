"""Real image builds (debootstrap, chroot, overlayfs, podman, qemu), sharing one cache.

The debootstrap tree and package layers live in $UNDERCLOUD_CACHE (default
~/.cache/undercloud), shared by every test home, so a test run makes each of them once.
Boots use qemu with software emulation (TCG), read the serial console with a timeout and
kill the VM after.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import need, need_root, run_cli
from undercloud.host import podman as hp

BUILD_TIMEOUT = 1500


@pytest.fixture(autouse=True)
def _needs():
    need_root()
    need("debootstrap")
    need("podman")
    reason = hp.available()
    if reason:
        pytest.skip(f"podman does not work here: {reason}")


def build(*args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    r = run_cli("image", "build", *args, "-f", "json", timeout=BUILD_TIMEOUT)
    return r, (json.loads(r.stdout) if r.returncode == 0 else [])


def listing() -> list[dict]:
    return json.loads(run_cli("image", "list", "-f", "json").stdout)


OVMF_CODE = Path("/usr/share/OVMF/OVMF_CODE_4M.fd")
OVMF_VARS = Path("/usr/share/OVMF/OVMF_VARS_4M.fd")


def firmware_args(firmware: str, tmp: Path) -> list[str]:
    """qemu's firmware: SeaBIOS (its default), or OVMF with a fresh copy of its variable store."""
    if firmware == "bios":
        return []
    if not OVMF_CODE.exists():
        pytest.skip(f"no {OVMF_CODE} (apt-get install ovmf)")
    vars_copy = tmp / "OVMF_VARS.fd"
    shutil.copyfile(OVMF_VARS, vars_copy)
    return ["-drive", f"if=pflash,format=raw,readonly=on,file={OVMF_CODE}",
            "-drive", f"if=pflash,format=raw,file={vars_copy}"]


def boot_until(qemu_args: list[str], pattern: str, timeout: float = 300, memory: str = "1024") -> str:
    """Boot under TCG; return the serial console output once `pattern` shows (fail on timeout)."""
    need("qemu-system-x86_64")
    proc = subprocess.Popen(
        ["qemu-system-x86_64", "-accel", "tcg", "-m", memory, "-nographic", "-no-reboot", "-nic", "none",
         *qemu_args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    out, deadline = b"", time.monotonic() + timeout
    try:
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                out += chunk
                if re.search(pattern.encode(), out):
                    return out.decode(errors="replace")
        text = out.decode(errors="replace")
        pytest.fail(f"no {pattern!r} on the serial console within {timeout:.0f} s; last output:\n{text[-3000:]}")
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_oci_node_image_runs_the_agent_in_podman(uc_home):
    r, rows = build("overcloud-full", "--type", "oci")
    assert r.returncode == 0, r.stderr
    assert [(i["name"], i["disk_format"], i["hypervisor_type"]) for i in rows] == [
        ("overcloud-full", "oci", "container")]
    img = rows[0]
    ref = img["properties"]["podman_image"]
    assert re.fullmatch(r"localhost/undercloud/overcloud-full:[0-9a-f]{16}", ref)  # never latest
    assert set(img["properties"]["elements"]) == {"base", "agent"}
    out = hp.podman("run", "--rm", ref, "python3", "-m", "undercloud.agent", "--version").stdout
    assert out.startswith("undercloud-agent ")
    cmd = json.loads(hp.podman("image", "inspect", ref, "--format", "{{json .Config.Cmd}}").stdout)
    assert cmd == ["python3", "-m", "undercloud.agent", "run"]
    # the store keeps an OCI archive of the same image, verified by its sha256
    blob = uc_home.path / "images" / "blobs" / img["checksum"]
    with tarfile.open(blob) as tar:
        assert "index.json" in tar.getnames()
    # podman lost the tag: the store loads it back from its archive
    hp.podman("rmi", ref)
    from undercloud.images.store import ImageStore
    from undercloud.store import Store

    assert ImageStore(uc_home, Store(uc_home.db_url).create_schema()).podman_image(img["id"]) == ref
    assert hp.image_exists(ref)
    # unchanged: nothing is rebuilt or registered again
    r2, rows2 = build("overcloud-full", "--type", "oci")
    assert "up to date" in r2.stderr and [i["id"] for i in rows2] == [img["id"]]


def test_deploy_ramdisk_is_an_iso_linked_to_its_kernel_and_initramfs(uc_home):
    r, rows = build("deploy-ramdisk")
    assert r.returncode == 0, r.stderr
    by = {i["disk_format"]: i for i in rows}
    assert set(by) == {"aki", "ari", "iso"}
    assert by["iso"]["properties"]["kernel_id"] == by["aki"]["id"]
    assert by["iso"]["properties"]["ramdisk_id"] == by["ari"]["id"]


def _mounts_under(path: Path) -> list[str]:
    return [line for line in Path("/proc/mounts").read_text().splitlines() if str(path) in line]


def test_failing_element_names_element_and_phase_and_keeps_the_previous_image(uc_home, tmp_path):
    r, rows = build("overcloud-full", "--type", "oci")
    assert r.returncode == 0, r.stderr
    before = listing()
    ref = rows[0]["properties"]["podman_image"]
    broken = tmp_path / "elements" / "broken" / "install.d"
    broken.mkdir(parents=True)
    (broken / "50-broken").write_text("#!/bin/sh\necho working\necho 'cannot configure the frobnicator' >&2\nexit 3\n")
    (broken / "50-broken").chmod(0o755)
    r = run_cli("image", "build", "overcloud-full", "--type", "oci", "--elements-path", str(tmp_path / "elements"),
                "--element", "broken", timeout=BUILD_TIMEOUT)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.stderr
    assert "element 'broken' failed in phase install.d (script 50-broken), exit 3" in errors[0]
    assert "cannot configure the frobnicator" in errors[0]
    log = Path(re.search(r"log: (\S+)\)", errors[0]).group(1))
    assert log.is_relative_to(uc_home.path) and "working" in log.read_text()
    # nothing half-registered, the previous image still listed and runnable
    assert listing() == before
    assert hp.podman("run", "--rm", ref, "python3", "-m", "undercloud.agent", "--version").returncode == 0
    from undercloud.images.rootfs import cache_dir
    assert _mounts_under(cache_dir()) == []
    assert not [p for p in (cache_dir() / "layers").iterdir() if ".tmp-" in p.name]

    # a package apt cannot find: the element that asked for it is named
    bad = tmp_path / "elements" / "badpkg"
    bad.mkdir()
    (bad / "package-installs").write_text("undercloud-no-such-package\n")
    r = run_cli("image", "build", "overcloud-full", "--type", "oci", "--elements-path", str(tmp_path / "elements"),
                "--element", "badpkg", timeout=BUILD_TIMEOUT)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "element 'badpkg' failed in phase package-installs" in r.stderr
    assert listing() == before and _mounts_under(cache_dir()) == []


def test_a_changed_element_rebuilds_only_what_depends_on_it(uc_home, tmp_path):
    from undercloud.images import catalog, rootfs
    from undercloud.images.build import Builder
    from undercloud.images.elements import SHIPPED

    r, first = build("overcloud-full", "--type", "oci")
    assert r.returncode == 0, r.stderr
    shutil.copytree(SHIPPED / "agent", tmp_path / "agent")
    script = tmp_path / "agent" / "install.d" / "60-enable-agent"
    marker = uuid.uuid4().hex  # a change never built before, so nothing of it is cached
    script.write_text(script.read_text() + f"echo {marker} > /etc/undercloud-agent-marker\n")
    target = catalog.targets("overcloud-full", ("oci",))[0].with_elements_path((tmp_path,))
    try:
        r, rows = build("overcloud-full", "--type", "oci", "--elements-path", str(tmp_path))
        assert r.returncode == 0, r.stderr
        assert "debootstrap: cached" in r.stderr and "packages: cached" in r.stderr
        assert "image: cached" not in r.stderr and "install.d: agent/60-enable-agent" in r.stderr
        keys = Builder(target, lambda _m: None, tmp_path, False).keys  # now that its layers exist
        assert rows[0]["properties"]["build_key"] == keys["output"] != first[0]["properties"]["build_key"]
        # the new image replaced the old one of that name and hypervisor type
        assert [i["id"] for i in listing()] == [rows[0]["id"]]
        ref = rows[0]["properties"]["podman_image"]
        out = hp.podman("run", "--rm", ref, "cat", "/etc/undercloud-agent-marker").stdout
        assert out.strip() == marker
        r, again = build("overcloud-full", "--type", "oci", "--elements-path", str(tmp_path))
        assert "up to date" in r.stderr and again[0]["id"] == rows[0]["id"]
    finally:  # this one-off variant would only fill the shared cache
        keys = Builder(target, lambda _m: None, tmp_path, False).keys
        rootfs.drop_layer(keys["image"])
        shutil.rmtree(rootfs.cache_dir() / "outputs" / keys["output"], ignore_errors=True)
        hp.podman("rmi", f"localhost/undercloud/overcloud-full:{keys['output'][:16]}", check=False)


def podman_layers(ref: str) -> list[str]:
    return json.loads(hp.podman("image", "inspect", ref, "--format", "{{json .RootFS.Layers}}").stdout)


def test_service_image_is_base_plus_packages_plus_files_and_applies_config(uc_home, tmp_path):
    from undercloud.images import catalog, rootfs
    from undercloud.images.build import Builder
    from undercloud.images.elements import SHIPPED

    r, rows = build("service-memcached")
    assert r.returncode == 0, r.stderr
    ref = rows[0]["properties"]["podman_image"]
    layers = podman_layers(ref)
    base = re.search(r"base layer (\S+)", r.stderr)
    if base:  # built in this run: the first layer is exactly the shared base image's layer
        base_layers = podman_layers(base.group(1))
        assert layers[: len(base_layers)] == base_layers
    assert len(layers) == 3  # base, the service's packages, its files

    # A variant of the service's files (a static file more) reuses its packages layer and that
    # layer's podman image: only the files layer is made again, no apt-get.
    shutil.copytree(SHIPPED / "memcached", tmp_path / "variant" / "memcached")
    marker = uuid.uuid4().hex
    (tmp_path / "variant" / "memcached" / "static" / "etc").mkdir(parents=True, exist_ok=True)
    (tmp_path / "variant" / "memcached" / "static" / "etc" / "uc-variant").write_text(marker)
    target = catalog.targets("service-memcached", ("oci",))[0].with_elements_path((tmp_path / "variant",))
    try:
        r, variant = build("service-memcached", "--elements-path", str(tmp_path / "variant"))
        assert r.returncode == 0, r.stderr
        assert "service-packages: cached" in r.stderr and "apt-get install" not in r.stderr, r.stderr
        assert "service: done" in r.stderr
        vref = variant[0]["properties"]["podman_image"]
        assert vref != ref and podman_layers(vref)[:2] == layers[:2]
        assert hp.podman("run", "--rm", vref, "cat", "/etc/uc-variant").stdout == marker
    finally:  # this one-off variant would only fill the shared cache
        keys = Builder(target, lambda _m: None, tmp_path, False).keys
        rootfs.drop_layer(keys["service"])
        shutil.rmtree(rootfs.cache_dir() / "outputs" / keys["output"], ignore_errors=True)
        hp.podman("rmi", f"localhost/undercloud/service-memcached:{keys['output'][:16]}", check=False)
    r, rows = build("service-memcached")  # the shipped one again, for the rest of this test
    assert r.returncode == 0, r.stderr
    ref = rows[0]["properties"]["podman_image"]
    conf = tmp_path / "config"
    conf.mkdir()
    (conf / "extra.conf").write_text("secret-ish\n")
    (conf / "config.json").write_text(json.dumps({
        "command": ["/usr/bin/memcached", "-u", "memcache", "-l", "127.0.0.1", "-p", "11311"],
        "config_files": [{"source": "/var/lib/undercloud/config/extra.conf", "dest": "/etc/memcached-extra.conf",
                          "owner": "memcache:memcache", "perm": "0600"}],
    }))
    name = f"{uc_home.instance}-img-memcached"
    hp.podman("run", "-d", "--name", name, "-v", f"{conf}:/var/lib/undercloud/config:ro", ref)
    try:
        probe = ("import socket,time\nfor _ in range(50):\n    try:\n"
                 "        s=socket.create_connection(('127.0.0.1',11311)); break\n"
                 "    except OSError: time.sleep(0.1)\n"
                 "s.sendall(b'version\\r\\n'); print(s.recv(100).decode().strip())")
        out = hp.podman("exec", name, "python3", "-c", probe).stdout
        assert out.startswith("VERSION ")
        st = hp.podman("exec", name, "stat", "-c", "%U:%G %a", "/etc/memcached-extra.conf").stdout.strip()
        assert st == "memcache:memcache 600"
        assert "/etc/memcached-extra.conf (memcache:memcache, 0600)" in hp.podman("logs", name).stderr + \
            hp.podman("logs", name).stdout
    finally:
        hp.podman("rm", "-f", name, check=False)
