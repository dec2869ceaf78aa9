"""Outputs from a finished root: podman images, a bootable qcow2, a deploy ramdisk + ISO.

Disk images are made without device-mapper (this kernel has none, so diskimage-builder's
kpartx-based outputs fail): sfdisk writes the partition table into the image file,
mkfs.ext4 -d fills the partition straight from the tree (at its offset in the file), and
only extlinux needs the file system mounted, through a loop device set at the offset.

Both disk outputs boot with BIOS and with UEFI firmware (a node's `boot_mode`), from the
same file. UEFI gets a standalone GRUB (Debian's grub-efi-amd64-bin, its configuration
inside) at the removable-media path /EFI/BOOT/BOOTX64.EFI of a FAT file system (mtools,
nothing mounted), so no firmware boot entry is needed:
- the qcow2: an EFI system partition (MBR type 0xEF, partition 2) placed before the root
  file system, which stays partition 1 and last on the disk (growroot grows it; extlinux
  boots it under BIOS);
- the deploy ISO: the FAT image as a second El Torito boot image (isolinux stays the BIOS one).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from undercloud.errors import UndercloudError
from undercloud.host import podman as hp
from undercloud.host.run import require, run

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ROOT_LABEL = "cloudimg-rootfs"  # the label diskimage-builder uses; fstab and extlinux name it
MBR = Path("/usr/lib/syslinux/mbr/mbr.bin")
ISOLINUX = Path("/usr/lib/ISOLINUX/isolinux.bin")
ISOHDPFX = Path("/usr/lib/ISOLINUX/isohdpfx.bin")
LDLINUX = Path("/usr/lib/syslinux/modules/bios/ldlinux.c32")
GRUB_EFI_MODULES = ("part_msdos part_gpt fat ext2 iso9660 search search_fs_file search_label linux normal "
                    "echo test gzio efi_gop all_video")
ISO_MARKER = ".undercloud-ramdisk"  # UEFI GRUB finds the deploy ISO (CD) by this file
ESP_MB = 8
KERNEL_ARGS = "console=tty0 console=ttyS0,115200n8"
# The ramdisk writes its messages to /dev/kmsg (consoles may be absent): none dropped
RAMDISK_ARGS = f"{KERNEL_ARGS} printk.devkmsg=on"


# ---- podman ------------------------------------------------------------------------
def _pipe(producer: list[str], consumer: list[str], env: dict | None = None, what: str = "") -> None:
    p1 = subprocess.Popen(producer, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p2 = subprocess.run(consumer, stdin=p1.stdout, capture_output=True, text=True, env=env)
    assert p1.stdout is not None
    p1.stdout.close()
    err1 = p1.stderr.read().decode(errors="replace") if p1.stderr else ""
    rc1 = p1.wait()
    if rc1 != 0 or p2.returncode != 0:
        tail = (err1 if rc1 else p2.stderr).strip().splitlines()[-1:] or ["no output"]
        raise UndercloudError(f"{what} failed: {tail[0]}", "image build")


def oci_import(root: Path, ref: str, cmd: list[str]) -> None:
    """One-layer podman image from a root tree (no registry involved, explicit tag)."""
    if hp.image_exists(ref):
        return
    require("podman", "podman")
    import json

    _pipe(["tar", "-C", str(root), "--numeric-owner", "--xattrs", "-cf", "-", "."],
          ["podman", "import", "--change", f"ENV=PATH={PATH}", "--change", f"CMD={json.dumps(cmd, separators=(',', ':'))}",
           "-", ref], env=hp.env(), what=f"podman import {ref}")


def oci_layer(layer: Path, base_ref: str, ref: str, work: Path, cmd: list[str]) -> None:
    """A podman image = `base_ref` + exactly the files of `layer` (an overlay upper dir).

    Overlay marks deleted files with 0/0 character devices; those are left out of the tar
    and removed in the image by a RUN step instead. A tag podman has already is kept (its
    name carries the content key).
    """
    import json

    if hp.image_exists(ref):
        return

    whiteouts = []
    for dirpath, dirnames, filenames in os.walk(layer):
        for n in filenames + dirnames:
            p = Path(dirpath) / n
            st = p.lstat()
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                whiteouts.append("/" + str(p.relative_to(layer)))
    excludes = work / "excludes"
    excludes.write_text("".join(f".{w}\n" for w in whiteouts))
    run(["tar", "-C", str(layer), "--numeric-owner", "--xattrs", "-X", str(excludes), "-cf",
         str(work / "layer.tar"), "."])
    lines = [f"FROM {base_ref}", "ADD layer.tar /"]
    if whiteouts:
        lines.append("RUN rm -rf -- " + " ".join(json.dumps(w) for w in sorted(whiteouts)))
    lines.append(f"CMD {json.dumps(cmd)}")
    (work / "Containerfile").write_text("\n".join(lines) + "\n")
    try:
        hp.podman("build", "--pull=never", "-q", "-t", ref, "-f", str(work / "Containerfile"), str(work),
                  timeout=900)
    finally:
        (work / "layer.tar").unlink(missing_ok=True)


def oci_save(ref: str, archive: Path) -> None:
    hp.podman("save", "--format", "oci-archive", "-o", str(archive), ref, timeout=900)


def ensure_podman_image(ref: str, archive: Path, say: Callable[[str], None]) -> None:
    """Put the image back into podman from the stored archive if it was removed there."""
    if hp.image_exists(ref):
        return
    say(f"oci: {ref} not in podman any more, loading it from {archive.name}")
    out = hp.podman("load", "-q", "-i", str(archive), timeout=900).stdout
    loaded = out.strip().rsplit(" ", 1)[-1]
    if loaded and loaded != ref and not hp.image_exists(ref):
        hp.podman("tag", loaded, ref)


# ---- UEFI boot loader ---------------------------------------------------------------
def efi_fat(config: str, out: Path, size_mb: int = ESP_MB) -> Path:
    """A FAT file system image holding /EFI/BOOT/BOOTX64.EFI: GRUB with `config` built in."""
    for tool, pkg in (("grub-mkstandalone", "grub-common"), ("mkfs.vfat", "dosfstools"), ("mcopy", "mtools")):
        require(tool, pkg)
    if not Path("/usr/lib/grub/x86_64-efi").is_dir():
        raise UndercloudError("GRUB for UEFI is not installed (apt-get install grub-efi-amd64-bin)", "image build")
    work = Path(tempfile.mkdtemp(prefix="uc-efi-", dir=out.parent))
    try:
        (work / "grub.cfg").write_text(config)
        run(["grub-mkstandalone", "-O", "x86_64-efi", "-o", str(work / "BOOTX64.EFI"),
             f"--install-modules={GRUB_EFI_MODULES}", f"--modules={GRUB_EFI_MODULES}", "--locales=", "--fonts=",
             "--themes=", f"boot/grub/grub.cfg={work / 'grub.cfg'}"], timeout=120)
        out.unlink(missing_ok=True)
        run(["mkfs.vfat", "-C", "-n", "EFI", str(out), str(size_mb * 1024)])
        run(["mmd", "-i", str(out), "::/EFI", "::/EFI/BOOT"])
        run(["mcopy", "-i", str(out), str(work / "BOOTX64.EFI"), "::/EFI/BOOT/BOOTX64.EFI"])
    finally:
        shutil.rmtree(work)
    return out


def _grub_entry(kernel: str, initrd: str, args: str, search: str) -> str:
    return (f"set timeout=0\n{search}\necho \"undercloud: UEFI boot of {kernel}\"\n"
            f"linux {kernel} {args}\ninitrd {initrd}\nboot\n")


def extlinux_entry(conf: Path) -> tuple[str, str, str]:
    """(kernel, initrd, append) of the DEFAULT label of an extlinux.conf (the node-boot element's)."""
    labels: dict[str, dict[str, str]] = {}
    default, current = None, None
    for line in conf.read_text().splitlines():
        word, _, rest = line.strip().partition(" ")
        word, rest = word.upper(), rest.strip()
        if word == "DEFAULT":
            default = rest
        elif word == "LABEL":
            current = labels.setdefault(rest, {})
        elif current is not None and word in ("KERNEL", "LINUX", "INITRD", "APPEND"):
            current["KERNEL" if word == "LINUX" else word] = rest
    entry = labels.get(default or "") or next(iter(labels.values()), {})
    if not entry.get("KERNEL"):
        raise UndercloudError(f"{conf.name}: no kernel in its default entry", "qcow2")
    return entry["KERNEL"], entry.get("INITRD", ""), entry.get("APPEND", "")


# ---- qcow2 -------------------------------------------------------------------------
def tree_size(root: Path) -> int:
    out = run(["du", "-sxb", str(root)]).stdout
    return int(out.split()[0])


@contextlib.contextmanager
def loop_mount(image: Path, offset: int, size: int):
    dev = run(["losetup", "-f", "--show", "-o", str(offset), "--sizelimit", str(size), str(image)]).stdout.strip()
    mnt = Path(tempfile.mkdtemp(prefix="uc-disk-"))
    try:
        run(["mount", dev, str(mnt)])
        try:
            yield mnt
        finally:
            run(["umount", str(mnt)])
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)
        mnt.rmdir()


