"""Root file systems: the debootstrap tree, cached layers stacked with overlayfs, chroots.

A build is a stack of layers, each a directory cached under $UNDERCLOUD_CACHE/layers/KEY:
the debootstrap tree at the bottom, then the upper directories of overlay mounts (packages,
element scripts, a service's own layer). Every layer is keyed by the content that made it,
so an unchanged layer is reused by every build and every UNDERCLOUD_HOME on the machine,
and a new layer costs only what changed (no copy of the tree below it).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from undercloud.config import cache_dir
from undercloud.errors import UndercloudError
from undercloud.host.run import require, run

SUITE = os.environ.get("UNDERCLOUD_DEBIAN_SUITE", "bookworm")  # a target's own suite, else this
MIRROR = os.environ.get("UNDERCLOUD_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SECURITY_MIRROR = os.environ.get("UNDERCLOUD_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
INCLUDE = ("python3",)  # the agent needs only python3
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def digest(*parts: object) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode() + b"\0")
    return h.hexdigest()


def debootstrap_key(suite: str = SUITE) -> str:
    return digest("debootstrap", 1, suite, MIRROR, "minbase", INCLUDE)


@contextlib.contextmanager
def locked(name: str, shared: bool = False) -> Iterator[None]:
    """A cross-process lock in the cache. `KEY`: held while making a layer, so two builds
    never make the same one twice. `KEY.use`: shared by every build using the layer,
    exclusive to replace it (--no-cache), so no layer is removed under a running build."""
    with open(_lock_path(name), "w") as f:
        fcntl.flock(f, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield


def _lock_path(name: str) -> Path:
    d = cache_dir() / "locks"
    d.mkdir(exist_ok=True)
    return d / name


def layer_dir(key: str) -> Path:
    return cache_dir() / "layers" / key


def layer_ready(key: str) -> bool:
    return (layer_dir(key).parent / f"{key}.done").exists() and layer_dir(key).is_dir()


def mark_ready(key: str, parent: str | None = None) -> None:
    """Record the layer as complete, with a fresh build id: layers above it are keyed by
    that id too, since an overlay upper is only valid over the very tree it was made on.
    The parent layer's key and build id are recorded for `prune_layers`."""
    p = f" {parent} {build_id(parent)}" if parent else ""
    (layer_dir(key).parent / f"{key}.done").write_text(f"{uuid.uuid4().hex} {time.strftime('%Y-%m-%dT%H:%M:%S')}{p}\n")


def build_id(key: str) -> str:
    """The id of the current build of a layer, or "unbuilt" (keys above it are provisional)."""
    try:
        return (layer_dir(key).parent / f"{key}.done").read_text().split()[0]
    except (FileNotFoundError, IndexError):
        return "unbuilt"


def touch(key: str) -> None:
    """Mark a layer as used now (pruning goes by last use)."""
    with contextlib.suppress(OSError):
        os.utime(layer_dir(key).parent / f"{key}.done")


def prune_layers(max_age_days: float = 7.0) -> list[str]:
    """Remove layers that can never be used again (the layer below them was rebuilt, so
    no key leads to them) and layers unused for `max_age_days`; skip any a build uses."""
    base = cache_dir() / "layers"
    if not base.is_dir():
        return []
    removed: list[str] = []
    changed = True
    while changed:  # removing a layer orphans the ones above it
        changed = False
        for done in base.glob("*.done"):
            key = done.name.removesuffix(".done")
            try:
                fields = done.read_text().split()
                age = time.time() - done.stat().st_mtime
            except OSError:
                continue
            orphan = len(fields) >= 4 and build_id(fields[2]) != fields[3]
            if not orphan and age < max_age_days * 86400:
                continue
            with open(_lock_path(f"{key}.use"), "w") as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # in use by a running build
                drop_layer(key)
            removed.append(key)
            changed = True
    return removed


def drop_layer(key: str) -> None:
    (layer_dir(key).parent / f"{key}.done").unlink(missing_ok=True)
    d = layer_dir(key)
    if d.exists():
        shutil.rmtree(d)


