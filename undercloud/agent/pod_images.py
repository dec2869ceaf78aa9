"""Service images a node's podman lacks, loaded from the undercloud's image store: the ones
a step's Pods name at once, the later steps' in a background prefetch (options.image_sources,
options.image_prefetch: VM and bare-metal nodes, container nodes on another host than the
undercloud's)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urljoin

from undercloud.agent import engine, files
from undercloud.agent.pod_spec import PodError


def images_dir() -> Path:
    path = engine.state_dir() / "images"
    path.mkdir(exist_ok=True)
    return path


def load_image(ref: str, source: str, eng: engine.Engine) -> str:
    """Load `ref` into the node's podman (`eng`: podman, its own; netns, its host's API)
    from the undercloud's image store unless it is there; `source` is its download path
    (`/v1/images/ID/file`, public by id) on the undercloud (UNDERCLOUD_URL), the content
    checked against the X-Image-Sha256 the store sends. One image at a time per reference
    (a lock file): a step's hook and the background prefetch never load one twice. Returns
    what it did ("" when present)."""
    import fcntl

    work = images_dir()
    key = hashlib.sha256(ref.encode()).hexdigest()[:16]
    with open(work / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if eng.image_exists(ref):
            return ""
        url = urljoin(os.environ.get("UNDERCLOUD_URL", "").rstrip("/") + "/", str(source))
        archive = work / f"download-{key}.tar"  # ours alone while we hold the image's lock
        started = time.monotonic()
        try:
            try:  # checked against the X-Image-Sha256 the store sends (none: refused)
                files.download(url, archive, mode=0o600, durable=False)  # loaded, then removed: no fsync
            except files.VerifyError as exc:
                raise PodError(f"image {ref}: content from {url} does not match its sha256 ({exc})") from None
            except OSError as exc:
                raise PodError(f"image {ref}: cannot fetch {url}: {exc}") from None
            loaded = eng.image_load(ref, archive)
            if not eng.image_exists(ref):
                eng.image_tag(ref, loaded)
        finally:
            archive.unlink(missing_ok=True)
        return f"image {ref}: loaded from the undercloud in {time.monotonic() - started:.1f} s\n"


def ensure_images(pods: list[dict], sources: dict, eng: engine.Engine) -> str:
    """Load each image the Pods name that the node's podman lacks and `sources`
    (options.image_sources: reference -> download path) offers."""
    refs = dict.fromkeys(c.get("image") for p in pods for c in (p.get("spec") or {}).get("containers") or [])
    return "".join(load_image(ref, sources[ref], eng) for ref in refs if ref and ref in sources)


def start_prefetch(refs: list, sources: dict, eng: engine.Engine) -> None:
    """Load the images the node's later steps need (options.image_prefetch) in a detached
    process, so they download and load while this step's services start; a step that
    needs one still loading waits for it (the per-image lock). Failures are left to the
    step that needs the image, which reports them."""
    todo = [r for r in dict.fromkeys(refs or []) if isinstance(r, str) and r in sources]
    if not todo:
        return
    spec = images_dir() / f"prefetch-{os.getpid()}.json"
    files.write_atomic(spec, json.dumps({"sources": {r: sources[r] for r in todo}, "mode": eng.name}))
    with open(images_dir() / "prefetch.log", "ab") as log:
        subprocess.Popen([sys.executable, "-m", "undercloud.agent", "prefetch-images", str(spec)],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=engine.podman_env())


def prefetch(spec_file: Path, engine_for: Callable[[str], engine.Engine]) -> int:
    """`prefetch-images`: one at a time per node (a second one exits at once); the spec
    names its engine's mode, `engine_for` (kube.engine_for) makes it."""
    import fcntl

    try:
        spec = json.loads(spec_file.read_text())
        sources, eng = spec["sources"], engine_for(spec.get("mode", "podman"))
    finally:
        spec_file.unlink(missing_ok=True)
    with open(images_dir() / "prefetch.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0
        for ref, source in sources.items():
            try:
                sys.stdout.write(load_image(ref, source, eng))
            except (OSError, PodError, subprocess.SubprocessError) as exc:
                sys.stdout.write(f"prefetch: {exc}\n")
            sys.stdout.flush()
    return 0