def qcow2(root: Path, out: Path, log: Callable[[str], None], min_mb: int = 512, spare_mb: int = 256,
          tree: str = "/", element: str = "node-boot", efi: bool = False) -> Path:
    """A whole-disk image: MBR + one bootable ext4 partition with extlinux, made of `root`
    (the image's `tree`) with `spare_mb` free (a node's logs and first boot; a guest needs
    next to nothing). `efi`: also an EFI system partition before it (see the top)."""
    for tool, pkg in (("sfdisk", "fdisk"), ("mkfs.ext4", "e2fsprogs"), ("extlinux", "extlinux"),
                      ("qemu-img", "qemu-utils"), ("losetup", "mount")):
        require(tool, pkg)
    conf = root / "boot" / "extlinux" / "extlinux.conf"
    if not conf.exists():
        raise UndercloudError(f"the image has no {tree}boot/extlinux/extlinux.conf (add the {element} element)",
                              "qcow2")
    used = tree_size(root)
    fs_mb = max(min_mb, int(used / 2**20 * 1.25) + spare_mb)
    esp_mb = ESP_MB if efi else 0
    offset = (1 + esp_mb) * 2**20
    raw = out / "disk.raw"
    with open(raw, "wb") as f:
        f.truncate(offset + fs_mb * 2**20)
    # Partition 1 = root (growroot grows it: it must stay last), 2 = the ESP in front of it.
    table = f"label: dos\nstart={offset // 512}, type=83, bootable\n"
    if efi:
        table += f"start=2048, size={esp_mb * 2048}, type=ef\n"
    run(["sfdisk", "-q", "--no-reread", "--no-tell-kernel", str(raw)], input=table)
    # 64bit and metadata_csum are left out: extlinux (syslinux 6.04) cannot boot from them;
    # 4 KiB blocks always (a small file system gets 1 KiB ones, whose files extlinux fails to load).
    r = run(["mkfs.ext4", "-q", "-F", "-b", "4096", "-L", ROOT_LABEL, "-O", "^64bit,^metadata_csum",
             "-E", f"offset={offset}", "-d", str(root), str(raw), f"{fs_mb}M"])
    log(r.stdout + r.stderr)
    with loop_mount(raw, offset, fs_mb * 2**20) as mnt:
        r = run(["extlinux", "--install", str(mnt / "boot" / "extlinux")])
        log(r.stdout + r.stderr)
    with open(raw, "r+b") as f:
        f.write(MBR.read_bytes()[:440])
    if efi:
        kernel, initrd, append = extlinux_entry(conf)
        search = f"search --no-floppy --set=root --label {ROOT_LABEL}"
        esp = efi_fat(_grub_entry(kernel, initrd, append, search), out / "esp.img", esp_mb)
        with open(esp, "rb") as src, open(raw, "r+b") as dst:
            dst.seek(2**20)
            shutil.copyfileobj(src, dst)
        esp.unlink()
    path = out / "disk.qcow2"
    run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(path)], timeout=1800)
    raw.unlink()
    return path


