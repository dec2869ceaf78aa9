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
from urllib.parse import quote

from undercloud.agent import engine, files, libpod, node_contract, pod_spec
from undercloud.agent.pod_spec import EngineFailure, PodError

NEEDS = "netns mode needs CONTAINER_HOST=unix://... and UNDERCLOUD_NODE_NETNS=container:NODE"


def _target() -> tuple[str, str]:
    """(the host's podman API socket, the node's container)."""
    target = engine.node_target()
    if not target:
        raise PodError(NEEDS)
    return target


def _api() -> libpod.PodmanAPI:
    return libpod.PodmanAPI(_target()[0])


class NetnsEngine(engine.Engine):
    """A container node's Pods: containers of the host's podman (its API) in the node's
    network namespace, named and labelled by agent/node_contract.py."""

    name = "netns"

    def create(self, name: str, pod: dict, configmaps: dict, spec_file: Path) -> tuple[str, str] | dict:
        try:
            try:
                return play_netns(name, pod, configmaps), ""
            except (OSError, EngineFailure) as exc:
                if not api_recovered(exc, pod):
                    raise
                return play_netns(name, pod, configmaps), f"kube: {exc}; played again after the undercloud's check\n"
        except (OSError, PodError) as exc:
            return {"deploy_stdout": "", "deploy_stderr": f"kube: {exc}", "deploy_status_code": 1}

    def containers(self) -> dict[tuple[str, str], dict]:
        target = engine.node_target()
        if not target:
            return {}
        found = {}
        for c in libpod.PodmanAPI(target[0]).containers(node_contract.node_label(target[1])):
            parts = node_contract.pod_and_container(c.get("Labels") or {}, target[1])
            if parts:
                found[parts] = engine.container_info(c)
        return found

    def container_name(self, pod: str, container: str) -> str:
        return node_contract.container_name(_target()[1], pod, container)

    def _start(self, container: str, restart: bool) -> None:
        status, data = _api().call("POST", f"/containers/{container}/restart?t=0" if restart
                                   else f"/containers/{container}/start")
        if status >= 300 and status != 304:  # 304: already running
            raise PodError(f"podman API {'restart' if restart else 'start'} {container}: HTTP {status}: "
                           f"{data.decode(errors='replace').strip()[:200]}")

    def state(self, container: str) -> str:
        status, data = _api().call("GET", f"/containers/{container}/json")
        return ((json.loads(data).get("State") or {}).get("Status") or "") if status == 200 else ""

    def log_tail(self, pod: str, container: str, lines: int = 20) -> str:
        return _api().logs_tail(self.container_name(pod, container), lines)

    def exec_runner(self, pod: str, container: str) -> engine.ExecRunner:
        def run(argv: list[str], timeout: float) -> tuple[int, str]:
            return _api().exec(self.container_name(pod, container), argv, timeout)
        return run

    def dead(self, pod_name: str, pod: dict) -> tuple[str, str] | None:
        return netns_dead(pod_name, pod)

    # On the undercloud's host the images are there already; a hypervisor host's podman gets
    # them as a VM node's does.
    def image_exists(self, ref: str) -> bool:
        return _api().call("GET", f"/images/{quote(ref, safe='')}/exists")[0] == 204

    def image_load(self, ref: str, archive: Path) -> str:
        with archive.open("rb") as f:
            status, data = _api().call("POST", "/images/load", raw=f, timeout=1800,
                                       headers={"Content-Length": str(archive.stat().st_size)})
        if status >= 300:
            raise PodError(f"image {ref}: podman API load: HTTP {status}: {data.decode(errors='replace')[-300:]}")
        names = json.loads(data or b"{}").get("Names") or [""]
        return names[0]

    def image_tag(self, ref: str, loaded: str) -> None:
        repo, _, tag = ref.rpartition(":")
        status, data = _api().call("POST", f"/images/{quote(loaded, safe='')}/tag?repo={quote(repo, safe='')}"
                                           f"&tag={quote(tag, safe='')}")
        if status >= 300:
            raise PodError(f"image {ref}: loaded as {loaded!r}, cannot tag it: HTTP {status}: "
                           f"{data.decode(errors='replace')[-200:]}")


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
    target = _target()
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
