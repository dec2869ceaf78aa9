#!/usr/bin/env python3
"""Image builds: cold build and cached rebuild time of each output, and what takes the space.

    python3 bench/image_bench.py [--cache DIR] [--keep]

Cold = an empty build cache (a fresh $UNDERCLOUD_CACHE, debootstrap included, paid by the
first image; podman tags of the same content removed first when no container uses them).
Warm = the same command again (the registered image is up to date). Fresh home = a new
UNDERCLOUD_HOME on the warm cache (outputs reused, content uploaded and registered).
Runs the real CLI; needs root, debootstrap, podman and network access to the Debian mirror.
Prints figures; it never fails on timing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from undercloud.host import podman as hp  # noqa: E402
from undercloud.images import catalog, rootfs  # noqa: E402
from undercloud.images.build import Builder  # noqa: E402

TARGETS = [("overcloud-full", "oci"), ("overcloud-full", "qcow2"), ("deploy-ramdisk", "ramdisk"),
           ("service-memcached", "oci"), ("service-haproxy", "oci")]


def cli(env: dict, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "undercloud", *args], capture_output=True, text=True, env=env,
                       timeout=3600)
    took = time.monotonic() - start
    if r.returncode != 0:
        sys.exit(f"`undercloud {' '.join(args)}` failed:\n{r.stderr}")
    return took, r


def stage_times(stderr: str) -> str:
    found = re.findall(r"\] (\w+): (?:\w+ )?done in ([\d.]+) s", stderr)
    return ", ".join(f"{stage} {float(s):.0f}s" for stage, s in found) or "-"


def space(target, top: int = 6) -> tuple[int, list[tuple[int, str]]]:
    """Size of the image's file tree and its largest directories (two levels down)."""
    b = Builder(target, lambda _m: None, Path(tempfile.gettempdir()), False)
    order = ["service", "image", "packages", "debootstrap"]
    layers = [rootfs.layer_dir(b.keys[k]) for k in order if k in b.keys]
    work = Path(tempfile.mkdtemp(prefix="uc-bench-"))
    try:
        with rootfs.overlay(layers, None, work / "w") as root:
            total = int(subprocess.run(["du", "-sxb", str(root)], capture_output=True, text=True).stdout.split()[0])
            out = subprocess.run(["du", "-xb", "--max-depth=3", str(root)], capture_output=True, text=True).stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for line in out.splitlines():
        size, path = line.split("\t", 1)
        rel = "/" + os.path.relpath(path, root) if path != str(root) else "/"
        if rel.count("/") == 3 or rel in ("/boot", "/opt"):
            rows.append((int(size), rel))
    return total, sorted(rows, reverse=True)[:top]


def mb(n: float) -> str:
    return f"{n / 2**20:.0f} MB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, help="Build cache for the cold run (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="Keep the temporary cache and homes")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("image_bench: needs root (debootstrap, chroot, mounts)")
    cache = args.cache or Path(tempfile.mkdtemp(prefix="uc-bench-cache-"))
    homes = Path(tempfile.mkdtemp(prefix="uc-bench-home-"))
    env = {**os.environ, "UNDERCLOUD_CACHE": str(cache), "UNDERCLOUD_HOME": str(homes / "a")}
    os.environ["UNDERCLOUD_CACHE"] = str(cache)
    results = []
    try:
        for name, typ in TARGETS:
            target = catalog.targets(name, (typ,))[0]
            if typ == "oci":  # an honest cold oci build: import again unless a container uses the tag
                ref = f"localhost/undercloud/{name}:{Builder(target, lambda _m: None, homes, False).key[:16]}"
                hp.podman("rmi", ref, check=False)
            cold, r = cli(env, "image", "build", name, "--type", typ, "-f", "json")
            arts = json.loads(r.stdout)
            warm, r2 = cli(env, "image", "build", name, "--type", typ)
            assert "up to date" in r2.stderr
            fresh_env = {**env, "UNDERCLOUD_HOME": str(homes / f"fresh-{name}-{typ}")}
            fresh, _ = cli(fresh_env, "image", "build", name, "--type", typ)
            subprocess.run([sys.executable, "-m", "undercloud", "service", "stop"], env=fresh_env,
                           capture_output=True)
            tree, top = space(target)
            sizes = {a["disk_format"]: a["size"] for a in arts}
            results.append((name, typ, cold, warm, fresh, stage_times(r.stderr), sizes, tree, top))
            print(f"{name} ({typ}): cold {cold:.1f} s [{stage_times(r.stderr)}], warm {warm:.1f} s, "
                  f"fresh home {fresh:.1f} s", flush=True)
    finally:
        subprocess.run([sys.executable, "-m", "undercloud", "service", "stop"], env=env, capture_output=True)
        if not args.keep:
            shutil.rmtree(homes, ignore_errors=True)
            if not args.cache:
                shutil.rmtree(cache, ignore_errors=True)

    print("\n=== build times (goal: cached rebuild < 5 s)")
    print(f"{'image':<28} {'cold':>8} {'warm':>7} {'fresh home':>11}  ratio cold/warm  stages (cold)")
    for name, typ, cold, warm, fresh, stages, *_ in results:
        print(f"{name + ' (' + typ + ')':<28} {cold:>7.1f}s {warm:>6.1f}s {fresh:>10.1f}s  {cold / warm:>14.0f}x  {stages}")
    print("\n=== sizes (stored content; file tree; largest directories)")
    for name, typ, *_, sizes, tree, top in results:
        stored = ", ".join(f"{fmt} {mb(s)}" for fmt, s in sizes.items())
        print(f"{name} ({typ}): {stored}; tree {mb(tree)}")
        print("    " + ", ".join(f"{p} {mb(s)}" for s, p in top))


if __name__ == "__main__":
    main()
