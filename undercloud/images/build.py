"""The image builder: elements -> cached layers -> outputs (oci, qcow2, ramdisk).

Stages, each cached by the content that made it (see rootfs.py):
  1. debootstrap     Debian minbase + python3                       key: suite, mirror
  2. packages        root.d, pre-install.d, apt-get install of all   key: 1 + package lists +
                     elements' package-installs                           those phase scripts
  3. image           static/, extra-data.d, install.d, post-install.d, key: 2 + every element
                     finalise.d                                           file + the agent source
  4. outputs         oci / qcow2 / ramdisk / guest from the stack      key: 3 + output type
A service image (layer_on) builds its shared base layer with stages 1-3, then its own two:
  service-packages   its root.d, pre-install.d and apt-get install      key: 3 + its package
                                                                          lists + those scripts
  service            its static/, extra-data.d, install.d, ...         key: the layer below +
                                                                          its element files
so a variant that changes a script or a static file (a start command, a marker) reuses the
packages layer and its podman image: seconds, not the minute of apt-get. The podman image
has exactly those three layers (base, service packages, service files).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from undercloud.errors import UndercloudError
from undercloud.images import disk, elements, payload, rootfs
from undercloud.images.store import sha256_file
from undercloud.server_types import BAREMETAL, CONTAINER, VM

BUILDER_VERSION = 1
KEEP_OUTPUTS = 2  # cached outputs kept per image and type
IN_USE_SECONDS = 900  # ... and any used this recently (a concurrent build may be uploading it)
PARENT = {"packages": "debootstrap", "image": "packages", "service-packages": "image", "service": "service-packages"}
AGENT_SRC = Path(__file__).resolve().parent.parent  # the `undercloud` package directory
AGENT_CMD = ["python3", "-m", "undercloud.agent", "run"]
PAYLOAD_ELEMENT = "undercloud-worker"  # copies the whole undercloud into the image (images/payload.py)
SERVICE_CMD = ["/usr/local/bin/uc-start"]  # from the service-base element
HYPERVISORS = {"oci": (CONTAINER,), "qcow2": (VM, BAREMETAL), "ramdisk": (BAREMETAL,), "guest": ()}
# Output formats revised since BUILDER_VERSION (in their key: only their outputs are made again)
OUTPUT_FORMATS = {"qcow2": "uefi", "ramdisk": "uefi"}  # + an EFI system partition / EFI El Torito image
GUEST_TREE = "guest"  # a guest output is the disk made of this directory of the image tree


class BuildFailed(UndercloudError):
    pass


@dataclass(frozen=True)
class Target:
    name: str
    type: str  # oci | qcow2 | ramdisk | guest
    elements: tuple[str, ...]
    layer_on: tuple[str, ...] = ()  # service images: elements of the shared base layer
    elements_path: tuple[Path, ...] = ()
    suite: str = ""  # the Debian release it is made of (catalog.RELEASES); "" for rootfs.SUITE

    @property
    def debian(self) -> str:
        return self.suite or rootfs.SUITE

    @property
    def cache_group(self) -> str:
        """The outputs kept together in the cache (prune_outputs): one image, type and suite."""
        return f"{self.label} on {self.debian}"

    @property
    def label(self) -> str:
        return f"{self.name} ({self.type})"

    def with_elements_path(self, paths: tuple[Path, ...]) -> Target:
        return replace(self, elements_path=tuple(paths)) if paths else self


@dataclass
class Artifact:
    role: str  # oci | disk | kernel | initramfs | iso
    path: Path
    sha256: str
    size: int
    disk_format: str


@dataclass
class Result:
    target: Target
    key: str
    up_to_date: bool = False
    current: list[dict] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    properties: dict = field(default_factory=dict)

    def registrations(self) -> list[dict]:
        """What to register: qcow2 once per hypervisor type (one content), a ramdisk as
        kernel + initramfs + an ISO pointing at both."""
        t, props = self.target, self.properties
        by = {a.role: a for a in self.artifacts}
        if t.type == "ramdisk":
            base = {**props, "hypervisor_type": BAREMETAL}
            return [
                {"name": f"{t.name}-kernel", "disk_format": "aki", "sha256": by["kernel"].sha256, "properties": base},
                {"name": f"{t.name}-initramfs", "disk_format": "ari", "sha256": by["initramfs"].sha256,
                 "properties": base},
                {"name": t.name, "disk_format": "iso", "sha256": by["iso"].sha256,
                 "properties": {**base, "kernel_id": "#0", "ramdisk_id": "#1"}},
            ]
        if t.type == "guest":  # no hypervisor_type: the undercloud never boots its own servers on it
            return [{"name": t.name, "disk_format": "qcow2", "sha256": by["disk"].sha256,
                     "properties": {**props, "usage": "guest"}}]
        art = by["oci"] if t.type == "oci" else by["disk"]
        return [{"name": t.name, "disk_format": art.disk_format, "sha256": art.sha256,
                 "properties": {**props, "hypervisor_type": ht}} for ht in HYPERVISORS[t.type]]


def agent_digest() -> str:
    """What the agent element copies: undercloud/__init__.py and undercloud/agent/."""
    h = rootfs.digest("agent")
    files = [AGENT_SRC / "__init__.py", *sorted((AGENT_SRC / "agent").rglob("*"))]
    for p in files:
        if not p.is_file() or "__pycache__" in p.parts or p.suffix == ".pyc":
            continue
        h = rootfs.digest(h, str(p.relative_to(AGENT_SRC)), p.read_bytes())
    return h


class Builder:
    def __init__(self, target: Target, progress: Callable[[str], None], log_dir: Path, no_cache: bool):
        self.t, self.progress, self.no_cache = target, progress, no_cache
        log_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.log_path = log_dir / f"{target.name}-{target.type}-{stamp}.log"
        self.log_file = None  # opened at the first line: a builder asked only for its keys writes no file
        self.all_elements = elements.resolve(target.layer_on + target.elements, target.elements_path)
        if target.layer_on:
            self.base_elements = elements.resolve(target.layer_on, target.elements_path)
            base_names = {e.name for e in self.base_elements}
            self.own_elements = [e for e in self.all_elements if e.name not in base_names]
        else:
            self.base_elements, self.own_elements = self.all_elements, []
        self.keys = self._plan()
        self.held = contextlib.ExitStack()  # shared use-locks on the layers this build reads

    # ---- keys ----------------------------------------------------------------------
    def _plan(self) -> dict[str, str]:
        """Each layer's key: what made it + the build of the layer below (see rootfs.build_id)."""
        d = rootfs.debootstrap_key(self.t.debian)
        p = rootfs.digest("packages", d, rootfs.build_id(d), rootfs.SECURITY_MIRROR,
                          sorted(elements.packages(self.base_elements)),
                          [(e.name, e.digest(elements.PACKAGE_PHASES)) for e in self.base_elements
                           if any(e.scripts(ph) for ph in elements.PACKAGE_PHASES)])
        uses_agent = any(e.name == "agent" for e in self.all_elements)
        i = rootfs.digest("image", p, rootfs.build_id(p), BUILDER_VERSION,
                          [(e.name, e.digest()) for e in self.base_elements],
                          agent_digest() if uses_agent else None)
        keys = {"debootstrap": d, "packages": p, "image": i}
        top = i
        if self.own_elements:
            sp = keys["service-packages"] = rootfs.digest(
                "service-packages", i, rootfs.build_id(i), sorted(elements.packages(self.own_elements)),
                [(e.name, e.digest(elements.PACKAGE_PHASES)) for e in self.own_elements
                 if any(e.scripts(ph) for ph in elements.PACKAGE_PHASES)])
            # the undercloud itself in the image (element undercloud-worker): its code and pins
            payload_key = [payload.digest()] if any(e.name == PAYLOAD_ELEMENT for e in self.own_elements) else []
            top = keys["service"] = rootfs.digest("service", sp, rootfs.build_id(sp),
                                                  [(e.name, e.digest()) for e in self.own_elements],
                                                  agent_digest() if uses_agent else None, *payload_key)
        fmt = [OUTPUT_FORMATS[self.t.type]] if self.t.type in OUTPUT_FORMATS else []
        keys["output"] = rootfs.digest("output", top, rootfs.build_id(top), self.t.type, BUILDER_VERSION, *fmt)
        return keys

    @property
    def key(self) -> str:
        return self.keys["output"]

    def properties(self) -> dict:
        props = {
            "build_key": self.key,
            "elements": {e.name: e.digest()[:12] for e in self.all_elements},
            "os_distro": "debian", "os_version": self.t.debian,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        if any(e.name == "agent" for e in self.all_elements):
            props["agent_digest"] = agent_digest()[:12]
        return props

    # ---- logging -------------------------------------------------------------------
    def say(self, msg: str) -> None:
        line = f"[{self.t.label}] {msg}"
        self.progress(line)
        self.log(line + "\n")

    def log(self, text: str) -> None:
        if self.log_file is None:
            self.log_file = open(self.log_path, "a")  # noqa: SIM115 - closed when the build ends
        self.log_file.write(text)
        self.log_file.flush()

    # ---- stages --------------------------------------------------------------------
    def layer(self, stage: str, lowers: list[Path], make: Callable[[Path], None]) -> Path:
        key = self.keys[stage]
        with rootfs.locked(key):
            if rootfs.layer_ready(key) and not self.no_cache:
                self.say(f"{stage}: cached ({key[:12]})")
                rootfs.touch(key)
                self.held.enter_context(rootfs.locked(f"{key}.use", shared=True))
                return rootfs.layer_dir(key)
            start = time.monotonic()
            with rootfs.locked(f"{key}.use"):  # waits for builds still using the old one
                rootfs.drop_layer(key)
                path = self._make_layer(stage, key, lowers, make)
            self.held.enter_context(rootfs.locked(f"{key}.use", shared=True))
            self.say(f"{stage}: done in {time.monotonic() - start:.1f} s ({key[:12]})")
            return path

    def _make_layer(self, stage: str, key: str, lowers: list[Path], make: Callable[[Path], None]) -> Path:
        if stage == "debootstrap":
            self.say(f"{stage}: debootstrap {self.t.debian} minbase from {rootfs.MIRROR}")
            return rootfs.make_debootstrap(key, self.log, self.t.debian)
        tmp = rootfs.layer_dir(key).parent / f"{key}.tmp-{os.getpid()}"
        rootfs.clear_abandoned(tmp.parent, key)
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            with rootfs.overlay(lowers, tmp / "upper", tmp / "work") as merged:
                make(merged)
            os.rename(tmp / "upper", rootfs.layer_dir(key))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        rootfs.mark_ready(key, parent=self.keys[PARENT[stage]])
        return rootfs.layer_dir(key)

    def run_phase(self, root: Path, els: list[elements.Element], phase: str) -> None:
        for el, script in elements.phase_scripts(els, phase):
            self.say(f"{phase}: {el.name}/{script.name}")
            env = rootfs.chroot_env({"ELEMENT": el.name, "PHASE": phase, "IMAGE_NAME": self.t.name,
                                     "IMAGE_TYPE": self.t.type}, self.t.debian)
            if phase in elements.OUTSIDE:
                env.update(TARGET_ROOT=str(root), ELEMENT_DIR=str(el.path), UNDERCLOUD_SRC=str(AGENT_SRC),
                           UNDERCLOUD_PYTHON=sys.executable)
                argv = [str(script)]
            else:
                inside = root / "tmp" / "uc-element"
                shutil.rmtree(inside, ignore_errors=True)
                shutil.copytree(el.path, inside, symlinks=True)
                env["ELEMENT_DIR"] = "/tmp/uc-element"
                argv = ["chroot", str(root), f"/tmp/uc-element/{phase}/{script.name}"]
            try:
                self._run(argv, env, f"element {el.name!r} failed in phase {phase} (script {script.name})")
            finally:
                if phase not in elements.OUTSIDE:
                    shutil.rmtree(root / "tmp" / "uc-element", ignore_errors=True)

    def _run(self, argv: list[str], env: dict, what: str) -> None:
        self.log(f"$ {shlex.join(argv)}\n")
        proc = subprocess.Popen(argv, env={**os.environ, **env} if argv[0] != "chroot" else env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        tail: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            self.log(line)
            tail = (tail + [line.rstrip()])[-20:]
        code = proc.wait()
        if code != 0:
            last = next((t for t in reversed(tail) if t.strip()), "no output")
            raise BuildFailed(f"{what}, exit {code}: {last} (log: {self.log_path})", self.t.label)

    def install_packages(self, root: Path, els: list[elements.Element]) -> None:
        pkgs = elements.packages(els)
        if not pkgs:
            return
        self.say(f"packages: apt-get install {' '.join(sorted(pkgs))}")
        env = rootfs.chroot_env(suite=self.t.debian)
        self._run(["chroot", str(root), "apt-get", "-q", "update"], env, "apt-get update failed")
        try:
            self._run(["chroot", str(root), "apt-get", "-q", "-y", "--no-install-recommends",
                       "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold",
                       "install", *sorted(pkgs)], env, "package-installs failed")
        except BuildFailed as exc:
            # Name the element that asked for a package apt cannot find.
            for pkg, owner in pkgs.items():
                if f"package {pkg}" in exc.message:
                    raise BuildFailed(f"element {owner!r} failed in phase package-installs: "
                                      f"{exc.message}", self.t.label) from None
            raise

    def make_packages(self, els: list[elements.Element], clean: bool = False) -> Callable[[Path], None]:
        def make(root: Path) -> None:
            self.run_phase(root, els, "root.d")
            with rootfs.chroot_ready(root):
                self.run_phase(root, els, "pre-install.d")
                self.install_packages(root, els)
                if clean:  # a service's packages: the base's clean-up ran in the layers below
                    self._run(["chroot", str(root), "sh", "-c", "apt-get clean; rm -rf /var/lib/apt/lists/*"],
                              rootfs.chroot_env(suite=self.t.debian), "clean-up failed")
        return make

    def make_image(self, els: list[elements.Element]) -> Callable[[Path], None]:
        def make(root: Path) -> None:
            for el in els:
                static = el.path / "static"
                if static.is_dir():
                    self.say(f"static: {el.name}")
                    # as digest(): bytecode a test left beside a script is no part of the element
                    shutil.copytree(static, root, symlinks=True, dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns("__pycache__"))
            self.run_phase(root, els, "extra-data.d")
            with rootfs.chroot_ready(root):
                for phase in ("install.d", "post-install.d", "finalise.d"):
                    self.run_phase(root, els, phase)
        return make

    def stack(self) -> list[Path]:
        """Build (or reuse) every layer; returns the stack, top first. Keys are re-planned
        after each layer, as a rebuilt layer changes the keys of those above it."""
        d = self.layer("debootstrap", [], lambda _root: None)
        self.keys = self._plan()
        p = self.layer("packages", [d], self.make_packages(self.base_elements))
        self.keys = self._plan()
        i = self.layer("image", [p, d], self.make_image(self.base_elements))
        self.keys = self._plan()
        if not self.own_elements:
            return [i, p, d]
        sp = self.layer("service-packages", [i, p, d], self.make_packages(self.own_elements, clean=True))
        self.keys = self._plan()
        s = self.layer("service", [sp, i, p, d], self.make_image(self.own_elements))
        self.keys = self._plan()
        return [s, sp, i, p, d]

    # ---- outputs -------------------------------------------------------------------
    def cached_outputs(self) -> list[Artifact] | None:
        out = rootfs.cache_dir() / "outputs" / self.key
        manifest = out / "manifest.json"
        if self.no_cache or not manifest.exists():
            return None
        self.say(f"outputs: cached ({self.key[:12]})")
        data = json.loads(manifest.read_text())
        if not isinstance(data, dict):  # an older manifest format: make the outputs again
            return None
        arts = [Artifact(a["role"], out / a["file"], a["sha256"], a["size"], a["disk_format"])
                for a in data["artifacts"]]
        os.utime(manifest)  # recently used: kept by prune_outputs
        if self.t.type == "oci":
            disk.ensure_podman_image(self.podman_ref, arts[0].path, self.say)
        return arts

    def outputs(self) -> list[Artifact]:
        arts = self.cached_outputs()  # every layer built and the outputs made: a new home only uploads
        if arts is not None:
            return arts
        layers = self.stack()
        with rootfs.locked(self.key):
            # Another build of the same content (another home) may have made them while we
            # waited for the lock: take those, never remove what it may be uploading.
            arts = None if self.no_cache else self.cached_outputs()
            if arts is not None:
                return arts
            out = rootfs.cache_dir() / "outputs" / self.key
            manifest = out / "manifest.json"
            shutil.rmtree(out, ignore_errors=True)
            tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
            rootfs.clear_abandoned(out.parent, self.key)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            try:
                start = time.monotonic()
                with rootfs.overlay(layers, None, tmp / "work") as root:
                    arts = self.make_outputs(root, layers, tmp)
                self.say(f"outputs: {self.t.type} done in {time.monotonic() - start:.1f} s")
                shutil.rmtree(tmp / "work", ignore_errors=True)
                for a in arts:
                    a.path = out / a.path.name
                # The manifest goes in with the outputs (one rename): a directory without
                # one is never seen by another build.
                (tmp / manifest.name).write_text(json.dumps({"label": self.t.cache_group, "artifacts": [
                    {"role": a.role, "file": a.path.name, "sha256": a.sha256, "size": a.size,
                     "disk_format": a.disk_format} for a in arts]}))
                os.rename(tmp, out)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        prune_outputs(self.t.cache_group, self.say)
        for key in rootfs.prune_layers():
            self.say(f"pruned cached layer {key[:12]}")
        return arts

    @property
    def podman_ref(self) -> str:
        return f"localhost/undercloud/{self.t.name}:{self.key[:16]}"

    def make_outputs(self, root: Path, layers: list[Path], out: Path) -> list[Artifact]:
        def art(role: str, path: Path, fmt: str) -> Artifact:
            return Artifact(role, path, sha256_file(path), path.stat().st_size, fmt)

        if self.t.type == "oci":
            archive = out / "image.oci.tar"
            if self.own_elements:
                base_ref = f"localhost/undercloud/{self.t.layer_on[-1]}:{self.keys['image'][:16]}"
                self.say(f"oci: base layer {base_ref}")
                # one import of the shared base, whatever the service images building at once
                with rootfs.locked(f"{self.keys['image']}.podman"), \
                        rootfs.overlay(layers[2:], None, out / "work-base") as base_root:
                    disk.oci_import(base_root, base_ref, SERVICE_CMD)
                # kept in podman under its own tag: a variant of the service's files builds on it
                packages_ref = f"localhost/undercloud/{self.t.name}-packages:{self.keys['service-packages'][:16]}"
                self.say(f"oci: service packages layer {packages_ref}")
                disk.oci_layer(layers[1], base_ref, packages_ref, out, SERVICE_CMD)
                self.say(f"oci: service layer -> {self.podman_ref}")
                disk.oci_layer(layers[0], packages_ref, self.podman_ref, out, SERVICE_CMD)
            else:
                self.say(f"oci: podman import -> {self.podman_ref}")
                disk.oci_import(root, self.podman_ref, AGENT_CMD)
            self.say("oci: podman save (oci-archive) for the image store")
            disk.oci_save(self.podman_ref, archive)
            return [art("oci", archive, "oci")]
        if self.t.type == "qcow2":
            self.say("qcow2: partition, ext4, extlinux, EFI system partition (GRUB), qemu-img convert")
            path = disk.qcow2(root, out, self.log, efi=True)
            return [art("disk", path, "qcow2")]
        if self.t.type == "guest":
            self.say(f"guest: /{GUEST_TREE} as a disk: partition, ext4, extlinux, qemu-img convert")
            path = disk.qcow2(root / GUEST_TREE, out, self.log, min_mb=16, spare_mb=4,
                              tree=f"/{GUEST_TREE}/", element="guest-tiny")
            return [art("disk", path, "qcow2")]
        if self.t.type == "ramdisk":
            self.say("ramdisk: kernel, initramfs (cpio + zstd), ISO (isolinux; GRUB for UEFI)")
            kernel, initramfs, iso = disk.ramdisk(root, out, self.t.name, self.log)
            return [art("kernel", kernel, "aki"), art("initramfs", initramfs, "ari"), art("iso", iso, "iso")]
        raise UndercloudError(f"unknown output type {self.t.type!r}", "--type")


def prune_outputs(group: str, say: Callable[[str], None], keep: int = KEEP_OUTPUTS) -> None:
    """Keep the `keep` most recently used outputs of one image, type and Debian suite
    (`group`: Target.cache_group); older ones go, so the shared cache does not grow with
    every agent or element change, and an image of one release never pushes out another's.
    Their podman tags
    stay: an image registered in some home may still name them (and the store holds the
    archive to load them back from)."""
    base = rootfs.cache_dir() / "outputs"
    found = []
    for d in base.iterdir():
        m = d / "manifest.json"
        try:
            data = json.loads(m.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):  # an older manifest format: never read again
            found.append((0.0, d))
        elif _group(data.get("label")) == group:
            found.append((m.stat().st_mtime, d))
    stale = [d for t, d in found if t == 0.0]
    # Outputs used in the last minutes stay whatever their rank: another home's build may
    # have just taken them and still be uploading them to its image store.
    recent = time.time() - IN_USE_SECONDS
    for d in stale + [d for t, d in sorted((f for f in found if f[0]), reverse=True)[keep:] if t < recent]:
        with rootfs.locked(d.name):
            shutil.rmtree(d, ignore_errors=True)
        say(f"pruned cached outputs {d.name[:12]}")


def _group(label) -> str:
    """A manifest's group; one written before suites were per image says only its label (bookworm)."""
    label = str(label)
    return label if " on " in label else f"{label} on bookworm"


def plan(target: Target) -> str:
    """The content key of what `target` would build (cheap: hashes files, no network)."""
    return Builder(target, lambda _m: None, rootfs.cache_dir() / "logs", False).key


def build(target: Target, *, no_cache: bool = False, registered: list[dict] | None = None,
          progress: Callable[[str], None] = print, log_dir: Path | None = None) -> Result:
    """Build `target` unless images with its content key are registered already."""
    if os.geteuid() != 0:
        raise UndercloudError("building images needs root (debootstrap, chroot, overlay and loop mounts)",
                              "image build")
    b = Builder(target, progress, log_dir or rootfs.cache_dir() / "logs", no_cache)
    try:
        key = b.key
        current = [r for r in registered or [] if r.get("properties", {}).get("build_key") == key
                   and r.get("status") == "active"]
        if not no_cache and _covers(current, target):
            return Result(target, key, up_to_date=True, current=current)
        b.say(f"building from elements {' '.join(e.name for e in b.all_elements)}")
        arts = b.outputs()
        props = b.properties()
        if target.type == "oci":
            props["podman_image"] = b.podman_ref
        return Result(target, b.key, artifacts=arts, properties=props)
    finally:
        b.held.close()
        if b.log_file is not None:
            b.log_file.close()


def registered_build(target: Target, registered: list[dict]) -> list[dict] | None:
    """The registered images `build` would find up to date for `target` (its content key,
    computed without building: a dry run), or None when it would build."""
    b = Builder(target, lambda _line: None, rootfs.cache_dir() / "logs", False)
    try:
        key = b.key
    except (OSError, UndercloudError):
        return None  # the key needs a layer not built yet: it would build
    finally:
        b.held.close()
    current = [r for r in registered if r.get("properties", {}).get("build_key") == key
               and r.get("status") == "active"]
    return current if _covers(current, target) else None


def _covers(current: list[dict], target: Target) -> bool:
    if target.type == "ramdisk":
        return any(r["disk_format"] == "iso" for r in current)
    if target.type == "guest":
        return any(r["disk_format"] == "qcow2" for r in current)
    have = {r.get("hypervisor_type") for r in current}
    return all(ht in have for ht in HYPERVISORS[target.type])
