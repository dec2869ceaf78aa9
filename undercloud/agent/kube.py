"""The `kube` hook: a Kubernetes Pod (agent/pod_spec.py), or a `kind: List` of ConfigMaps and
Pods, as a deployment's config, played by the node's engine (agent/engine.py: podman,
netns or process; `engine_for`).

A Pod whose rendered config hash is unchanged and still running and ready is left alone; a
changed one is replaced; an unchanged one that drifted (containers stopped, missing or not
ready) is repaired and the repair reported (`repairs`). Between deployments the agent's
watchdog (agent/watchdog.py) keeps played Pods running and healthy.

A step's Pods are played at once; the first Pod not ready fails the deployment naming the
Pod, its probe (an exec probe's last line of output) and the last lines of its container's
log. Options: `image_overrides` (image -> image this node runs instead, applied before the
hash: only the Pods that use one change), `image_sources`/`image_prefetch` (agent/pod_images.py),
`ready_timeout`, `kube_mode`.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading

from undercloud.agent import (
    engine,
    files,
    netns,
    pod_images,
    pod_spec,
    probes,
    processes,
)
from undercloud.agent.pod_spec import PodError
from undercloud.agent.settings import REASON_CHARS

ENGINES: dict[str, type[engine.Engine]] = {
    "podman": engine.PodmanEngine, "netns": netns.NetnsEngine, "process": processes.ProcessEngine}


def engine_for(mode: str) -> engine.Engine:
    """The engine of a mode (engine.choose_mode; recorded beside each played Pod)."""
    return ENGINES[mode]()


@contextlib.contextmanager
def pod_lock(name: str, wait: bool = True):
    """Held while a Pod is played (the hook) or repaired (the watchdog), so the two never
    act on one Pod at once; yields False when `wait` is False and someone else holds it."""
    import fcntl

    with open(engine.state_dir() / f"{name}.lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True


def log_tail(eng: engine.Engine, name: str, container: str, lines: int = 20) -> str:
    """The last lines of a Pod container's log, for failure messages ("" when unreadable)."""
    try:
        return eng.log_tail(name, container, lines)
    except (OSError, PodError, subprocess.SubprocessError):
        return ""


def play_one(pod: dict, configmaps: dict, eng: engine.Engine, options: dict) -> dict:
    name = pod_spec.validate(pod)
    with pod_lock(name):
        return _play_locked(name, pod, configmaps, eng, options)


