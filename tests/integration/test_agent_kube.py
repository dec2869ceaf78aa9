"""The kube hook on real podman. With the node's own podman: `podman kube play` of a Pod
(runc and explicit ulimits, set by the agent itself), readiness probe, unchanged -> left
running, changed -> replaced, a hostNetwork Pod named after the node, exec probes inside the
container. On a container node (netns mode, through the podman API): containers in the node
container's network and UTS namespaces, privileged, a claim shared by two containers, exec
probes inside the container. The image is a static busybox imported locally (no registry)."""

from __future__ import annotations

import os
import shutil
import tarfile
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.conftest import need
from tests.unit.agent_support import deployment, free_port
from undercloud.agent import hooks

IMAGE = "localhost/uc-agent-test-busybox:2"


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
            for applet in ("sh", "httpd", "sleep", "cat", "test", "touch", "hostname"):
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


def test_podman_mode_host_network_pod_has_the_nodes_hostname_and_exec_probes_run_inside(image, tmp_path):
    import socket
    name = f"uc-agent-kube-{uuid.uuid4().hex[:8]}"
    state = tmp_path / "state"
    state.mkdir()
    marker = "/tmp/only-in-the-container"  # never made on this host: the probe passes only inside
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
         "spec": {"hostNetwork": True, "containers": [{
             "name": "c", "image": IMAGE, "imagePullPolicy": "Never",
             "command": ["sh", "-c", f"mkdir -p /tmp; touch {marker}; exec sleep 600"],
             "readinessProbe": {"exec": {"command": ["test", "-e", marker]}, "periodSeconds": 1}}]}}
    env = dict(os.environ, UNDERCLOUD_AGENT_STATE=str(state))
    try:
        r = hooks.run(deployment("kh", "web", "kube", p, options={"kube_mode": "podman", "ready_timeout": 60}),
                      None, 300, env)
        assert r["deploy_status_code"] == 0, r
        assert not os.path.exists(marker)
        got = podman("exec", f"{name}-c", "cat", "/proc/sys/kernel/hostname").stdout.strip()
        assert got == socket.gethostname()
    finally:
        podman("pod", "rm", "-f", name)


@pytest.fixture
def container_node(image, tmp_path, monkeypatch):
    """A container node: a container with its own network namespace and hostname, and the
    agent's environment for netns mode (the host's podman API)."""
    from undercloud.host import podman as hp
    if os.geteuid() != 0:
        pytest.skip("the podman API service on /run/podman needs root")
    sock = hp.api_service()
    node = f"uc-kube-node-{uuid.uuid4().hex[:6]}"
    podman("run", "-d", "--name", node, "--hostname", node, "--network", "none", IMAGE, "sleep", "600", timeout=120)
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{sock}")
    monkeypatch.setenv("UNDERCLOUD_NODE_NETNS", f"container:{node}")
    state = tmp_path / "state"
    state.mkdir()
    yield node, dict(os.environ, UNDERCLOUD_AGENT_STATE=str(state))
    for c in podman("ps", "-a", "--filter", f"label=undercloud.node={node}", "--format", "{{.Names}}").stdout.split():
        podman("rm", "-f", "-t", "0", c)
    podman("rm", "-f", "-t", "0", node)
    for v in podman("volume", "ls", "-q", "--filter", f"label=undercloud.node={node}").stdout.split():
        podman("volume", "rm", "-f", v)


