"""Where a node's Pods run: one engine per mode, chosen per deployment (options.kube_mode
forces one), each an `Engine` (below) that the kube hook and the watchdog ask alike:
- `podman` (PodmanEngine, here): `podman kube play --replace` with the node's own podman
  (VMs, bare metal). On a container node the undercloud mounts the host's podman API socket
  into the node and sets CONTAINER_HOST; the Pod then joins the node's network namespace
  (UNDERCLOUD_NODE_NETNS, e.g. `container:<node container>`), the way containerised
  TripleO had its agent container drive the host's container engine.
- `netns` (NetnsEngine, agent/netns.py; container nodes): each container made through the
  host's podman API, joined to the node's network namespace.
- `process` (ProcessEngine, agent/processes.py): no podman: each container's command runs
  as a supervised process from the node's own file system.
Also the agent's state directory for Pods, and podman's settings, shared with this host's
podman (host/podman.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from undercloud.agent import files, node_contract, pod_spec
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


ExecRunner = Callable[[list[str], float], tuple[int, str]]  # (argv, timeout) -> (exit code, output)


class Engine:
    """What the kube hook and the watchdog ask of wherever a node's Pods run, one class per
    mode: PodmanEngine below, NetnsEngine (agent/netns.py), ProcessEngine (agent/processes.py);
    kube.engine_for picks one by name. Containers are named by their Pod and container
    name; `container_name` is what the engine calls one."""

    name = ""
    lists_containers = True  # False: nothing to list, start or probe inside (process mode)
    loads_images = True  # a podman to load service images into (agent/pod_images.py)

    def create(self, name: str, pod: dict, configmaps: dict, spec_file: Path) -> tuple[str, str] | dict:
        """Make and start the Pod's containers: (stdout, stderr), or the hook's failure result."""
        raise NotImplementedError

    def running(self, name: str) -> bool:
        """Whether a Pod this engine cannot list (process mode) still runs."""
        return False

    def containers(self) -> dict[tuple[str, str], dict]:
        """(pod, container) -> {id, name, state, started_at, image, image_id} of every
        container this node's Pods have (one listing)."""
        return {}

    def container_name(self, pod: str, container: str) -> str:
        return f"{pod}-{container}"

    def start(self, container: str, restart: bool = False) -> None:
        """Start a stopped container (its engine name), or (restart) kill it and start it
        again: SIGKILL at once, which also ends a process stopped with SIGSTOP. A restart can
        race podman's restart policy (the kill makes conmon start it too) and fail with the
        container up again, or left stopped: then it is started unless it runs."""
        try:
            self._start(container, restart)
        except PodError:
            if not restart:
                raise
            time.sleep(0.5)
            if self.state(container) != "running":
                self._start(container, False)

    def _start(self, container: str, restart: bool) -> None:
        raise NotImplementedError

    def state(self, container: str) -> str:
        """The container's state as podman says it ("" when it has none)."""
        return ""

    def log_tail(self, pod: str, container: str, lines: int = 20) -> str:
        """The last lines of a Pod container's log, for failure messages ("" when none)."""
        return ""

    def exec_runner(self, pod: str, container: str) -> ExecRunner | None:
        """How an exec probe runs inside the container; None: here (no container)."""
        return None

    def dead(self, pod_name: str, pod: dict) -> tuple[str, str] | None:
        """(container, why) when a container of the Pod keeps exiting; None otherwise, or
        when the engine cannot tell before the readiness wait ends."""
        return None

    # Service images (agent/pod_images.py), where loads_images.
    def image_exists(self, ref: str) -> bool:
        raise NotImplementedError

    def image_load(self, ref: str, archive: Path) -> str:
        """Load an image archive; returns the name it was loaded as."""
        raise NotImplementedError

    def image_tag(self, ref: str, loaded: str) -> None:
        raise NotImplementedError