# ---- deploy ramdisk ----------------------------------------------------------------
def newest_kernel(root: Path) -> Path:
    kernels = sorted((root / "boot").glob("vmlinuz-*"), key=lambda p: [int(x) if x.isdigit() else x
                                                                       for x in p.name.replace("-", ".").split(".")])
    if not kernels:
        raise UndercloudError("the image has no kernel in /boot (add the kernel element)", "ramdisk")
    return kernels[-1]


def ramdisk(root: Path, out: Path, name: str, log: Callable[[str], None]) -> tuple[Path, Path, Path]:
    """Kernel + initramfs (the whole root, /boot left out, /init first to run) + an ISO."""
    for tool, pkg in (("cpio", "cpio"), ("zstd", "zstd"), ("xorriso", "xorriso")):
        require(tool, pkg)
    if not (root / "init").exists():
        raise UndercloudError("the image has no /init (add the deploy-ramdisk element)", "ramdisk")
    kernel = out / "vmlinuz"
    shutil.copyfile(newest_kernel(root), kernel)
    initramfs = out / "initramfs"
    with open(initramfs, "wb") as f:
        find = subprocess.Popen(["find", ".", "-path", "./boot/*", "-prune", "-o", "-print"], cwd=root,
                                stdout=subprocess.PIPE)
        cpio = subprocess.Popen(["cpio", "-o", "-H", "newc", "--quiet"], cwd=root, stdin=find.stdout,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        zst = subprocess.run(["zstd", "-q", "-T0", "-10", "-c"], stdin=cpio.stdout, stdout=f,
                             stderr=subprocess.PIPE)
        assert find.stdout and cpio.stdout
        find.stdout.close()
        cpio.stdout.close()
        if find.wait() or cpio.wait() or zst.returncode:
            err = (cpio.stderr.read().decode(errors="replace") if cpio.stderr else "") + zst.stderr.decode()
            raise UndercloudError(f"making the initramfs failed: {err.strip()[-300:]}", "ramdisk")
    iso_dir = out / "iso"
    (iso_dir / "isolinux").mkdir(parents=True)
    shutil.copyfile(ISOLINUX, iso_dir / "isolinux" / "isolinux.bin")
    shutil.copyfile(LDLINUX, iso_dir / "isolinux" / "ldlinux.c32")
    (iso_dir / "isolinux" / "isolinux.cfg").write_text(
        f"SERIAL 0 115200\nDEFAULT deploy\nPROMPT 0\nTIMEOUT 1\nLABEL deploy\n"
        f"  KERNEL /vmlinuz\n  INITRD /initrd\n  APPEND {RAMDISK_ARGS}\n")
    os.link(kernel, iso_dir / "vmlinuz")
    os.link(initramfs, iso_dir / "initrd")
    (iso_dir / ISO_MARKER).write_text("the undercloud deploy ramdisk\n")
    search = f"search --no-floppy --set=root --file /{ISO_MARKER}"
    efi_fat(_grub_entry("/vmlinuz", "/initrd", RAMDISK_ARGS, search), iso_dir / "efiboot.img", 4)
    iso = out / "deploy.iso"
    # BIOS: isolinux (also as a hybrid MBR disk); UEFI: the FAT image as the second El Torito entry
    r = run(["xorriso", "-as", "mkisofs", "-quiet", "-o", str(iso), "-V", name[:32].upper().replace("-", "_"),
             "-J", "-r", "-b", "isolinux/isolinux.bin", "-c", "isolinux/boot.cat", "-no-emul-boot",
             "-boot-load-size", "4", "-boot-info-table", "-isohybrid-mbr", str(ISOHDPFX),
             "-eltorito-alt-boot", "-e", "efiboot.img", "-no-emul-boot", "-isohybrid-gpt-basdat", str(iso_dir)],
            timeout=900)
    log(r.stdout + r.stderr)
    shutil.rmtree(iso_dir)
    return kernel, initramfs, iso
