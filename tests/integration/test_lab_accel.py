"""The KVM probe's boot against a real qemu and a real kernel, under TCG (which works on
every machine): the kernel reaches the marker on the serial console and qemu is gone after.
Skips where qemu or a kernel (a built deploy ramdisk, or /boot/vmlinuz-*) is missing."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from undercloud.host import accel

pytestmark = pytest.mark.integration


@pytest.mark.timeout(120)
def test_probe_boot_reaches_the_marker_under_tcg():
    qemu = shutil.which(accel.QEMU)
    if not qemu:
        pytest.skip(f"{accel.QEMU} is not installed")
    kernel = accel.probe_kernel()
    if kernel is None:
        pytest.skip("no kernel to boot (build the deploy-ramdisk image, or install one in /boot)")
    ok, why, seconds = accel.probe(qemu, kernel, timeout=90, accel="tcg")
    assert ok, why
    assert why.startswith("TCG probe boot reached the kernel's root mount in ")
    print(f"TCG probe boot of {kernel}: {seconds:.1f} s")
    left = subprocess.run(["pgrep", "-f", "--", f"-kernel {kernel}"], capture_output=True, text=True).stdout
    assert left == "", f"a probe qemu outlived the probe: {left}"
