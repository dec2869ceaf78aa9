"""The kube hook with the node's own podman: `podman kube play` of a Pod (runc and
explicit ulimits, set by the agent itself), readiness probe, unchanged -> left running,
changed -> replaced. The image is a static busybox imported locally (no registry)."""

from __future__ import annotations

import os
import shutil
import tarfile
import urllib.request
import uuid

import pytest

from tests.conftest import need
from tests.unit.agent_support import deployment, free_port
from undercloud.agent import hooks

IMAGE = "localhost/uc-agent-test-busybox:1"


def podman(*args, **kw):
    from undercloud.host import podman as hp
    return hp.podman(*args, check=False, **kw)


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    need("podman")
    from undercloud.host import podman as hp
    reason = hp.available()
    if reason:
        pytest.skip(f"podman does not work here: {reason}")
    busybox = shutil.which("busybox")
    if not busybox:
        pytest.skip("busybox is not installed (the test image is made from it)")
    if not hp.image_exists(IMAGE):
        root = tmp_path_factory.mktemp("bb")
        tar = root / "rootfs.tar"
        with tarfile.open(tar, "w") as t:
            t.add(busybox, arcname="bin/busybox")
            for applet in ("sh", "httpd", "sleep", "cat"):
                info = tarfile.TarInfo(f"bin/{applet}")
                info.type, info.linkname = tarfile.SYMTYPE, "busybox"
                t.addfile(info)
        podman("import", "--change", "ENV=PATH=/bin", str(tar), IMAGE, timeout=120)
    return IMAGE


def pod(name: str, port: int, www: str, greeting: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"hostNetwork": True, "restartPolicy": "Always",
                     "volumes": [{"name": "www", "hostPath": {"path": www, "type": "Directory"}}],
                     "containers": [{
                         "name": "web", "image": IMAGE, "imagePullPolicy": "Never",
                         "command": ["httpd", "-f", "-p", f"127.0.0.1:{port}", "-h", "/www"],
                         "env": [{"name": "GREETING", "value": greeting}],
                         "volumeMounts": [{"name": "www", "mountPath": "/www", "readOnly": True}],
                         "readinessProbe": {"httpGet": {"path": "/index.html", "port": port}}}]}}


def test_kube_play_replaces_only_on_change(image, tmp_path):
    name = f"uc-agent-kube-{uuid.uuid4().hex[:8]}"
    port = free_port()
    www = tmp_path / "www"
    www.mkdir()
    (www / "index.html").write_text("served from a kube deployment\n")
    state = tmp_path / "state"
    state.mkdir()
    env = dict(os.environ, UNDERCLOUD_AGENT_STATE=str(state))
    opts = {"kube_mode": "podman", "ready_timeout": 60}

    def play(did, greeting):
        return hooks.run(deployment(did, "web", "kube", pod(name, port, str(www), greeting), options=opts),
                         None, 300, env)

    def pod_id():
        return podman("pod", "inspect", name, "--format", "{{.Id}}").stdout.strip()

    try:
        r1 = play("k1", "a")
        assert r1["deploy_status_code"] == 0, r1
        assert r1["pod_action"] == "created"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=10) as resp:
            assert resp.read() == b"served from a kube deployment\n"
        first = pod_id()
        r2 = play("k2", "a")
        assert r2["pod_action"] == "unchanged" and pod_id() == first
        r3 = play("k3", "b")
        assert r3["deploy_status_code"] == 0, r3
        assert r3["pod_action"] == "replaced" and pod_id() != first
        # The conf the agent wrote for podman: runc and explicit ulimits.
        conf = (state / "kube" / "containers.conf").read_text()
        assert 'runtime = "runc"' in conf and "nofile=20000:20000" in conf
    finally:
        podman("pod", "rm", "-f", name)


def test_pod_that_never_gets_ready_fails_with_the_probe_named(image, tmp_path):
    name = f"uc-agent-kube-{uuid.uuid4().hex[:8]}"
    port = free_port()
    bad = pod(name, port, str(tmp_path), "x")
    bad["spec"]["containers"][0]["command"] = ["sh", "-c", "echo 'cannot bind: no config' >&2; sleep 600"]
    state = tmp_path / "state"
    state.mkdir()
    env = dict(os.environ, UNDERCLOUD_AGENT_STATE=str(state))
    try:
        r = hooks.run(deployment("k9", "web", "kube", bad, options={"kube_mode": "podman", "ready_timeout": 3}),
                      None, 300, env)
        assert r["deploy_status_code"] == 1
        assert f"pod {name}: container web: readiness probe (HTTP GET :{port}/index.html) did not pass" \
            in r["deploy_stderr"]
    finally:
        podman("pod", "rm", "-f", name)
