"""KVM or TCG (host/accel.py): the decision, its cache, and the probe against a fake qemu.

The fake `qemu-system-x86_64` on PATH answers `--version`, records each boot's pid, and
then behaves as asked: hangs silently (KVM under nested virtualisation here), prints the
kernel's give-up-on-root line, or fails at start. A real boot is in
tests/integration/test_lab_accel.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from undercloud.errors import UndercloudError
from undercloud.host import accel

FAKE_QEMU = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "QEMU emulator version ${FAKE_QEMU_VERSION:-9.9.9} (fake)"; exit 0; fi
echo $$ >> "$FAKE_QEMU_RUNS"
case "$FAKE_QEMU_MODE" in
  hang) exec sleep 60 ;;
  boot) echo "[    0.000000] Linux version 6.1.0 (fake)"
        echo "[    0.900000] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)"
        exec sleep 60 ;;
  fail) echo "qemu-system-x86_64: failed to initialize kvm: Permission denied" >&2; exit 1 ;;
esac
"""


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A machine with /dev/kvm, a fake qemu, a cache holding one built kernel; returns the runs file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    qemu = bin_dir / "qemu-system-x86_64"
    qemu.write_text(FAKE_QEMU)
    qemu.chmod(0o755)
    runs = tmp_path / "runs"
    runs.write_text("")
    kvm = tmp_path / "kvm"
    kvm.write_text("")
    cache = tmp_path / "cache"
    out = cache / "outputs" / "k1"
    out.mkdir(parents=True)
    (out / "vmlinuz").write_text("kernel")
    (out / "manifest.json").write_text(json.dumps({"label": "deploy-ramdisk (ramdisk)", "artifacts": [
        {"role": "kernel", "file": "vmlinuz"}, {"role": "initramfs", "file": "initramfs"}]}))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_QEMU_RUNS", str(runs))
    monkeypatch.setenv("FAKE_QEMU_MODE", "boot")
    monkeypatch.setenv("UNDERCLOUD_CACHE", str(cache))
    monkeypatch.delenv("UNDERCLOUD_ACCEL", raising=False)
    monkeypatch.setattr(accel, "KVM_DEVICE", str(kvm))
    monkeypatch.setattr(accel, "PROBE_TIMEOUT", 2.0)
    return runs


def boots(runs: Path) -> list[int]:
    return [int(x) for x in runs.read_text().split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_no_kvm_device_is_tcg_without_booting(host, monkeypatch, tmp_path):
    monkeypatch.setattr(accel, "KVM_DEVICE", str(tmp_path / "no-such-kvm"))
    assert accel.accelerator() == ("qemu", f"no {tmp_path / 'no-such-kvm'}")
    assert boots(host) == []


def test_unusable_kvm_device_is_tcg_without_booting(host, monkeypatch):
    monkeypatch.setattr(accel.os, "access", lambda path, mode: False)
    result = accel.accelerator()
    assert result.type == "qemu" and "not readable and writable" in result.reason
    assert boots(host) == []


@pytest.mark.parametrize("value", ["kvm", "qemu"])
def test_override_wins_without_booting(host, monkeypatch, value):
    monkeypatch.setenv("UNDERCLOUD_ACCEL", value)
    monkeypatch.setenv("FAKE_QEMU_MODE", "hang")
    assert accel.accelerator() == (value, "set by UNDERCLOUD_ACCEL")
    assert boots(host) == []


def test_bad_override_is_one_line(host, monkeypatch):
    monkeypatch.setenv("UNDERCLOUD_ACCEL", "tcg")
    with pytest.raises(UndercloudError) as e:
        accel.accelerator()
    assert e.value.where == "UNDERCLOUD_ACCEL" and "must be kvm or qemu, got 'tcg'" in e.value.message


def test_probe_reaching_the_marker_is_kvm_and_cached(host):
    result = accel.accelerator()
    assert result.type == "kvm" and "reached the kernel's root mount" in result.reason
    (pid,) = boots(host)
    assert not alive(pid)  # killed once the marker was seen (it would sleep 60 s)
    data = json.loads((Path(os.environ["UNDERCLOUD_CACHE"]) / "accel.json").read_text())
    assert data["type"] == "kvm" and data["kernel"].endswith("outputs/k1/vmlinuz")
    assert data["key"]["qemu"] == "QEMU emulator version 9.9.9 (fake)"
    # cached: the next answer boots nothing
    again = accel.accelerator()
    assert again.type == "kvm" and "; probed " in again.reason
    assert len(boots(host)) == 1


def test_probe_timeout_is_tcg_and_qemu_is_killed(host, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_MODE", "hang")
    t0 = time.monotonic()
    result = accel.accelerator()
    assert time.monotonic() - t0 < 10  # bounded by PROBE_TIMEOUT (2 s here), not by the fake's 60 s sleep
    assert result == ("qemu", "KVM probe boot did not reach the kernel's root mount within 2 s")
    (pid,) = boots(host)
    assert not alive(pid)
    # the failure is cached too: the hang is not paid again
    assert accel.accelerator().type == "qemu" and len(boots(host)) == 1


def test_qemu_failing_at_start_is_tcg_with_its_message(host, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_MODE", "fail")
    result = accel.accelerator()
    assert result == ("qemu", "KVM probe: qemu exited early: qemu-system-x86_64: failed to initialize kvm: "
                              "Permission denied")


def test_a_new_qemu_version_probes_again(host, monkeypatch):
    assert accel.accelerator().type == "kvm"
    monkeypatch.setenv("FAKE_QEMU_VERSION", "10.0.0")
    monkeypatch.setenv("FAKE_QEMU_MODE", "hang")
    assert accel.accelerator().type == "qemu"
    assert len(boots(host)) == 2


def test_no_kernel_is_tcg_and_not_cached(host, monkeypatch, tmp_path):
    cache = Path(os.environ["UNDERCLOUD_CACHE"])
    (cache / "outputs" / "k1" / "vmlinuz").unlink()
    monkeypatch.setattr(accel, "Path", lambda p: tmp_path / "empty-boot" if p == "/boot" else Path(p))
    result = accel.accelerator()
    assert result.type == "qemu" and result.reason.startswith("no kernel to probe KVM with")
    assert boots(host) == [] and not (cache / "accel.json").exists()  # a kernel built later gets its probe


def test_probe_kernel_takes_the_newest_built_kernel(host):
    cache = Path(os.environ["UNDERCLOUD_CACHE"])
    newer = cache / "outputs" / "k2"
    newer.mkdir()
    (newer / "vmlinuz").write_text("kernel")
    (newer / "manifest.json").write_text(json.dumps({"artifacts": [{"role": "kernel", "file": "vmlinuz"}]}))
    old = time.time() - 3600
    os.utime(cache / "outputs" / "k1" / "manifest.json", (old, old))
    (cache / "outputs" / "junk").mkdir()
    (cache / "outputs" / "junk" / "manifest.json").write_text("not json")
    assert accel.probe_kernel() == newer / "vmlinuz"


def test_route_devices_names_each_route_s_device():
    from undercloud.host.labnet import route_devices

    out = ("192.168.24.0/24 dev br-uc123456 proto kernel scope link src 192.168.24.1 \n"
           "192.168.24.0/24 via 10.0.0.1 dev eth0 \nunreachable 192.168.24.0/24 \n")
    assert route_devices(out) == ["br-uc123456", "eth0"]
    assert route_devices("") == []
