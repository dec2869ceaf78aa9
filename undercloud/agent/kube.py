"""The `kube` hook: a Kubernetes Pod (subset) as a deployment's config.

Subset: metadata.name; spec.containers[] with name, image, command, args, env
(name/value), ports, volumeMounts, livenessProbe/readinessProbe (exec, httpGet,
tcpSocket); spec.volumes[] hostPath, emptyDir, configMap; hostNetwork.

How the Pod runs, in order of preference (options.kube_mode forces one):
- `podman`: `podman kube play --replace` with the node's own podman (VMs, bare metal).
  On a container node the undercloud mounts the host's podman API socket into the node
  and sets CONTAINER_HOST; the Pod then joins the node's network namespace
  (UNDERCLOUD_NODE_NETNS, e.g. `container:<node container>`), the way containerised
  TripleO had its agent container drive the host's container engine.
- `process`: no podman: each container's command runs as a supervised process from the
  node's own file system (restarted on exit, logs under the agent's state directory).
A Pod whose rendered config hash is unchanged and still running is left alone; a changed
one is replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

# Same settings as undercloud/host/podman.py (which the agent cannot import: it runs on
# the node with only this package): crun fails on hybrid-cgroup hosts, and the default
# nofile ulimit cannot be raised everywhere, so podman gets runc and explicit ulimits.
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
"""


def state_dir() -> Path:
    base = Path(os.environ.get("UNDERCLOUD_AGENT_STATE", "/var/lib/undercloud-agent"))
    path = base / "kube"
    path.mkdir(parents=True, exist_ok=True)
    return path


def podman_env() -> dict:
    conf = state_dir() / "containers.conf"
    if not conf.exists() or conf.read_text() != CONTAINERS_CONF:
        conf.write_text(CONTAINERS_CONF)
    return dict(os.environ, CONTAINERS_CONF=str(conf))


class PodError(Exception):
    pass


def validate(pod: dict) -> str:
    if not isinstance(pod, dict) or pod.get("kind", "Pod") != "Pod":
        raise PodError("config must be a Kubernetes Pod (kind: Pod)")
    name = (pod.get("metadata") or {}).get("name")
    if not name or not isinstance(name, str):
        raise PodError("metadata.name: required")
    containers = (pod.get("spec") or {}).get("containers")
    if not isinstance(containers, list) or not containers:
        raise PodError("spec.containers: at least one container is required")
    for i, c in enumerate(containers):
        if not isinstance(c, dict) or not c.get("name"):
            raise PodError(f"spec.containers[{i}].name: required")
    return name


def choose_mode(options: dict) -> str:
    forced = options.get("kube_mode")
    if forced in ("podman", "process"):
        return forced
    return "podman" if shutil.which("podman") else "process"


def _run(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=podman_env())


def _pod_running(name: str) -> bool:
    p = _run(["podman", "pod", "inspect", name, "--format", "{{.State}}"], timeout=60)
    return p.returncode == 0 and p.stdout.strip() == "Running"


def play_podman(name: str, pod: dict, spec_file: Path) -> tuple[int, str, str]:
    cmd = ["podman", "kube", "play", "--replace"]
    netns = os.environ.get("UNDERCLOUD_NODE_NETNS")
    if netns and not (pod.get("spec") or {}).get("hostNetwork"):
        cmd += ["--network", netns]
    p = _run(cmd + [str(spec_file)])
    return p.returncode, p.stdout, p.stderr


# --- process mode ---------------------------------------------------------------------

def _pids_file(name: str) -> Path:
    return state_dir() / name / "supervisor.pid"


