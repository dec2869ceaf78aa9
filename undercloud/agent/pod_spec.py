"""The Pod a `kube` deployment hands a node: the Kubernetes subset the agent plays, checked
before anything runs, and what is derived from it alone (its digest, podman's copy of it,
the probe a watchdog acts on, a probe as operators read it).

Subset: metadata.name; spec.containers[] with name, image, command, args, env
(name/value), ports, volumeMounts, readinessProbe (exec, httpGet, tcpSocket; timeoutSeconds,
periodSeconds), securityContext.capabilities (add/drop) and securityContext.privileged;
spec.volumes[] hostPath (files, directories, devices such as /dev/net/tun), emptyDir,
configMap, persistentVolumeClaim (claimName: a named volume per node, kept when the Pod is
replaced, shared by every container of the node that mounts the same claim); hostNetwork
(the node's network and, as Kubernetes gives it, the node's hostname). livenessProbe is
acted on by the agent's watchdog only: podman is not handed it (see as_played).
The config may also be a `kind: List` of ConfigMaps and Pods (`split`).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket


class PodError(Exception):
    pass


class EngineFailure(PodError):
    """A call to the host's podman API that failed the way a broken service fails (HTTP 5xx)."""


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


def configmap_names(pod: dict) -> list[str]:
    return sorted({v["configMap"].get("name") for v in (pod.get("spec") or {}).get("volumes") or []
                   if isinstance(v, dict) and isinstance(v.get("configMap"), dict)})


def pod_digest(pod: dict, configmaps: dict) -> str:
    """What decides whether a played Pod is replaced: the Pod and the data of the ConfigMaps
    it mounts (name -> data). The deploy's dry run (overcloud/dryrun.py) calls this too, so
    the restarts it announces are the ones the agent makes."""
    return hashlib.sha256(json.dumps([pod, {k: configmaps.get(k) for k in configmap_names(pod)}],
                                     sort_keys=True).encode()).hexdigest()


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
