"""netns mode (container nodes; podman 4.3's `kube play` cannot join another container's
network namespace): with CONTAINER_HOST=unix://... and UNDERCLOUD_NODE_NETNS=
container:NODE, each container of the Pod is created through the host's podman API
(agent/libpod.py) as `NODE-<pod>-<container>` joined to NODE's network namespace (and, for
a hostNetwork Pod, its UTS namespace: the node's hostname), with runc and explicit ulimits;
ConfigMap volumes are copied into the container before it starts (the archive API);
httpGet/tcpSocket probes run from the agent, which shares that namespace. A
persistentVolumeClaim is the named volume `NODE-<claimName>` (labelled undercloud.node=NODE:
deleting the node removes it), so two nodes on one host never share one; an emptyDir the
named volume `NODE-<pod>-<volume>`, made empty again when the Pod is played; capabilities
become the create body's cap_add/cap_drop, privileged its privileged.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from undercloud.agent import engine, files, libpod, node_contract, pod_spec
from undercloud.agent.pod_spec import PodError


def netns_prefix(name: str) -> str:
    target = engine.node_target()
    return node_contract.pod_prefix(target[1], name) if target else name


def netns_dead(name: str, pod: dict, restarts: int = 2) -> tuple[str, str] | None:
    """(container, why) when a container of the Pod exited `restarts` times or for good."""
    target = engine.node_target()
    if not target:
        return None
    api = libpod.PodmanAPI(target[0])
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


def claim_volume(api: libpod.PodmanAPI, node: str, claim: str) -> str:
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
    target = engine.node_target()
    if not target:
        return False
    sock = target[0]
    report = Path(sock + engine.API_FAILED_SUFFIX)
    images = [c.get("image") for c in (pod.get("spec") or {}).get("containers") or [] if c.get("image")]
    try:
        files.write_atomic(report, json.dumps({"error": str(exc)[:300], "image": (images or [None])[0],
                                               "at": time.time()}))
    except OSError:
        return False  # nowhere to say it (a read-only mount): nobody would act on it
    deadline = time.monotonic() + (engine.API_RECOVERY_WAIT if wait is None else wait)
    while time.monotonic() < deadline:
        if not report.exists():
            try:
                if libpod.PodmanAPI(sock).call("GET", "/_ping", timeout=5)[0] == 200:
                    return True
            except OSError:
                pass
        time.sleep(1)
    with contextlib.suppress(OSError):
        report.unlink()
    return False


def play_netns(name: str, pod: dict, configmaps: dict) -> str:
    target = engine.node_target()
    if not target:
        raise PodError("netns mode needs CONTAINER_HOST=unix://... and UNDERCLOUD_NODE_NETNS=container:NODE")
    api, node = libpod.PodmanAPI(target[0]), target[1]
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
            "r_limits": engine.RLIMITS,
            "restart_policy": "always",
            "mounts": binds,
            "volumes": named,
            "cap_add": pod_spec.capabilities(c, "add"),
            "cap_drop": pod_spec.capabilities(c, "drop"),
            "privileged": pod_spec.privileged(c),
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
            api.ok("PUT", f"/containers/{cname}/archive?path=/", raw=libpod.config_tar(mounts), what=f"copy config into {cname}")
        api.ok("POST", f"/containers/{cname}/start", what=f"start {cname}")
        started.append(cname)
    return f"pod {name}: containers {', '.join(started)} in the network namespace of {node}\n"
