"""The `kube` hook: a Kubernetes Pod (subset) as a deployment's config.

Subset: metadata.name; spec.containers[] with name, image, command, args, env
(name/value), ports, volumeMounts, readinessProbe (exec, httpGet, tcpSocket; timeoutSeconds,
periodSeconds), securityContext.capabilities (add/drop) and securityContext.privileged;
spec.volumes[] hostPath (files, directories, devices such as /dev/net/tun), emptyDir,
configMap, persistentVolumeClaim (claimName: a named volume per node, kept when the Pod is
replaced, shared by every container of the node that mounts the same claim); hostNetwork
(the node's network and, as Kubernetes gives it, the node's hostname). livenessProbe is
acted on by the agent's watchdog only: podman is not handed it (see as_played).
Exec probes run inside their container, as Kubernetes runs them (podman: `podman exec`;
netns: the libpod exec API), except in process mode, where the container is a process here.

How the Pod runs, in order of preference (options.kube_mode forces one):
- `podman`: `podman kube play --replace` with the node's own podman (VMs, bare metal).
  On a container node the undercloud mounts the host's podman API socket into the node
  and sets CONTAINER_HOST; the Pod then joins the node's network namespace
  (UNDERCLOUD_NODE_NETNS, e.g. `container:<node container>`), the way containerised
  TripleO had its agent container drive the host's container engine. A hostNetwork Pod
  is played with spec.hostname = this node's hostname (podman 4.3 names it after the Pod).
- `process`: no podman: each container's command runs as a supervised process from the
  node's own file system (restarted on exit, logs under the agent's state directory).
A Pod whose rendered config hash is unchanged and still running and ready is left alone; a
changed one is replaced; an unchanged one that drifted (containers stopped, missing or not
ready) is repaired and the repair reported (`repairs`). Between deployments the agent's
watchdog (agent/watchdog.py) keeps played Pods running and healthy.

The config may also be a `kind: List` of ConfigMaps and Pods (what an overcloud deploy
step hands a node: every service of the step): each Pod is played with the ConfigMaps it
names, unchanged Pods are left alone, and the first Pod not ready fails the deployment
naming the Pod, its probe (an exec probe's last line of output) and the last lines of its
container's log.
Options: `image_overrides` (image -> image this node runs instead, applied before the
hash: only the Pods that use one change), `image_sources`/`image_prefetch` (where a node
whose podman lacks a service image downloads it: VM and bare-metal nodes, container nodes
on another host than the undercloud's), `ready_timeout`, `kube_mode`.

- `netns` (container nodes; podman 4.3's `kube play` cannot join another container's
  network namespace): with CONTAINER_HOST=unix://... and UNDERCLOUD_NODE_NETNS=
  container:NODE, each container of the Pod is created through the host's podman API
  (libpod REST, standard library only) as `NODE-<pod>-<container>` joined to NODE's
  network namespace (and, for a hostNetwork Pod, its UTS namespace: the node's hostname),
  with runc and explicit ulimits; ConfigMap volumes are copied into the container before
  it starts (the archive API); httpGet/tcpSocket probes run from the agent, which shares
  that namespace. A persistentVolumeClaim is the named volume `NODE-<claimName>`
  (labelled undercloud.node=NODE: deleting the node removes it), so two nodes on one host
  never share one; an emptyDir the named volume `NODE-<pod>-<volume>`, made empty again
  when the Pod is played; capabilities become the create body's cap_add/cap_drop,
  privileged its privileged.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote, urljoin

from undercloud.agent import files, node_contract
from undercloud.agent.settings import REASON_CHARS, state_base

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


class PodError(Exception):
    pass


class EngineFailure(PodError):
    """A call to the host's podman API that failed the way a broken service fails (HTTP 5xx)."""


# The ulimits every container of a container node gets (podman's default nofile cannot be
# raised on every host); the undercloud's check of the API service starts one with them too.
RLIMITS = [{"type": "nofile", "soft": 20000, "hard": 20000}, {"type": "nproc", "soft": 4096, "hard": 4096}]
# Beside the host's API socket (the directory the undercloud mounts into container nodes): a
# node whose real call failed says so here, and the undercloud, which watches the service
# (host/podman.py's ApiWatch), checks it at once, restarts it if it has gone bad, and removes
# the file; the node then tries its Pod once more.
API_FAILED_SUFFIX = ".failed"
API_RECOVERY_WAIT = 90.0  # how long a node waits for that (the undercloud looks every 5 s)