def _play_locked(name: str, pod: dict, configmaps: dict, eng: engine.Engine, options: dict) -> dict:
    """Play the Pod unless its config is unchanged and it runs and is ready. With the config
    unchanged (a re-run to converge), what drifted is repaired and said in `repairs`: stopped
    containers are started again, a Pod not ready or with containers missing is re-created."""
    digest = pod_spec.pod_digest(pod, configmaps)
    spec_file = engine.state_dir() / f"{name}.json"
    hash_file = engine.state_dir() / f"{name}.sha256"
    existed = hash_file.exists()
    same = existed and hash_file.read_text() == f"{eng.name}:{digest}"

    def dead() -> tuple[str, str] | None:
        return eng.dead(name, pod)

    run_exec = (lambda c: eng.exec_runner(name, c)) if eng.lists_containers else None
    ready_timeout = float(options.get("ready_timeout", 60))
    unchanged = {"deploy_stdout": f"pod {name}: unchanged ({digest[:12]}), left running\n", "deploy_stderr": "",
                 "deploy_status_code": 0, "config_hash": digest, "pod_action": "unchanged"}
    was = ""
    if same and not eng.lists_containers:
        if eng.running(name):
            return unchanged
        was = "not running"
    elif same:
        try:
            states = {c: i for (p, c), i in eng.containers().items() if p == name}
        except (OSError, ValueError, PodError, subprocess.SubprocessError) as exc:
            return {"deploy_stdout": "", "deploy_stderr": f"kube: {exc}", "deploy_status_code": 1}
        wanted = [c["name"] for c in pod["spec"]["containers"]]
        stopped = [c for c in wanted if c in states and states[c]["state"] != "running"]
        if any(c not in states for c in wanted):
            was = "missing containers"
        elif not stopped:
            not_ready = probes.wait_ready(pod, min(ready_timeout, 30.0), dead, run_exec)
            if not_ready is None:
                return unchanged
            was = f"running but not ready ({not_ready[0]}: {not_ready[2]})"
        else:
            was = states[stopped[0]]["state"]
            try:
                for c in stopped:
                    eng.start(states[c]["name"])
            except PodError as exc:
                was += f", could not be started ({exc})"
            else:
                if probes.wait_ready(pod, ready_timeout, dead, run_exec) is None:
                    repair = f"{name}: was {was}, started, healthy"
                    return dict(unchanged, deploy_stdout=f"pod {name}: {repair}\n", pod_action="started",
                                repairs=[repair])
                was += ", started but not ready"
    files.write_atomic(spec_file, json.dumps(pod, indent=2))
    hash_file.unlink(missing_ok=True)  # written again only once this play is ready
    with _CREATING:
        played = eng.create(name, pod, configmaps, spec_file)
    if isinstance(played, dict):
        return played
    out, err = played
    not_ready = probes.wait_ready(pod, ready_timeout, dead, run_exec)
    if not_ready:
        container, spec, not_ready_why = not_ready
        tail = log_tail(eng, name, container)
        msg = f"pod {name}: container {container}: readiness probe ({pod_spec.probe_text(spec)}) {not_ready_why}"
        reason = failure_reason(msg, tail)
        return {"deploy_stdout": out, "deploy_stderr": err + f"kube: {msg}\n{tail.rstrip()}",
                "deploy_status_code": 1, "deploy_failure_reason": reason,
                "failed_pod": name, "failed_container": container}
    files.write_atomic(hash_file, f"{eng.name}:{digest}")
    result = {"deploy_stdout": out, "deploy_stderr": err, "deploy_status_code": 0, "config_hash": digest}
    if was:
        repair = f"{name}: was {was}, re-created, healthy"
        return dict(result, deploy_stdout=out + f"pod {name}: {repair}\n", pod_action="re-created", repairs=[repair])
    action = "replaced" if existed else "created"
    return dict(result, deploy_stdout=out + f"pod {name}: {action} ({eng.name}, {digest[:12]})\n", pod_action=action)


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


def hook_kube(c: dict) -> dict:
    options = c.get("options") or {}
    try:
        configmaps, pods = pod_spec.split(c.get("config"), options)
    except (ValueError, PodError) as exc:
        return {"deploy_stdout": "", "deploy_stderr": f"kube: {exc}", "deploy_status_code": 2}
    eng = engine_for(engine.choose_mode(options))
    if not pods:
        return {"deploy_stdout": "no pods in this config\n", "deploy_stderr": "", "deploy_status_code": 0}
    outs, errs, result = [], [], {}
    if eng.loads_images and options.get("image_sources"):
        try:
            outs.append(pod_images.ensure_images(pods, options["image_sources"], eng))
            pod_images.start_prefetch(options.get("image_prefetch") or [], options["image_sources"], eng)
        except PodError as exc:
            return {"deploy_stdout": "".join(outs), "deploy_stderr": f"kube: {exc}", "deploy_status_code": 1,
                    "deploy_failure_reason": str(exc)}
    repairs, results = [], play_all(pods, configmaps, eng, options)
    for result in results:
        outs.append(result.get("deploy_stdout") or "")
        errs.append(result.get("deploy_stderr") or "")
        repairs += result.get("repairs") or []
    # The step's result is its first failure, in the list's order (else its last Pod's).
    result = next((r for r in results if r.get("deploy_status_code")), results[-1])
    # `repairs`: what a re-run found drifted and repaired (a deployment output the CLI reports).
    return dict(result, deploy_stdout="".join(outs), deploy_stderr="".join(errs), repairs=repairs)


def play_all(pods: list[dict], configmaps: dict, eng: engine.Engine, options: dict) -> list[dict]:
    """Every Pod of a step played at once, their results in the list's order. As TripleO
    started a step's containers together: a service that needs another of its step waits
    for it itself (nova-compute for libvirtd, nova-conductor for the bootstrap nova-api),
    so a step takes as long as its slowest Pod, not the sum of its Pods' starts and first
    reports."""
    if len(pods) == 1:
        return [play_one(pods[0], configmaps, eng, options)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(pods)) as pool:
        return list(pool.map(lambda pod: play_one(pod, configmaps, eng, options), pods))