class PodmanEngine(Engine):
    """The node's own podman, through its command line (VMs and bare metal): `podman kube
    play --replace` of the Pod with the ConfigMaps it mounts."""

    name = "podman"

    def create(self, name: str, pod: dict, configmaps: dict, spec_file: Path) -> tuple[str, str] | dict:
        docs = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}, "data": configmaps[n]}
                for n in pod_spec.configmap_names(pod) if n in configmaps]
        play_file = state_dir() / f"{name}.play.yaml"
        files.write_atomic(play_file, "\n---\n".join(json.dumps(d) for d in [*docs, pod_spec.as_played(pod)]))
        cmd = ["podman", "kube", "play", "--replace"]
        network = os.environ.get(node_contract.NETNS_ENV)
        if network and not (pod.get("spec") or {}).get("hostNetwork"):
            cmd += ["--network", network]
        p = run_podman(cmd + [str(play_file)])
        if p.returncode != 0:
            return {"deploy_stdout": p.stdout, "deploy_stderr": p.stderr, "deploy_status_code": p.returncode}
        return p.stdout, p.stderr

    def containers(self) -> dict[tuple[str, str], dict]:
        p = run_podman(["podman", "ps", "-a", "--pod", "--format", "json"], timeout=60)
        if p.returncode != 0:
            raise PodError(f"podman ps: {(p.stderr or p.stdout).strip()[-200:]}")
        found = {}
        for c in json.loads(p.stdout or "[]"):
            pod, name = c.get("PodName") or "", (c.get("Names") or [""])[0]
            if pod and not c.get("IsInfra") and name.startswith(pod + "-"):
                found[(pod, name[len(pod) + 1:])] = container_info(c)
        return found

    def _start(self, container: str, restart: bool) -> None:
        p = run_podman(["podman", "restart", "-t", "0", container] if restart else ["podman", "start", container],
                       timeout=120)
        if p.returncode != 0:
            raise PodError(f"podman {'restart' if restart else 'start'} {container}: "
                           f"{(p.stderr or p.stdout).strip()[-200:]}")

    def state(self, container: str) -> str:
        p = run_podman(["podman", "inspect", container, "--format", "{{.State.Status}}"], timeout=60)
        return p.stdout.strip() if p.returncode == 0 else ""

    def log_tail(self, pod: str, container: str, lines: int = 20) -> str:
        p = run_podman(["podman", "logs", "--tail", str(lines), self.container_name(pod, container)], timeout=30)
        return p.stdout + p.stderr

    def exec_runner(self, pod: str, container: str) -> ExecRunner:
        def run(argv: list[str], timeout: float) -> tuple[int, str]:
            p = run_podman(["podman", "exec", self.container_name(pod, container), *argv], timeout=timeout)
            return p.returncode, p.stdout + p.stderr
        return run

    def image_exists(self, ref: str) -> bool:
        return run_podman(["podman", "image", "exists", ref], timeout=60).returncode == 0

    def image_load(self, ref: str, archive: Path) -> str:
        p = run_podman(["podman", "load", "-q", "-i", str(archive)], timeout=1800)
        if p.returncode != 0:
            raise PodError(f"image {ref}: podman load: {(p.stderr or p.stdout).strip()[-300:]}")
        return p.stdout.strip().rsplit(" ", 1)[-1]

    def image_tag(self, ref: str, loaded: str) -> None:
        t = run_podman(["podman", "tag", loaded, ref], timeout=60)
        if t.returncode != 0:
            raise PodError(f"image {ref}: loaded as {loaded!r}, cannot tag it: {t.stderr.strip()[-200:]}")


def container_info(c: dict) -> dict:
    """A podman listing's container (CLI or API) as the engines give it."""
    return {"id": c.get("Id") or c.get("ID") or "", "name": (c.get("Names") or [""])[0],
            "state": c.get("State") or "unknown", "started_at": c.get("StartedAt") or 0,
            "image": c.get("Image") or "", "image_id": (c.get("ImageID") or "")[:12]}