# Linux capabilities by their Kubernetes names (without CAP_), as capabilities(7) lists them.
CAPABILITIES = frozenset("""
AUDIT_CONTROL AUDIT_READ AUDIT_WRITE BLOCK_SUSPEND BPF CHECKPOINT_RESTORE CHOWN DAC_OVERRIDE
DAC_READ_SEARCH FOWNER FSETID IPC_LOCK IPC_OWNER KILL LEASE LINUX_IMMUTABLE MAC_ADMIN
MAC_OVERRIDE MKNOD NET_ADMIN NET_BIND_SERVICE NET_BROADCAST NET_RAW PERFMON SETFCAP SETGID
SETPCAP SETUID SYSLOG SYS_ADMIN SYS_BOOT SYS_CHROOT SYS_MODULE SYS_NICE SYS_PACCT SYS_PTRACE
SYS_RAWIO SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG WAKE_ALARM
""".split())
# A claim name as Kubernetes names objects (a DNS label, dots allowed); it becomes part of a
# podman volume name.
CLAIM_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")


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
        sc = c.get("securityContext") or {}
        if not isinstance(sc, dict):
            raise PodError(f"pod {name}: spec.containers[{i}].securityContext: expected a map")
        if not isinstance(sc.get("privileged", False), bool):
            raise PodError(f"pod {name}: spec.containers[{i}].securityContext.privileged: expected true or false, "
                           f"not {sc['privileged']!r}")
        caps = sc.get("capabilities") or {}
        if not isinstance(caps, dict):
            raise PodError(f"pod {name}: spec.containers[{i}].securityContext.capabilities: expected a map "
                           f"with add and/or drop")
        for key in ("add", "drop"):
            where = f"pod {name}: spec.containers[{i}].securityContext.capabilities.{key}"
            values = caps.get(key) or []
            if not isinstance(values, list):
                raise PodError(f"{where}: expected a list of capability names (e.g. NET_ADMIN)")
            for j, cap in enumerate(values):
                if not isinstance(cap, str) or cap.upper().removeprefix("CAP_") not in CAPABILITIES:
                    raise PodError(f"{where}[{j}]: unknown capability {cap!r} (e.g. NET_ADMIN, NET_RAW, SYS_TIME)")
        for kind in ("readinessProbe", "livenessProbe"):
            _validate_probe(c.get(kind), f"pod {name}: spec.containers[{i}].{kind}")
    for i, v in enumerate((pod.get("spec") or {}).get("volumes") or []):
        if isinstance(v, dict) and "persistentVolumeClaim" in v:
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if not isinstance(claim, str) or not CLAIM_NAME.match(claim):
                raise PodError(f"pod {name}: spec.volumes[{i}].persistentVolumeClaim.claimName: {claim!r} is not a "
                               f"claim name (lower-case letters, digits, '-' and '.', at most 63, starting and "
                               f"ending with a letter or digit)")
    return name


def _validate_probe(spec, where: str) -> None:
    if spec is None:
        return
    if not isinstance(spec, dict):
        raise PodError(f"{where}: expected a map with exec, httpGet or tcpSocket")
    if "exec" in spec:
        cmd = (spec.get("exec") or {}).get("command") if isinstance(spec.get("exec"), dict) else None
        if not isinstance(cmd, list) or not cmd or not all(isinstance(a, (str, int)) for a in cmd):
            raise PodError(f"{where}.exec.command: expected a non-empty list of arguments (no shell is implied)")
    for key in ("timeoutSeconds", "periodSeconds"):
        value = spec.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise PodError(f"{where}.{key}: expected a whole number of seconds, at least 1 (as Kubernetes), "
                           f"not {value!r}")


def privileged(container: dict) -> bool:
    return (container.get("securityContext") or {}).get("privileged") is True


def capabilities(container: dict, key: str) -> list[str]:
    """The container's capabilities to add or drop, as CAP_NAME (validated by `validate`)."""
    caps = (container.get("securityContext") or {}).get("capabilities") or {}
    return ["CAP_" + str(c).upper().removeprefix("CAP_") for c in caps.get(key) or []]


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


def _run(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=podman_env())


def _images_dir() -> Path:
    path = state_dir() / "images"
    path.mkdir(exist_ok=True)
    return path


class _CliImages:
    """podman mode: this node's own podman, through its command line."""

    def exists(self, ref: str) -> bool:
        return _run(["podman", "image", "exists", ref], timeout=60).returncode == 0

    def load(self, ref: str, archive: Path) -> str:
        p = _run(["podman", "load", "-q", "-i", str(archive)], timeout=1800)
        if p.returncode != 0:
            raise PodError(f"image {ref}: podman load: {(p.stderr or p.stdout).strip()[-300:]}")
        return p.stdout.strip().rsplit(" ", 1)[-1]

    def tag(self, ref: str, loaded: str) -> None:
        t = _run(["podman", "tag", loaded, ref], timeout=60)
        if t.returncode != 0:
            raise PodError(f"image {ref}: loaded as {loaded!r}, cannot tag it: {t.stderr.strip()[-200:]}")


class _ApiImages:
    """netns mode (a container node): the podman of the host it runs on, through its API. On
    the undercloud's host the images are there already; a hypervisor host's podman gets them
    here, as a VM node's does."""

    def __init__(self, api: PodmanAPI):
        self.api = api

    def exists(self, ref: str) -> bool:
        return self.api.call("GET", f"/images/{quote(ref, safe='')}/exists")[0] == 204

    def load(self, ref: str, archive: Path) -> str:
        with archive.open("rb") as f:
            status, data = self.api.call("POST", "/images/load", raw=f, timeout=1800,
                                         headers={"Content-Length": str(archive.stat().st_size)})
        if status >= 300:
            raise PodError(f"image {ref}: podman API load: HTTP {status}: {data.decode(errors='replace')[-300:]}")
        names = json.loads(data or b"{}").get("Names") or [""]
        return names[0]

    def tag(self, ref: str, loaded: str) -> None:
        repo, _, tag = ref.rpartition(":")
        status, data = self.api.call("POST", f"/images/{quote(loaded, safe='')}/tag?repo={quote(repo, safe='')}"
                                             f"&tag={quote(tag, safe='')}")
        if status >= 300:
            raise PodError(f"image {ref}: loaded as {loaded!r}, cannot tag it: HTTP {status}: "
                           f"{data.decode(errors='replace')[-200:]}")


def _images(mode: str):
    return _ApiImages(_node_api()) if mode == "netns" else _CliImages()


