"""A container node's podman proxy (provisioning/servers/node_proxy.py) with real podman: the
node's kube hook deploys the Pods its deployments declare through it (containers, an exec
probe, an emptyDir volume), and is refused, in one line naming what, another node's
container, a host path its Pod does not declare, privileges it does not declare, another
node's volume, an image archive the undercloud does not hold, and moving an image's name.
Each test runs its own API service on a socket of its own; nothing is left running."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import uuid
from urllib.parse import quote

import pytest

from tests.integration.test_agent_kube import IMAGE, image  # noqa: F401 - the busybox image fixture
from tests.unit.agent_support import deployment
from undercloud.agent import hooks, libpod, node_contract

pytestmark = pytest.mark.integration


def podman(*args, **kw):
    from undercloud.host import podman as hp
    return hp.podman(*args, check=False, **kw)


def pod(name: str, **container) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "volumes": [{"name": "scratch", "emptyDir": {}}, {"name": "etc", "hostPath": {"path": "/etc/hostname"}}],
        "containers": [{"name": "c", "image": IMAGE, "command": ["sleep", "600"],
                        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"},
                                         {"name": "etc", "mountPath": "/host-hostname", "readOnly": True}],
                        "readinessProbe": {"exec": {"command": ["test", "-d", "/scratch"]}, "periodSeconds": 1},
                        **container}]}}


@pytest.fixture
def proxied(image, tmp_path, monkeypatch):  # noqa: F811 - the fixture imported above
    """(node, its proxy's policy, the API socket, the agent's env): a node container whose
    kube hook reaches an API service of this test's own through the node's proxy only."""
    if os.geteuid() != 0:
        pytest.skip("a podman API service and container nodes need root")
    from undercloud.host import podman as hp
    from undercloud.provisioning.servers import node_proxy

    sock = tmp_path / "podman.sock"
    hp.api_service(sock, timeout=60)
    node = f"uc-proxy-node-{uuid.uuid4().hex[:6]}"
    other = f"uc-proxy-other-{uuid.uuid4().hex[:6]}"
    for n in (node, other):
        podman("run", "-d", "--name", n, "--network", "none", IMAGE, "sleep", "600", timeout=120)
    declared: list[dict] = [pod("web")]
    policy = node_proxy.Policy(node, str(sock), lambda: declared, lambda sha: False)
    short = tempfile.mkdtemp(prefix="ucpx", dir="/tmp")  # what the node mounts: an address of 108 bytes at most
    proxy = node_proxy.NodeProxy(short, policy)
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{proxy.socket_path}")
    monkeypatch.setenv("UNDERCLOUD_NODE_NETNS", f"container:{node}")
    state = tmp_path / "state"
    state.mkdir()
    yield {"node": node, "other": other, "declared": declared, "api": libpod.PodmanAPI(str(proxy.socket_path)),
           "host": libpod.PodmanAPI(str(sock)), "env": dict(os.environ, UNDERCLOUD_AGENT_STATE=str(state))}
    proxy.stop()
    shutil.rmtree(short, ignore_errors=True)
    monkeypatch.delenv("CONTAINER_HOST")
    for n in (node, other):
        for c in podman("ps", "-a", "--filter", f"label=undercloud.node={n}", "--format", "{{.Names}}").stdout.split():
            podman("rm", "-f", "-t", "0", c)
        podman("rm", "-f", "-t", "0", n)
        for v in podman("volume", "ls", "-q", "--filter", f"label=undercloud.node={n}").stdout.split():
            podman("volume", "rm", "-f", v)
    for pid in hp._services(sock):
        os.kill(pid, signal.SIGKILL)


def refused(answer: tuple[int, bytes]) -> str:
    status, data = answer
    assert status == 403, (status, data[:300])
    return json.loads(data)["message"]


def test_the_kube_hook_deploys_what_the_nodes_deployments_declare_through_its_proxy(proxied):
    r = hooks.run(deployment("step1", "web", "kube", {"kind": "List", "items": [pod("web")]},
                             options={"ready_timeout": 60}), None, 300, proxied["env"])
    assert r["deploy_status_code"] == 0, r
    name = node_contract.container_name(proxied["node"], "web", "c")
    assert f"containers {name} in the network namespace of {proxied['node']}" in r["deploy_stdout"]
    # The listing shows the node's own containers only, whatever filter it asks.
    listed = proxied["api"].containers("undercloud.container=c")
    assert [c["Names"][0] for c in listed] == [name]
    # A Pod its deployments do not declare: refused, and the hook says why in one line.
    r = hooks.run(deployment("step2", "db", "kube", {"kind": "List", "items": [pod("db")]},
                             options={"ready_timeout": 30}), None, 300, proxied["env"])
    assert r["deploy_status_code"] != 0
    assert f"node proxy: container {proxied['node']}-db-c: no Pod of node {proxied['node']}'s deployments " \
           "declares it" in r["deploy_stderr"], r


def test_another_nodes_things_host_paths_and_privileges_not_declared_are_refused(proxied):
    node, other, api, host = proxied["node"], proxied["other"], proxied["api"], proxied["host"]
    theirs = node_contract.container_name(other, "web", "c")
    host.ok("POST", "/containers/create", {"name": theirs, "image": IMAGE, "command": ["sleep", "600"],
                                          "labels": node_contract.container_labels(other, "web", "c"),
                                          "netns": {"nsmode": "container", "value": other}})
    assert refused(api.call("GET", f"/containers/{theirs}/json")) == \
        f"node proxy: container {theirs} is not one of node {node}'s"
    assert refused(api.call("DELETE", f"/containers/{theirs}?force=true")).endswith(f"is not one of node {node}'s")
    assert refused(api.call("POST", f"/containers/{theirs}/exec", {"Cmd": ["true"]}))
    assert theirs not in [c["Names"][0] for c in api.containers(node_contract.node_label(other))]
    assert host.call("GET", f"/containers/{theirs}/json")[0] == 200  # untouched

    mine = node_contract.container_name(node, "web", "c")
    body = {"name": mine, "image": IMAGE, "labels": node_contract.container_labels(node, "web", "c"),
            "netns": {"nsmode": "container", "value": node}, "command": ["sleep", "600"],
            "mounts": [{"destination": "/host-hostname", "source": "/etc/hostname", "type": "bind",
                        "options": ["ro"]}]}
    cases = [
        ({"mounts": [{"destination": "/host", "source": "/", "type": "bind", "options": []}]},
         f"node proxy: container {mine}: host path / (at /host), which its Pod does not declare"),
        ({"mounts": [{"destination": "/etc-host", "source": "/etc/hostname", "type": "bind", "options": []}]},
         f"node proxy: container {mine}: host path /etc/hostname (at /etc-host), which its Pod does not declare"),
        ({"privileged": True}, f"node proxy: container {mine}: privileged, which its Pod does not declare"),
        ({"cap_add": ["SYS_ADMIN"]},
         f"node proxy: container {mine}: capabilities SYS_ADMIN, which its Pod does not declare"),
        ({"pidns": {"nsmode": "host"}}, "node proxy: container create: pidns not allowed to a node"),
        ({"netns": {"nsmode": "host"}}, f"node proxy: container {mine}: a namespace other than node {node}'s"),
        ({"labels": node_contract.container_labels(other, "web", "c")},
         f"node proxy: container {mine}: labels other than the node's"),
        ({"volumes": [{"Name": f"{other}-data", "Dest": "/data"}]},
         f"node proxy: container {mine}: volume {other}-data, not one of node {node}'s"),
    ]
    for change, words in cases:
        assert refused(api.call("POST", "/containers/create", {**body, **change})) == words
    assert host.call("GET", f"/containers/{mine}/exists")[0] == 404  # none of them was made
    status, data = api.call("POST", "/containers/create", body)  # as declared: made
    assert status == 201, data

    assert refused(api.call("POST", "/volumes/create", {"Name": f"{other}-data",
                                                         "Label": {node_contract.NODE_LABEL: other}})).startswith(
        f"node proxy: volume {other}-data: a node makes only volumes of its own")
    assert refused(api.call("DELETE", f"/volumes/{other}-data?force=true")) == \
        f"node proxy: volume {other}-data is not one of node {node}'s"
    assert refused(api.call("POST", "/images/load", raw=b"not an image the undercloud holds")) == \
        "node proxy: an image archive the undercloud's image store does not hold"
    assert refused(api.call("POST", f"/images/{quote(IMAGE, safe='')}/tag?repo=localhost/uc-agent-test-busybox"
                                    "&tag=2")) == \
        f"node proxy: image {IMAGE} exists: a node does not move a name another may run"
    assert api.call("GET", f"/images/{quote(IMAGE, safe='')}/exists")[0] == 204
    assert refused(api.call("POST", "/pods/create", {"name": "x"}))