def test_netns_mode_uts_privileged_shared_claim_and_exec_probes_inside(container_node):
    node, env = container_node
    marker = "/tmp/only-in-the-container"
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "virt"}, "spec": {
        "hostNetwork": True,
        "containers": [
            {"name": "a", "image": IMAGE, "securityContext": {"privileged": True},
             "command": ["sh", "-c", f"mkdir -p /tmp; touch {marker}; echo from-a > /shared/note; "
                         f"echo scratch-a > /scratch/note; exec sleep 600"],
             "volumeMounts": [{"name": "shared", "mountPath": "/shared"}, {"name": "scratch", "mountPath": "/scratch"}],
             "readinessProbe": {"exec": {"command": ["test", "-e", marker]}, "periodSeconds": 1}},
            {"name": "b", "image": IMAGE, "command": ["sleep", "600"],
             "volumeMounts": [{"name": "shared", "mountPath": "/shared"}, {"name": "scratch", "mountPath": "/scratch"}],
             "readinessProbe": {"exec": {"command": ["cat", "/shared/note"]}, "periodSeconds": 1}}],
        "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": "shared"}},
                    {"name": "scratch", "emptyDir": {}}]}}
    r = hooks.run(deployment("kn", "virt", "kube", {"kind": "List", "items": [p]}, options={"ready_timeout": 60}),
                  None, 300, env)
    assert r["deploy_status_code"] == 0, r
    assert f"in the network namespace of {node}" in r["deploy_stdout"]
    assert not os.path.exists(marker)
    a, b = f"{node}-virt-a", f"{node}-virt-b"
    for c in (a, b):  # the node's hostname (UTS namespace), as Kubernetes gives hostNetwork Pods
        assert podman("exec", c, "hostname").stdout.strip() == node
    assert podman("inspect", a, "--format", "{{.HostConfig.Privileged}}").stdout.strip() == "true"
    assert podman("inspect", b, "--format", "{{.HostConfig.Privileged}}").stdout.strip() == "false"
    assert podman("exec", b, "cat", "/shared/note").stdout == "from-a\n"
    assert podman("exec", b, "cat", "/scratch/note").stdout == "scratch-a\n"  # emptyDir: the Pod's, shared

    # A probe that passes on this host but not inside the container fails, naming its output.
    host_file = Path(env["UNDERCLOUD_AGENT_STATE"]) / "only-on-the-host"
    host_file.touch()
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"}, "spec": {"containers": [{
        "name": "c", "image": IMAGE, "command": ["sleep", "600"],
        "readinessProbe": {"exec": {"command": ["cat", str(host_file)]}, "periodSeconds": 1}}]}}
    r = hooks.run(deployment("kp", "probe", "kube", {"kind": "List", "items": [bad]}, options={"ready_timeout": 3}),
                  None, 300, env)
    assert r["deploy_status_code"] == 1
    assert r["deploy_failure_reason"].startswith(
        f"pod probe: container c: readiness probe (exec cat {host_file}) did not pass within 3 s; it said: cat: ")
    # Without hostNetwork a Pod keeps a hostname of its own.
    assert podman("exec", f"{node}-probe-c", "hostname").stdout.strip() != node


def test_netns_mode_loads_a_missing_image_into_the_hosts_podman_through_its_api(container_node, tmp_path):
    """A container node on a hypervisor host: the host's podman lacks the service image, so the
    hook downloads it from the undercloud (here a local server of a `podman save` archive,
    sha256 checked), loads it through the podman API and tags it as the Pod names it; the
    Pod then runs. A second step finds it there and loads nothing."""
    import hashlib
    import http.server
    import threading

    node, env = container_node
    ref = f"localhost/uc-agent-test-busybox:load-{uuid.uuid4().hex[:8]}"
    archive = tmp_path / "image.tar"
    assert podman("save", "-o", str(archive), IMAGE, timeout=120).returncode == 0
    body = archive.read_bytes()

    class Store(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            self.send_response(200)
            self.send_header("X-Image-Sha256", hashlib.sha256(body).hexdigest())
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Store)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    env = dict(env, UNDERCLOUD_URL=f"http://127.0.0.1:{srv.server_address[1]}")
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "loaded"}, "spec": {
        "hostNetwork": True, "containers": [{"name": "c", "image": ref, "command": ["sleep", "600"]}]}}
    options = {"ready_timeout": 60, "image_sources": {ref: "/v1/images/x/file"}}
    try:
        r = hooks.run(deployment("kl", "loaded", "kube", {"kind": "List", "items": [p]}, options=options), None, 300, env)
        assert r["deploy_status_code"] == 0, r
        assert f"image {ref}: loaded from the undercloud in" in r["deploy_stdout"]
        assert podman("image", "exists", ref).returncode == 0
        assert podman("inspect", f"{node}-loaded-c", "--format", "{{.ImageName}}").stdout.strip() == ref
        again = hooks.run(deployment("kl2", "loaded", "kube", {"kind": "List", "items": [p]}, options=options),
                          None, 300, env)
        assert again["deploy_status_code"] == 0 and "loaded from the undercloud" not in again["deploy_stdout"], again
    finally:
        srv.shutdown()
        for c in podman("ps", "-a", "--filter", f"label=undercloud.node={node}", "--format", "{{.Names}}").stdout.split():
            podman("rm", "-f", "-t", "0", c)
        podman("rmi", ref)