def make_debootstrap(key: str, log: Callable[[str], None], suite: str = SUITE) -> Path:
    """The bottom layer: Debian `suite` minbase with python3."""
    require("debootstrap", "debootstrap")
    dest = layer_dir(key)
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f"{key[:12]}.tmp-"))
    try:
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(INCLUDE)}", suite, str(tmp), MIRROR],
            capture_output=True, text=True)
        log(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
            raise UndercloudError(f"debootstrap {suite} from {MIRROR} failed: {tail[0]}", "root file system")
        os.rename(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    mark_ready(key)
    return dest


def clear_abandoned(parent: Path, key: str) -> None:
    """Remove `<key>.tmp-<pid>` left in `parent` by a build whose process is gone (killed:
    its cleanup never ran), overlay mounts under it first. Best effort: a build never fails
    for what another left behind."""
    prefix = f"{key}.tmp-"
    try:
        entries = [p for p in parent.iterdir() if p.name.startswith(prefix) and p.name[len(prefix):].isdigit()]
    except OSError:
        return
    for tmp in entries:
        if os.path.exists(f"/proc/{tmp.name[len(prefix):]}"):
            continue  # its build still runs
        try:
            points = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                      if len(line.split()) > 1 and (line.split()[1] + "/").startswith(f"{tmp}/")]
        except OSError:
            points = []
        for point in sorted(points, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


class Mounts:
    """Mounts made for one build, undone in reverse order whatever happens."""

    def __init__(self) -> None:
        self.points: list[Path] = []

    def mount(self, *args: str, target: Path) -> None:
        run(["mount", *args, str(target)])
        self.points.append(target)

    def unmount_all(self) -> None:
        errors = []
        while self.points:
            p = self.points.pop()
            r = subprocess.run(["umount", str(p)], capture_output=True, text=True)
            if r.returncode != 0:
                r = subprocess.run(["umount", "-l", str(p)], capture_output=True, text=True)
                if r.returncode != 0:
                    errors.append(f"{p}: {r.stderr.strip()}")
        if errors:
            raise UndercloudError("could not unmount " + "; ".join(errors), "image build")


@contextlib.contextmanager
def overlay(lowers: list[Path], upper: Path | None, work: Path) -> Iterator[Path]:
    """Mount lowers (top first) with `upper` on top, or read-only without one; yields the root."""
    work.mkdir(parents=True, exist_ok=True)
    merged = work.parent / (work.name + "-root")
    merged.mkdir(exist_ok=True)
    m = Mounts()
    try:
        if upper is None:
            opts = f"lowerdir={':'.join(str(p) for p in lowers)}"
            if len(lowers) == 1:  # overlay wants two lowers when read-only: read the one directly
                yield lowers[0]
                return
        else:
            upper.mkdir(parents=True, exist_ok=True)
            opts = f"lowerdir={':'.join(str(p) for p in lowers)},upperdir={upper},workdir={work}"
        m.mount("-t", "overlay", "overlay", "-o", opts, target=merged)
        yield merged
    finally:
        m.unmount_all()
        shutil.rmtree(work, ignore_errors=True)
        with contextlib.suppress(OSError):
            merged.rmdir()


@contextlib.contextmanager
def chroot_ready(root: Path) -> Iterator[None]:
    """/proc, /sys, /dev and name resolution inside `root`; services kept from starting."""
    m = Mounts()
    resolv = root / "etc" / "resolv.conf"
    saved = resolv.read_bytes() if resolv.is_file() and not resolv.is_symlink() else None
    policy = root / "usr" / "sbin" / "policy-rc.d"
    try:
        m.mount("-t", "proc", "proc", target=root / "proc")
        m.mount("-t", "sysfs", "sysfs", target=root / "sys")
        m.mount("--bind", "/dev", target=root / "dev")
        m.mount("--bind", "/dev/pts", target=root / "dev" / "pts")
        if resolv.is_symlink() or resolv.exists():
            resolv.unlink()
        shutil.copyfile("/etc/resolv.conf", resolv)
        policy.write_text("#!/bin/sh\n# undercloud image build: no services start in the chroot\nexit 101\n")
        policy.chmod(0o755)
        yield
    finally:
        m.unmount_all()
        policy.unlink(missing_ok=True)
        if saved is not None:
            resolv.write_bytes(saved)
        else:
            resolv.unlink(missing_ok=True)


def chroot_env(extra: dict | None = None, suite: str = SUITE) -> dict:
    env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive",
           "TMPDIR": "/tmp", "UNDERCLOUD_DEBIAN_SUITE": suite, "UNDERCLOUD_DEBIAN_MIRROR": MIRROR,
           "UNDERCLOUD_DEBIAN_SECURITY_MIRROR": SECURITY_MIRROR}
    env.update(extra or {})
    return env