def stop_processes(name: str) -> None:
    f = _pids_file(name)
    try:
        pid = int(f.read_text())
        os.killpg(pid, signal.SIGTERM)
        for _ in range(50):
            os.kill(pid, 0)
            time.sleep(0.1)
        os.killpg(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass
    f.unlink(missing_ok=True)


def _processes_running(name: str) -> bool:
    try:
        os.kill(int(_pids_file(name).read_text()), 0)
        return True
    except (OSError, ValueError):
        return False


def start_processes(name: str, pod: dict, spec_file: Path) -> None:
    stop_processes(name)
    work = state_dir() / name
    work.mkdir(parents=True, exist_ok=True)
    p = subprocess.Popen([sys.executable, "-m", "undercloud.agent", "supervise", str(spec_file)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=open(work / "supervisor.log", "ab"), start_new_session=True, env=dict(os.environ))
    _pids_file(name).write_text(str(p.pid))


def supervise(spec_file: Path) -> int:
    """Run the Pod's containers as processes; restart any that exits (1 s back-off)."""
    pod = json.loads(spec_file.read_text())
    name = pod["metadata"]["name"]
    work = state_dir() / name
    for v in (pod.get("spec") or {}).get("volumes") or []:
        if "emptyDir" in v:
            (work / "volumes" / v["name"]).mkdir(parents=True, exist_ok=True)
    procs: dict[str, subprocess.Popen | None] = {}
    containers = pod["spec"]["containers"]

    def start(c: dict) -> subprocess.Popen:
        argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
        env = dict(os.environ, **{e["name"]: str(e.get("value", "")) for e in c.get("env") or []})
        log = open(work / f"{c['name']}.log", "ab")
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=str(work))

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    while not stopping:
        for c in containers:
            p = procs.get(c["name"])
            if p is None or p.poll() is not None:
                try:
                    procs[c["name"]] = start(c)
                except OSError as exc:
                    (work / f"{c['name']}.log").open("a").write(f"cannot start: {exc}\n")
                    procs[c["name"]] = None
        time.sleep(1)
    for p in procs.values():
        if p and p.poll() is None:
            p.terminate()
    return 0


def probe(spec: dict, timeout: float = 2.0) -> bool:
    try:
        if "exec" in spec:
            return subprocess.run(spec["exec"]["command"], capture_output=True, timeout=timeout).returncode == 0
        if "httpGet" in spec:
            h = spec["httpGet"]
            url = f"http://{h.get('host', '127.0.0.1')}:{h['port']}{h.get('path', '/')}"
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return 200 <= r.status < 400
        if "tcpSocket" in spec:
            t = spec["tcpSocket"]
            with socket.create_connection((t.get("host", "127.0.0.1"), int(t["port"])), timeout=timeout):
                return True
    except (OSError, subprocess.SubprocessError, KeyError, ValueError):
        return False
    return True


def wait_ready(pod: dict, timeout: float) -> str | None:
    """None when every readiness probe passes within `timeout`, else what did not."""
    pending = {c["name"]: c["readinessProbe"] for c in pod["spec"]["containers"] if c.get("readinessProbe")}
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for n, spec in list(pending.items()):
            if probe(spec):
                pending.pop(n)
        if pending:
            time.sleep(0.5)
    return f"readiness probe of {sorted(pending)[0]} did not pass within {timeout:g} s" if pending else None


def hook_kube(c: dict) -> dict:
    config = c.get("config")
    try:
        pod = json.loads(config) if isinstance(config, str) else config
        name = validate(pod)
    except (ValueError, PodError) as exc:
        return {"deploy_stdout": "", "deploy_stderr": f"kube: {exc}", "deploy_status_code": 2}
    options = c.get("options") or {}
    mode = choose_mode(options)
    digest = hashlib.sha256(json.dumps(pod, sort_keys=True).encode()).hexdigest()
    spec_file = state_dir() / f"{name}.json"
    hash_file = state_dir() / f"{name}.sha256"
    existed = hash_file.exists()
    same = existed and hash_file.read_text() == f"{mode}:{digest}"
    running = _pod_running(name) if mode == "podman" else _processes_running(name)
    if same and running:
        return {"deploy_stdout": f"pod {name}: unchanged ({digest[:12]}), left running", "deploy_stderr": "",
                "deploy_status_code": 0, "config_hash": digest, "pod_action": "unchanged"}
    spec_file.write_text(json.dumps(pod, indent=2))
    if mode == "podman":
        code, out, err = play_podman(name, pod, spec_file)
        if code != 0:
            return {"deploy_stdout": out, "deploy_stderr": err, "deploy_status_code": code}
    else:
        start_processes(name, pod, spec_file)
        out, err = f"pod {name}: started as supervised processes\n", ""
    not_ready = wait_ready(pod, float(options.get("ready_timeout", 60)))
    if not_ready:
        return {"deploy_stdout": out, "deploy_stderr": err + f"kube: {not_ready}", "deploy_status_code": 1}
    hash_file.write_text(f"{mode}:{digest}")
    action = "replaced" if existed or running else "created"
    return {"deploy_stdout": out + f"pod {name}: {action} ({mode}, {digest[:12]})", "deploy_stderr": err,
            "deploy_status_code": 0, "config_hash": digest, "pod_action": action}
