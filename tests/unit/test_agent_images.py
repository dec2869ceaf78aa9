"""The kube hook's service images on VM and bare-metal nodes: loaded from the image store
(sha256 checked), once per image even when a step and the background prefetch want it at
the same time. A stand-in `podman` on PATH records what it is asked to load; the image
store is a local HTTP server."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
import time
from pathlib import Path

import pytest

from undercloud.agent import engine, kube, pod_images, pod_spec

PODMAN = engine.PodmanEngine()  # the node's own podman (a fake one on the PATH here)

FAKE_PODMAN = """#!/bin/sh
# image exists REF | load -q -i FILE | tag SRC REF: images are files named by sha256(REF).
d="$FAKE_PODMAN_DIR"
key() { printf %s "$1" | sha256sum | cut -c1-16; }
case "$1 $2" in
  "image exists") test -e "$d/images/$(key "$3")" ;;
  "load -q") ref=$(cat "$4"); sleep 0.3; echo "$ref" >> "$d/loads"; touch "$d/images/$(key "$ref")";
             echo "Loaded image: $ref" ;;
  *) echo "fake podman: $*" >&2; exit 1 ;;
esac
"""


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A node's agent environment: the stand-in podman, a state dir, an image store."""
    bin_dir, fake = tmp_path / "bin", tmp_path / "podman"
    bin_dir.mkdir()
    (fake / "images").mkdir(parents=True)
    (bin_dir / "podman").write_text(FAKE_PODMAN)
    (bin_dir / "podman").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PODMAN_DIR", str(fake))
    monkeypatch.setenv("UNDERCLOUD_AGENT_STATE", str(tmp_path / "state"))
    # The archive of image N is just its reference (the stand-in podman "loads" that).
    blobs = {f"/v1/images/{n}/file": f"localhost/undercloud/service-{n}:1".encode() for n in ("a", "b", "c")}
    corrupt = {"/v1/images/bad/file"}

    class Store(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            body = blobs.get(self.path) or (b"x" if self.path in corrupt else None)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("X-Image-Sha256", hashlib.sha256(b"other" if self.path in corrupt else body).hexdigest())
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Store)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    monkeypatch.setenv("UNDERCLOUD_URL", f"http://127.0.0.1:{srv.server_address[1]}")
    sources = {f"localhost/undercloud/service-{n}:1": f"/v1/images/{n}/file" for n in ("a", "b", "c")}
    yield {"loads": fake / "loads", "sources": sources, "tmp": tmp_path}
    srv.shutdown()


def loads(node) -> list[str]:
    return node["loads"].read_text().split() if node["loads"].exists() else []


def pod(*images: str) -> dict:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": f"c{i}", "image": im}
                                                               for i, im in enumerate(images)]}}


def test_missing_images_are_loaded_once_and_present_ones_left(node):
    a, b = "localhost/undercloud/service-a:1", "localhost/undercloud/service-b:1"
    said = pod_images.ensure_images([pod(a, b), pod(a)], node["sources"], PODMAN)
    assert loads(node) == [a, b]
    assert said.count("loaded from the undercloud") == 2
    assert pod_images.ensure_images([pod(a, b)], node["sources"], PODMAN) == ""  # present: nothing done
    assert pod_images.ensure_images([pod("docker.io/library/other:1")], node["sources"], PODMAN) == ""  # no source: kube play's
    assert loads(node) == [a, b]


def test_a_step_and_the_prefetch_never_load_one_image_twice(node):
    refs = list(node["sources"])
    spec = pod_images.images_dir() / "prefetch-test.json"
    spec.write_text(json.dumps({"sources": node["sources"]}))
    bg = threading.Thread(target=pod_images.prefetch, args=(spec, kube.engine_for))
    bg.start()
    steps = [threading.Thread(target=pod_images.ensure_images, args=([pod(r)], node["sources"], PODMAN)) for r in reversed(refs)]
    for t in steps:
        t.start()
    for t in [bg, *steps]:
        t.join()
    assert sorted(loads(node)) == sorted(refs)  # each exactly once
    assert not spec.exists()


def test_prefetch_runs_detached_and_loads_the_later_steps_images(node):
    pod_images.start_prefetch(list(node["sources"]) + ["not-offered:1"], node["sources"], PODMAN)
    for _ in range(100):  # bounded: the detached process loads three stand-in images
        if len(loads(node)) == 3:
            break
        time.sleep(0.1)
    assert sorted(loads(node)) == sorted(node["sources"])


def test_a_corrupt_or_missing_download_fails_naming_the_image_and_loads_nothing(node):
    with pytest.raises(pod_spec.PodError, match=r"image bad:1: content from .*/v1/images/bad/file does not match"):
        pod_images.load_image("bad:1", "/v1/images/bad/file", PODMAN)
    with pytest.raises(pod_spec.PodError, match=r"image gone:1: cannot fetch .*/v1/images/gone/file: HTTP Error 404"):
        pod_images.load_image("gone:1", "/v1/images/gone/file", PODMAN)
    assert loads(node) == []
    assert [p.name for p in Path(pod_images.images_dir()).glob("download-*")] == []  # no partial archive left