def load_image(ref: str, source: str, mode: str = "podman") -> str:
    """Load `ref` into the node's podman (`mode`: podman, its own; netns, its host's API)
    from the undercloud's image store unless it is there; `source` is its download path
    (`/v1/images/ID/file`, public by id) on the undercloud (UNDERCLOUD_URL), the content
    checked against the X-Image-Sha256 the store sends. One image at a time per reference
    (a lock file): a step's hook and the background prefetch never load one twice. Returns
    what it did ("" when present)."""
    import fcntl

    images = _images(mode)
    work = _images_dir()
    key = hashlib.sha256(ref.encode()).hexdigest()[:16]
    with open(work / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if images.exists(ref):
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
            loaded = images.load(ref, archive)
            if not images.exists(ref):
                images.tag(ref, loaded)
        finally:
            archive.unlink(missing_ok=True)
        return f"image {ref}: loaded from the undercloud in {time.monotonic() - started:.1f} s\n"


def ensure_images(pods: list[dict], sources: dict, mode: str = "podman") -> str:
    """Load each image the Pods name that the node's podman lacks and `sources`
    (options.image_sources: reference -> download path) offers."""
    refs = dict.fromkeys(c.get("image") for p in pods for c in (p.get("spec") or {}).get("containers") or [])
    return "".join(load_image(ref, sources[ref], mode) for ref in refs if ref and ref in sources)


def start_prefetch(refs: list, sources: dict, mode: str = "podman") -> None:
    """Load the images the node's later steps need (options.image_prefetch) in a detached
    process, so they download and load while this step's services start; a step that
    needs one still loading waits for it (the per-image lock). Failures are left to the
    step that needs the image, which reports them."""
    todo = [r for r in dict.fromkeys(refs or []) if isinstance(r, str) and r in sources]
    if not todo:
        return
    spec = _images_dir() / f"prefetch-{os.getpid()}.json"
    files.write_atomic(spec, json.dumps({"sources": {r: sources[r] for r in todo}, "mode": mode}))
    with open(_images_dir() / "prefetch.log", "ab") as log:
        subprocess.Popen([sys.executable, "-m", "undercloud.agent", "prefetch-images", str(spec)],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=podman_env())


def prefetch(spec_file: Path) -> int:
    """`prefetch-images`: one at a time per node (a second one exits at once)."""
    import fcntl

    try:
        spec = json.loads(spec_file.read_text())
        sources, mode = spec["sources"], spec.get("mode", "podman")
    finally:
        spec_file.unlink(missing_ok=True)
    with open(_images_dir() / "prefetch.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0
        for ref, source in sources.items():
            try:
                sys.stdout.write(load_image(ref, source, mode))
            except (OSError, PodError, subprocess.SubprocessError) as exc:
                sys.stdout.write(f"prefetch: {exc}\n")
            sys.stdout.flush()
    return 0


def as_played(pod: dict) -> dict:
    """The Pod as podman mode hands it to `kube play`:
    - without livenessProbe: podman would run it as its own health check (systemd timers on
      VMs and bare metal: an exec per check with a 1 s timeout, which an emulated VM misses
      while busy) and restart the service on failure; the pod's exit policy then stopped the
      whole Pod. The agent's watchdog acts on livenessProbe, once, over HTTP from the node;
    - with spec.hostname = this node's for a hostNetwork Pod: podman 4.3 names the host
      after the Pod; Kubernetes gives it the node's hostname, which services register under
      (nova-compute, the neutron agents)."""
    spec = dict(pod.get("spec") or {})
    spec["containers"] = [{k: v for k, v in c.items() if k != "livenessProbe"} for c in spec.get("containers") or []]
    if spec.get("hostNetwork") and not spec.get("hostname"):
        spec["hostname"] = socket.gethostname()
    return dict(pod, spec=spec)


def play_podman(name: str, pod: dict, spec_file: Path) -> tuple[int, str, str]:
    cmd = ["podman", "kube", "play", "--replace"]
    netns = os.environ.get(node_contract.NETNS_ENV)
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
    files.write_atomic(_pids_file(name), str(p.pid))


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


def probe(spec: dict, timeout: float = 2.0, run_exec=None) -> tuple[bool, str]:
    """(passed, what an exec probe printed or why it failed). An exec probe runs through
    `run_exec(argv, timeout) -> (exit code, output)` (inside the container) when given, else
    here; timeoutSeconds wins over `timeout`."""
    timeout = float(spec.get("timeoutSeconds") or timeout)
    try:
        if "exec" in spec:
            argv = [str(a) for a in spec["exec"]["command"]]
            if run_exec is not None:
                code, out = run_exec(argv, timeout)
            else:
                p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
                code, out = p.returncode, p.stdout + p.stderr
            return code == 0, out.strip()
        if "httpGet" in spec:
            h = spec["httpGet"]
            url = f"http://{h.get('host', '127.0.0.1')}:{h['port']}{h.get('path', '/')}"
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return 200 <= r.status < 400, ""
        if "tcpSocket" in spec:
            t = spec["tcpSocket"]
            with socket.create_connection((t.get("host", "127.0.0.1"), int(t["port"])), timeout=timeout):
                return True, ""
    except (OSError, subprocess.SubprocessError, KeyError, ValueError, PodError) as exc:
        return False, f"{type(exc).__name__}: {exc}" if "exec" in spec else ""
    return True, ""


DEAD_EVERY = 2.0  # seconds between looks for a container that keeps exiting, while waiting
EXEC_SPACING_MAX = 8.0  # seconds between tries of a failing exec readiness probe, at most


def wait_ready(pod: dict, timeout: float, dead=lambda: None, run_exec=None) -> tuple[str, dict, str] | None:
    """None when every readiness probe passes within `timeout`, else (container, probe,
    why) of the first that did not. `dead()` names a container that keeps exiting, which
    ends the wait early (a broken configuration fails in seconds, not at the timeout).
    `run_exec(container)` gives the runner of that container's exec probes (None: here).
    A probe runs every periodSeconds when it says, else every 0.5 s. An exec probe without
    periodSeconds runs after 2 s, then 1.5 times as long after each failure, up to 8 s: each
    try is a process in the container (through the podman API, a conmon that lingers 5 min),
    and one that keeps failing mostly waits for another service (nova-conductor, on every
    node, for the bootstrap node's database sync)."""
    pending = {c["name"]: c["readinessProbe"] for c in pod["spec"]["containers"] if c.get("readinessProbe")}
    said: dict[str, str] = {}
    due = dict.fromkeys(pending, 0.0)
    next_dead = 0.0
    spacing = {n: float(spec.get("periodSeconds") or (2.0 if "exec" in spec else 0.5)) for n, spec in pending.items()}
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for n, spec in list(pending.items()):
            if time.monotonic() < due[n]:
                continue
            ok, said[n] = probe(spec, run_exec=run_exec(n) if run_exec else None)
            due[n] = time.monotonic() + spacing[n]
            if "exec" in spec and not spec.get("periodSeconds"):
                spacing[n] = min(spacing[n] * 1.5, EXEC_SPACING_MAX)
            if ok:
                pending.pop(n)
        if pending and time.monotonic() >= next_dead:
            # Each look inspects every container of the Pod through the podman API, which the
            # agents of all container nodes share: every DEAD_EVERY seconds is soon enough (a
            # container that keeps exiting is restarted with a back-off anyway).
            next_dead = time.monotonic() + DEAD_EVERY
            gone = dead()
            if gone:
                first = gone[0] if gone[0] in pending else sorted(pending)[0]
                return first, pending[first], f"did not pass: {gone[1]}" + _said(said.get(first))
        if pending:
            time.sleep(0.25 if min(due[n] for n in pending) - time.monotonic() < 0.5 else 0.5)
    if not pending:
        return None
    first = sorted(pending)[0]
    return first, pending[first], f"did not pass within {timeout:g} s" + _said(said.get(first))


def _said(text: str | None) -> str:
    """An exec probe's last words for the failure reason (its last line, trimmed)."""
    lines = [x.strip() for x in (text or "").splitlines() if x.strip()]
    return f"; it said: {lines[-1][:200]}" if lines else ""


def podman_exec(name: str, container: str):
    """podman mode: exec probes run inside the Pod's container (`podman exec`)."""
    def run(argv: list[str], timeout: float) -> tuple[int, str]:
        p = _run(["podman", "exec", f"{name}-{container}", *argv], timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    return run


@contextlib.contextmanager
def pod_lock(name: str, wait: bool = True):
    """Held while a Pod is played (the hook) or repaired (the watchdog), so the two never
    act on one Pod at once; yields False when `wait` is False and someone else holds it."""
    import fcntl

    with open(state_dir() / f"{name}.lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True


def node_containers(mode: str) -> dict[tuple[str, str], dict]:
    """(pod, container) -> {id, name, state, started_at, image, image_id} of every
    container this node's Pods have (one listing; process mode has none)."""
    found: dict[tuple[str, str], dict] = {}
    if mode == "netns":
        target = node_target()
        if not target:
            return found
        for c in PodmanAPI(target[0]).containers(node_contract.node_label(target[1])):
            parts = node_contract.pod_and_container(c.get("Labels") or {}, target[1])
            if parts:
                found[parts] = _container_info(c)
    elif mode == "podman":
        p = _run(["podman", "ps", "-a", "--pod", "--format", "json"], timeout=60)
        if p.returncode != 0:
            raise PodError(f"podman ps: {(p.stderr or p.stdout).strip()[-200:]}")
        for c in json.loads(p.stdout or "[]"):
            pod, name = c.get("PodName") or "", (c.get("Names") or [""])[0]
            if pod and not c.get("IsInfra") and name.startswith(pod + "-"):
                found[(pod, name[len(pod) + 1:])] = _container_info(c)
    return found


def _container_info(c: dict) -> dict:
    return {"id": c.get("Id") or c.get("ID") or "", "name": (c.get("Names") or [""])[0],
            "state": c.get("State") or "unknown", "started_at": c.get("StartedAt") or 0,
            "image": c.get("Image") or "", "image_id": (c.get("ImageID") or "")[:12]}


def start_container(mode: str, name: str, restart: bool = False) -> None:
    """Start a stopped container, or (restart) kill it and start it again: SIGKILL at once,
    which also ends a process stopped with SIGSTOP. A restart can race podman's restart
    policy (the kill makes conmon start it too) and fail with the container up again, or
    left stopped: then it is started unless it runs."""
    try:
        _start(mode, name, restart)
    except PodError:
        if not restart:
            raise
        time.sleep(0.5)
        if _state(mode, name) != "running":
            _start(mode, name, False)


def _start(mode: str, name: str, restart: bool) -> None:
    if mode == "netns":
        status, data = _node_api().call("POST", f"/containers/{name}/restart?t=0" if restart
                                        else f"/containers/{name}/start")
        if status >= 300 and status != 304:  # 304: already running
            raise PodError(f"podman API {'restart' if restart else 'start'} {name}: HTTP {status}: "
                           f"{data.decode(errors='replace').strip()[:200]}")
    else:
        p = _run(["podman", "restart", "-t", "0", name] if restart else ["podman", "start", name], timeout=120)
        if p.returncode != 0:
            raise PodError(f"podman {'restart' if restart else 'start'} {name}: {(p.stderr or p.stdout).strip()[-200:]}")


def _state(mode: str, name: str) -> str:
    if mode == "netns":
        status, data = _node_api().call("GET", f"/containers/{name}/json")
        return ((json.loads(data).get("State") or {}).get("Status") or "") if status == 200 else ""
    p = _run(["podman", "inspect", name, "--format", "{{.State.Status}}"], timeout=60)
    return p.stdout.strip() if p.returncode == 0 else ""


def _node_api() -> PodmanAPI:
    target = node_target()
    if not target:
        raise PodError("netns mode needs CONTAINER_HOST=unix://... and UNDERCLOUD_NODE_NETNS=container:NODE")
    return PodmanAPI(target[0])


def liveness_probe(container: dict) -> dict | None:
    """What the watchdog checks: the livenessProbe when the container has one, else its
    readinessProbe when that checks the container itself (httpGet or tcpSocket without a
    host). Exec readiness probes often ask other services (nova-compute's asks the Compute
    API): failing them says nothing about this container, so they restart nothing."""
    if container.get("livenessProbe"):
        return container["livenessProbe"]
    spec = container.get("readinessProbe") or {}
    for kind in ("httpGet", "tcpSocket"):
        if isinstance(spec.get(kind), dict) and not spec[kind].get("host"):
            return spec
    return None


# --- netns mode: the host's podman API, containers in the node's network namespace -------

def unix_connect(socket_path: str, timeout: float) -> socket.socket:
    """A stream socket connected to `socket_path`. A listener whose queue of connections
    not yet accepted is full (busy: many probes at once) refuses a connect with a timeout at
    once (EAGAIN, BlockingIOError) where a TCP one would wait: tried again until `timeout`."""
    deadline = time.monotonic() + timeout
    pause = 0.01
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(socket_path)
            return sock
        except BlockingIOError:
            sock.close()
            if time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)
        except BaseException:
            sock.close()
            raise


def unix_request(socket_path: str, method: str, path: str, body, headers: dict,
                 timeout: float) -> tuple[int, dict, bytes]:
    """One HTTP request over the Unix socket `socket_path`: (status, headers, body)."""
    import http.client

    class Conn(http.client.HTTPConnection):
        def connect(conn):  # noqa: N805 - the connection
            conn.sock = unix_connect(socket_path, timeout)

    conn = Conn("localhost", timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


class PodmanAPI:
    """The libpod REST API over a Unix socket (standard library only)."""

    def __init__(self, socket_path: str):
        self.socket_path = socket_path

    def call(self, method: str, path: str, body=None, raw=None, timeout: float = 120,
             headers: dict | None = None) -> tuple[int, bytes]:
        """`raw`: a tar, as bytes or an open file (streamed; give its Content-Length)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        sent = {"Content-Type": "application/x-tar" if raw is not None else "application/json", **(headers or {})}
        status, _headers, answer = unix_request(self.socket_path, method, "/v4.0.0/libpod" + path, data, sent,
                                                timeout)
        return status, answer

    def ok(self, method: str, path: str, body=None, raw: bytes | None = None, what: str = "") -> bytes:
        status, data = self.call(method, path, body, raw)
        if status >= 300:
            try:
                msg = json.loads(data).get("message") or data.decode()
            except ValueError:
                msg = data.decode(errors="replace")
            kind = EngineFailure if status >= 500 else PodError
            raise kind(f"podman API {what or path}: HTTP {status}: {msg.strip()[:300]}")
        return data

    def containers(self, label: str) -> list[dict]:
        filters = quote(json.dumps({"label": [label]}))
        return json.loads(self.ok("GET", f"/containers/json?all=true&filters={filters}") or b"[]")

    def logs_tail(self, name: str, lines: int = 20) -> str:
        status, data = self.call("GET", f"/containers/{name}/logs?stdout=true&stderr=true&tail={lines}")
        if status >= 300:
            return ""
        return _demux(data)

    def exec(self, name: str, argv: list[str], timeout: float) -> tuple[int, str]:
        """Run argv inside container `name` (exec create + start, attached); (exit code, output)."""
        data = self.ok("POST", f"/containers/{name}/exec",
                       {"Cmd": argv, "AttachStdout": True, "AttachStderr": True}, what=f"exec in {name}")
        exec_id = json.loads(data)["Id"]
        status, out = self.call("POST", f"/exec/{exec_id}/start", {"Detach": False, "Tty": False}, timeout=timeout)
        if status >= 300:
            raise PodError(f"podman API exec in {name}: HTTP {status}: {_demux(out).strip()[:300]}")
        for _ in range(20):  # the session's state may trail the end of its output a little
            info = json.loads(self.ok("GET", f"/exec/{exec_id}/json"))
            if not info.get("Running"):
                return int(info.get("ExitCode", -1)), _demux(out)
            time.sleep(0.05)
        return -1, _demux(out)


def _demux(data: bytes) -> str:
    """The text of a multiplexed stream (logs, attached exec): frames of 1 byte stream,
    3 zero bytes, 4 bytes big-endian size; anything else is taken as plain text."""
    out, i = [], 0
    while i + 8 <= len(data) and data[i] in (0, 1, 2) and data[i + 1:i + 4] == b"\0\0\0":
        size = int.from_bytes(data[i + 4:i + 8], "big")
        out.append(data[i + 8:i + 8 + size])
        i += 8 + size
    return (b"".join(out) if out else data).decode(errors="replace")


def _config_tar(mounts: list[tuple[str, dict]]) -> bytes:
    """A tar of the ConfigMap files at their mount paths (directories made, readable)."""
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        made = set()
        for mount_path, data in mounts:
            parts = [x for x in mount_path.strip("/").split("/") if x]
            for n in range(1, len(parts) + 1):
                d = "/".join(parts[:n])
                if d not in made:
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                    made.add(d)
            for key, value in (data or {}).items():
                blob = str(value).encode()
                info = tarfile.TarInfo("/".join([*parts, key]))
                info.size, info.mode = len(blob), 0o644
                tar.addfile(info, io.BytesIO(blob))
    return buf.getvalue()


def netns_prefix(name: str) -> str:
    target = node_target()
    return node_contract.pod_prefix(target[1], name) if target else name


def netns_dead(name: str, pod: dict, restarts: int = 2) -> tuple[str, str] | None:
    """(container, why) when a container of the Pod exited `restarts` times or for good."""
    target = node_target()
    if not target:
        return None
    api = PodmanAPI(target[0])
    for c in pod["spec"]["containers"]:
        status, data = api.call("GET", f"/containers/{node_contract.container_name(target[1], name, c['name'])}/json")
        if status != 200:
            continue
        info = json.loads(data)
        state = info.get("State") or {}
        count = info.get("RestartCount") or 0
        if count >= restarts or state.get("Status") in ("exited", "stopped") and count:
            return c["name"], f"the container exited {count + 1} times (last exit code {state.get('ExitCode')})"
    return None


def netns_exec(name: str, container: str):
    """netns mode: exec probes run inside the Pod's container through the podman API."""
    def run(argv: list[str], timeout: float) -> tuple[int, str]:
        target = node_target()
        if not target:
            raise PodError("netns mode needs CONTAINER_HOST=unix://... and UNDERCLOUD_NODE_NETNS=container:NODE")
        return PodmanAPI(target[0]).exec(node_contract.container_name(target[1], name, container), argv, timeout)
    return run


def claim_volume(api: PodmanAPI, node: str, claim: str) -> str:
    """The named volume behind a persistentVolumeClaim on this node, made when missing.
    Per node (`NODE-<claim>`): two container nodes on one host never share one; the label
    lets deleting the node remove it, and replacing a Pod keeps it."""
    vname = node_contract.claim_volume(node, claim)
    status, _ = api.call("GET", f"/volumes/{vname}/exists")
    if status != 204:
        api.ok("POST", "/volumes/create", {"Name": vname, "Label": node_contract.claim_labels(node, claim)},
               what=f"create volume {vname}")
    return vname


def api_recovered(exc: Exception, pod: dict, wait: float | None = None) -> bool:
    """After a real call failed as a broken service fails: tell the undercloud (the file beside
    the socket) and wait until it has checked the service (the file is gone) and the service
    answers; False when that does not happen within `wait` seconds."""
    target = node_target()
    if not target:
        return False
    sock = target[0]
    report = Path(sock + API_FAILED_SUFFIX)
    images = [c.get("image") for c in (pod.get("spec") or {}).get("containers") or [] if c.get("image")]
    try:
        files.write_atomic(report, json.dumps({"error": str(exc)[:300], "image": (images or [None])[0],
                                               "at": time.time()}))
    except OSError:
        return False  # nowhere to say it (a read-only mount): nobody would act on it
    deadline = time.monotonic() + (API_RECOVERY_WAIT if wait is None else wait)
    while time.monotonic() < deadline:
        if not report.exists():
            try:
                if PodmanAPI(sock).call("GET", "/_ping", timeout=5)[0] == 200:
                    return True
            except OSError:
                pass
        time.sleep(1)
    with contextlib.suppress(OSError):
        report.unlink()
    return False


def play_netns(name: str, pod: dict, configmaps: dict) -> str:
    target = node_target()
    if not target:
        raise PodError("netns mode needs CONTAINER_HOST=unix://... and UNDERCLOUD_NODE_NETNS=container:NODE")
    api, node = PodmanAPI(target[0]), target[1]
    for old in api.containers(node_contract.pod_label(node, name)):
        api.call("DELETE", f"/containers/{old['Id']}?force=true&timeout=5")
    spec = pod.get("spec") or {}
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    empty = {}  # emptyDir: a volume of this Pod's own, shared by its containers, empty at each play
    for vname in (n for n, v in volumes.items() if isinstance(v, dict) and "emptyDir" in v):
        empty[vname] = node_contract.empty_dir_volume(node, name, vname)
        api.call("DELETE", f"/volumes/{empty[vname]}?force=true")
        api.ok("POST", "/volumes/create", {"Name": empty[vname], "Label": node_contract.empty_dir_labels(node, name)},
               what=f"create volume {empty[vname]}")
    started = []
    for c in spec["containers"]:
        cname = node_contract.container_name(node, name, c["name"])
        mounts, binds, named = [], [], []
        for m in c.get("volumeMounts") or []:
            v = volumes.get(m.get("name")) or {}
            if "configMap" in v:
                cm = v["configMap"].get("name")
                if cm not in configmaps:
                    raise PodError(f"pod {name}: container {c['name']}: ConfigMap {cm!r} is not in the config")
                mounts.append((m["mountPath"], configmaps[cm]))
            elif "hostPath" in v:
                binds.append({"destination": m["mountPath"], "source": v["hostPath"]["path"], "type": "bind",
                              "options": ["ro"] if m.get("readOnly") else []})
            elif "persistentVolumeClaim" in v or "emptyDir" in v:
                vname = empty.get(m.get("name")) or claim_volume(api, node, v["persistentVolumeClaim"]["claimName"])
                named.append({"Name": vname, "Dest": m["mountPath"], "Options": ["ro"] if m.get("readOnly") else []})
        create = {
            "name": cname, "image": c["image"],
            "netns": {"nsmode": "container", "value": node},
            "labels": node_contract.container_labels(node, name, c["name"]),
            "env": {e["name"]: str(e.get("value", "")) for e in c.get("env") or []},
            "oci_runtime": "runc",
            "r_limits": RLIMITS,
            "restart_policy": "always",
            "mounts": binds,
            "volumes": named,
            "cap_add": capabilities(c, "add"),
            "cap_drop": capabilities(c, "drop"),
            "privileged": privileged(c),
        }
        if spec.get("hostNetwork"):
            # Kubernetes gives a hostNetwork Pod the node's hostname: services register under it.
            create["utsns"] = {"nsmode": "container", "value": node}
        if c.get("command"):
            create["entrypoint"] = [str(a) for a in c["command"]]
        if c.get("args") is not None:
            create["command"] = [str(a) for a in c["args"]]
        elif c.get("command"):
            create["command"] = []
        api.ok("POST", "/containers/create", create, what=f"create {cname}")
        if mounts:
            api.ok("PUT", f"/containers/{cname}/archive?path=/", raw=_config_tar(mounts), what=f"copy config into {cname}")
        api.ok("POST", f"/containers/{cname}/start", what=f"start {cname}")
        started.append(cname)
    return f"pod {name}: containers {', '.join(started)} in the network namespace of {node}\n"


def log_tail(mode: str, name: str, container: str, lines: int = 20) -> str:
    """The last lines of a Pod container's log, for failure messages."""
    try:
        if mode == "netns":
            target = node_target()
            return (PodmanAPI(target[0]).logs_tail(node_contract.container_name(target[1], name, container), lines)
                    if target else "")
        if mode == "podman":
            p = _run(["podman", "logs", "--tail", str(lines), f"{name}-{container}"], timeout=30)
            return p.stdout + p.stderr
        return "".join((state_dir() / name / f"{container}.log").read_text(errors="replace")
                       .splitlines(keepends=True)[-lines:])
    except (OSError, PodError, subprocess.SubprocessError):
        return ""


def probe_text(spec: dict) -> str:
    """A probe as operators read it (`overcloud status`'s health_check, the watchdog's log)."""
    if "httpGet" in spec:
        h = spec["httpGet"]
        return f"HTTP GET :{h.get('port')}{h.get('path', '/')}"
    if "tcpSocket" in spec:
        return f"TCP :{spec['tcpSocket'].get('port')}"
    if "exec" in spec:
        return "exec " + " ".join(map(str, spec["exec"].get("command") or []))
    return "probe"


def play_one(pod: dict, configmaps: dict, mode: str, options: dict) -> dict:
    name = validate(pod)
    with pod_lock(name):
        return _play_locked(name, pod, configmaps, mode, options)


def pod_digest(pod: dict, configmaps: dict) -> str:
    """What decides whether a played Pod is replaced: the Pod and the data of the ConfigMaps
    it mounts (name -> data). The deploy's dry run (overcloud/dryrun.py) calls this too, so
    the restarts it announces are the ones the agent makes."""
    return hashlib.sha256(json.dumps([pod, {k: configmaps.get(k) for k in _configmap_names(pod)}],
                                     sort_keys=True).encode()).hexdigest()


def _play_locked(name: str, pod: dict, configmaps: dict, mode: str, options: dict) -> dict:
    """Play the Pod unless its config is unchanged and it runs and is ready. With the config
    unchanged (a re-run to converge), what drifted is repaired and said in `repairs`: stopped
    containers are started again, a Pod not ready or with containers missing is re-created."""
    digest = pod_digest(pod, configmaps)
    spec_file = state_dir() / f"{name}.json"
    hash_file = state_dir() / f"{name}.sha256"
    existed = hash_file.exists()
    same = existed and hash_file.read_text() == f"{mode}:{digest}"
    dead = (lambda: netns_dead(name, pod)) if mode == "netns" else (lambda: None)
    run_exec = {"netns": lambda c: netns_exec(name, c), "podman": lambda c: podman_exec(name, c)}.get(mode)
    ready_timeout = float(options.get("ready_timeout", 60))
    unchanged = {"deploy_stdout": f"pod {name}: unchanged ({digest[:12]}), left running\n", "deploy_stderr": "",
                 "deploy_status_code": 0, "config_hash": digest, "pod_action": "unchanged"}
    was = ""
    if same and mode == "process":
        if _processes_running(name):
            return unchanged
        was = "not running"
    elif same:
        try:
            states = {c: i for (p, c), i in node_containers(mode).items() if p == name}
        except (OSError, ValueError, PodError, subprocess.SubprocessError) as exc:
            return {"deploy_stdout": "", "deploy_stderr": f"kube: {exc}", "deploy_status_code": 1}
        wanted = [c["name"] for c in pod["spec"]["containers"]]
        stopped = [c for c in wanted if c in states and states[c]["state"] != "running"]
        if any(c not in states for c in wanted):
            was = "missing containers"
        elif not stopped:
            not_ready = wait_ready(pod, min(ready_timeout, 30.0), dead, run_exec)
            if not_ready is None:
                return unchanged
            was = f"running but not ready ({not_ready[0]}: {not_ready[2]})"
        else:
            was = states[stopped[0]]["state"]
            try:
                for c in stopped:
                    start_container(mode, states[c]["name"])
            except PodError as exc:
                was += f", could not be started ({exc})"
            else:
                if wait_ready(pod, ready_timeout, dead, run_exec) is None:
                    repair = f"{name}: was {was}, started, healthy"
                    return dict(unchanged, deploy_stdout=f"pod {name}: {repair}\n", pod_action="started",
                                repairs=[repair])
                was += ", started but not ready"
    files.write_atomic(spec_file, json.dumps(pod, indent=2))
    hash_file.unlink(missing_ok=True)  # written again only once this play is ready
    with _CREATING:
        played = _create(name, pod, configmaps, mode, spec_file)
    if isinstance(played, dict):
        return played
    out, err = played
    not_ready = wait_ready(pod, ready_timeout, dead, run_exec)
    if not_ready:
        container, spec, not_ready_why = not_ready
        tail = log_tail(mode, name, container)
        msg = f"pod {name}: container {container}: readiness probe ({probe_text(spec)}) {not_ready_why}"
        reason = failure_reason(msg, tail)
        return {"deploy_stdout": out, "deploy_stderr": err + f"kube: {msg}\n{tail.rstrip()}",
                "deploy_status_code": 1, "deploy_failure_reason": reason,
                "failed_pod": name, "failed_container": container}
    files.write_atomic(hash_file, f"{mode}:{digest}")
    result = {"deploy_stdout": out, "deploy_stderr": err, "deploy_status_code": 0, "config_hash": digest}
    if was:
        repair = f"{name}: was {was}, re-created, healthy"
        return dict(result, deploy_stdout=out + f"pod {name}: {repair}\n", pod_action="re-created", repairs=[repair])
    action = "replaced" if existed else "created"
    return dict(result, deploy_stdout=out + f"pod {name}: {action} ({mode}, {digest[:12]})\n", pod_action=action)


def failure_reason(msg: str, log: str, lines: int = 8, chars: int = REASON_CHARS) -> str:
    """The reason a Pod failed, as one line (it travels in resource statuses and events):
    `msg` and the last lines of the container's log joined by " | ". Older lines give way
    first, so that the last line, where a service says why it stopped, always fits."""
    tail = [x.strip()[:200] for x in log.splitlines() if x.strip()][-lines:]
    while tail and len(msg) + len(" | last lines of its log: | ") + len(" | ".join(tail)) > chars:
        tail.pop(0)
    return msg + (" | last lines of its log: | " + " | ".join(tail) if tail else "")


# The Pods of a step are played at once (play_all); their containers are made one Pod at a
# time, so two Pods that share a claimed volume never both create it.
_CREATING = threading.Lock()


def _create(name: str, pod: dict, configmaps: dict, mode: str, spec_file: Path) -> tuple[str, str] | dict:
    """Make and start the Pod's containers: (stdout, stderr), or the hook's failure result."""
    if mode == "podman":
        docs = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}, "data": configmaps[n]}
                for n in _configmap_names(pod) if n in configmaps]
        play_file = state_dir() / f"{name}.play.yaml"
        files.write_atomic(play_file, "\n---\n".join(json.dumps(d) for d in [*docs, as_played(pod)]))
        code, out, err = play_podman(name, pod, play_file)
        if code != 0:
            return {"deploy_stdout": out, "deploy_stderr": err, "deploy_status_code": code}
        return out, err
    if mode == "netns":
        try:
            try:
                out, err = play_netns(name, pod, configmaps), ""
            except (OSError, EngineFailure) as exc:
                if not api_recovered(exc, pod):
                    raise
                out, err = play_netns(name, pod, configmaps), f"kube: {exc}; played again after the undercloud's check\n"
        except (OSError, PodError) as exc:
            return {"deploy_stdout": "", "deploy_stderr": f"kube: {exc}", "deploy_status_code": 1}
        return out, err
    start_processes(name, pod, spec_file)
    return f"pod {name}: started as supervised processes\n", ""


def _configmap_names(pod: dict) -> list[str]:
    return sorted({v["configMap"].get("name") for v in (pod.get("spec") or {}).get("volumes") or []
                   if isinstance(v, dict) and isinstance(v.get("configMap"), dict)})


def split(config, options: dict | None = None) -> tuple[dict, list[dict]]:
    """A kube deployment's config (a Pod, or a `kind: List` of ConfigMaps and Pods; JSON
    text or parsed): (ConfigMap name -> data, Pods), each Pod validated and with the
    options' image_overrides applied (this role runs another image of these: `overcloud
    update --role`). ValueError or PodError for a config that is neither."""
    doc = json.loads(config) if isinstance(config, str) else config
    if isinstance(doc, dict) and doc.get("kind") == "List":
        items = doc.get("items") or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise PodError("items: a list of ConfigMaps and Pods")
        configmaps = {(i.get("metadata") or {}).get("name"): i.get("data") or {}
                      for i in items if i.get("kind") == "ConfigMap"}
        pods = [i for i in items if i.get("kind", "Pod") == "Pod"]
    else:
        configmaps, pods = {}, [doc]
    for pod in pods:
        validate(pod)
    overrides = (options or {}).get("image_overrides") or {}
    if not isinstance(overrides, dict) or not all(isinstance(v, str) and v for v in overrides.values()):
        raise PodError("options.image_overrides: a map of image -> image")
    for pod in pods:
        for container in (pod.get("spec") or {}).get("containers") or []:
            container["image"] = overrides.get(container.get("image"), container.get("image"))
    return configmaps, pods


def hook_kube(c: dict) -> dict:
    options = c.get("options") or {}
    try:
        configmaps, pods = split(c.get("config"), options)
    except (ValueError, PodError) as exc:
        return {"deploy_stdout": "", "deploy_stderr": f"kube: {exc}", "deploy_status_code": 2}
    mode = choose_mode(options)
    if not pods:
        return {"deploy_stdout": "no pods in this config\n", "deploy_stderr": "", "deploy_status_code": 0}
    outs, errs, result = [], [], {}
    if mode in ("podman", "netns") and options.get("image_sources"):
        try:
            outs.append(ensure_images(pods, options["image_sources"], mode))
            start_prefetch(options.get("image_prefetch") or [], options["image_sources"], mode)
        except PodError as exc:
            return {"deploy_stdout": "".join(outs), "deploy_stderr": f"kube: {exc}", "deploy_status_code": 1,
                    "deploy_failure_reason": str(exc)}
    repairs, results = [], play_all(pods, configmaps, mode, options)
    for result in results:
        outs.append(result.get("deploy_stdout") or "")
        errs.append(result.get("deploy_stderr") or "")
        repairs += result.get("repairs") or []
    # The step's result is its first failure, in the list's order (else its last Pod's).
    result = next((r for r in results if r.get("deploy_status_code")), results[-1])
    # `repairs`: what a re-run found drifted and repaired (a deployment output the CLI reports).
    return dict(result, deploy_stdout="".join(outs), deploy_stderr="".join(errs), repairs=repairs)


def play_all(pods: list[dict], configmaps: dict, mode: str, options: dict) -> list[dict]:
    """Every Pod of a step played at once, their results in the list's order. As TripleO
    started a step's containers together: a service that needs another of its step waits
    for it itself (nova-compute for libvirtd, nova-conductor for the bootstrap nova-api),
    so a step takes as long as its slowest Pod, not the sum of its Pods' starts and first
    reports."""
    if len(pods) == 1:
        return [play_one(pods[0], configmaps, mode, options)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(pods)) as pool:
        return list(pool.map(lambda pod: play_one(pod, configmaps, mode, options), pods))
