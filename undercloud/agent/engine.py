"""Where a node's Pods run, chosen per deployment (options.kube_mode forces one):
- `podman`: `podman kube play --replace` with the node's own podman (VMs, bare metal).
  On a container node the undercloud mounts the host's podman API socket into the node
  and sets CONTAINER_HOST; the Pod then joins the node's network namespace
  (UNDERCLOUD_NODE_NETNS, e.g. `container:<node container>`), the way containerised
  TripleO had its agent container drive the host's container engine.
- `netns` (container nodes; agent/netns.py): each container made through the host's podman
  API, joined to the node's network namespace.
- `process`: no podman: each container's command runs as a supervised process from the
  node's own file system (agent/processes.py).
Also the agent's state directory for Pods, and podman's settings, shared with this host's
podman (host/podman.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from undercloud.agent import files, libpod, node_contract
from undercloud.agent.pod_spec import PodError
from undercloud.agent.settings import state_base

# podman's settings on nodes and on the undercloud's host (undercloud/host/podman.py uses
# these): crun fails on hybrid-cgroup hosts, and the default nofile ulimit cannot be
# raised everywhere, so podman gets runc and explicit ulimits.
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
"""


def state_dir() -> Path:
    path = state_base() / "kube"
    path.mkdir(parents=True, exist_ok=True)
    return path


def podman_env() -> dict:
    conf = state_dir() / "containers.conf"
    if not conf.exists() or conf.read_text() != CONTAINERS_CONF:
        files.write_atomic(conf, CONTAINERS_CONF, 0o644)
    return dict(os.environ, CONTAINERS_CONF=str(conf))


# The ulimits every container of a container node gets (podman's default nofile cannot be
# raised on every host); the undercloud's check of the API service starts one with them too.
RLIMITS = [{"type": "nofile", "soft": 20000, "hard": 20000}, {"type": "nproc", "soft": 4096, "hard": 4096}]


# Beside the host's API socket (the directory the undercloud mounts into container nodes): a
# node whose real call failed says so here, and the undercloud, which watches the service
# (host/podman.py's ApiWatch), checks it at once, restarts it if it has gone bad, and removes
# the file; the node then tries its Pod once more.
API_FAILED_SUFFIX = ".failed"
API_RECOVERY_WAIT = 90.0  # how long a node waits for that (the undercloud looks every 5 s)


def node_target() -> tuple[str, str] | None:
    """(podman API socket, node container) on a container node, else None."""
    host = os.environ.get("CONTAINER_HOST", "")
    node = node_contract.netns_node(os.environ.get(node_contract.NETNS_ENV, ""))
    if host.startswith("unix://") and node is not None:
        return host[len("unix://"):], node
    return None


def choose_mode(options: dict) -> str:
    forced = options.get("kube_mode")
    if forced in ("podman", "process", "netns"):
        return forced
    if node_target():
        return "netns"
    return "podman" if shutil.which("podman") else "process"


def run_podman(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=podman_env())


def node_api() -> libpod.PodmanAPI:
    target = node_target()
    if not target:
        raise PodError("netns mode needs CONTAINER_HOST=unix://... and UNDERCLOUD_NODE_NETNS=container:NODE")
    return libpod.PodmanAPI(target[0])
