"""The deploy's dry run (`undercloud deploy --dry-run`): what a deploy would change, per node
and service, from the engine's own dry run of the stack update (the same templates,
parameters and decisions as the update; its `changes` are the resolved properties of each
resource it would create or change, hidden values masked).

A service's rendered config files and Pod are its nested stack's `ConfigFiles` and `Pod`
values; the node gets them as a ConfigMap and the Pod (the service's role_data `kube`).
Whether a node's agent replaces the Pod is decided by `agent.pod_spec.pod_digest` over exactly
those: the same function is called here, so "restart" is the agent's decision, not a
guess. Nodes added are the new members of a role's server group; removed ones, the
members the update deletes (overcloud/scale.removed_nodes). Pure functions over the
engine's answer and the deployed stack (`get` is the client's)."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from typing import Any

from undercloud.masking import Mask

NEW_SERVER = re.compile(r"^(\w+)Servers\.([^.\s]+)$")
MAY_CHANGE = re.compile(r"^(\w+)\.\* \(may change with inputs from (.+)\)$")
PARTS = ("ConfigFiles", "Pod")


def service_resources(library, roles) -> dict[str, tuple[str, str]]:
    """The resource name of each role's service in the plan -> (role, service name)
    (overcloud.j2.yaml names them <Role><last part of the service type>)."""
    return {f"{r.name}{s.type.split('::')[-1]}": (r.name, s.name)
            for r in roles for s in library.per_role[r.name] if s.template}


def _text(value: Any) -> list[str]:
    """A rendered file as lines (a JSON document indented, so a diff shows the line changed)."""
    if isinstance(value, str):
        try:
            doc = json.loads(value)
        except ValueError:
            return value.splitlines(keepends=True)
        if not isinstance(doc, dict | list):
            return value.splitlines(keepends=True)
        value = doc
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").splitlines(keepends=True)


def file_diff(service: str, before: dict, after: dict) -> str:
    """Unified diff of a service's config files (name -> text) and its Pod."""
    out = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a == b:
            continue
        out += difflib.unified_diff(_text(a) if a is not None else [], _text(b) if b is not None else [],
                                    f"a/{service}/{name}", f"b/{service}/{name}")
    return "".join(line if line.endswith("\n") else line + "\n" for line in out)


def images(pod: dict | None) -> list[str]:
    return [c.get("image") for c in ((pod or {}).get("spec") or {}).get("containers") or []]


def restarts(pod_before: dict, files_before: dict, pod_after: dict, files_after: dict) -> bool:
    """The agent's decision for a Pod it runs: replaced when its digest changes."""
    from undercloud.agent.pod_spec import configmap_names, pod_digest

    def digest(pod, files):
        return pod_digest(pod, {name: files for name in configmap_names(pod)})

    return digest(pod_before, files_before) != digest(pod_after, files_after)


def rows(plan: dict, resources: dict[str, tuple[str, str]] | None, role_nodes: dict[str, list[str]],
         removed: dict[str, str], current: Callable[[str], Any], secrets: Mask) -> list[dict]:
    """One row per node and service that would change, and per node added or removed:
    {node, role, service, change (added|removed, or config, secret, image joined by +; or
    "inputs from X": known only once X changed, restart None), restart,
    image_before, image_after, diff}. `current(path)`: a deployed resource's properties
    (for the part of a service the update leaves as it is); `secrets`: masked everywhere.
    `resources` (see service_resources) None: services named by their Pod."""
    changes = plan.get("changes") or {}
    out: list[dict] = []
    touched: dict[str, dict[str, dict]] = {}
    for path, change in changes.items():
        head, _, part = path.rpartition(".")
        if part in PARTS and (head in resources if resources is not None else
                              "." not in head and any(head.startswith(r) for r in role_nodes)):
            touched.setdefault(head, {})[part] = change
    for head, parts in sorted(touched.items()):
        if resources is not None:
            role, service = resources[head]
        else:  # no library at hand (`overcloud update`): the role by name, the service by its Pod's
            role = max((r for r in role_nodes if head.startswith(r)), key=len)
            pod = ((parts.get("Pod") or {}).get("after") or current(f"{head}.Pod") or {}).get("value") or {}
            service = (pod.get("metadata") or {}).get("name") or head[len(role):]
        side = {}
        for part in PARTS:
            if part in parts:
                side[part] = ((parts[part]["before"] or {}).get("value"), (parts[part]["after"] or {}).get("value"))
            else:
                now = (current(f"{head}.{part}") or {}).get("value")
                side[part] = (now, now)
        (files_a, files_b), (pod_a, pod_b) = side["ConfigFiles"], side["Pod"]
        files_a, files_b = files_a or {}, files_b or {}
        if pod_a is None:  # a service new to the role: its nodes get it as a new Pod
            continue
        # a part the engine recorded differs; equal here, only a hidden value in it changed
        # (both sides masked): the agent's digest, over the real values, changes
        secret = any(side[part][0] == side[part][1] for part in parts)
        restart = secret or restarts(pod_a, files_a, pod_b or {}, files_b)
        img_a, img_b = images(pod_a), images(pod_b)
        kind = "+".join(k for k, differs in (("config", files_a != files_b), ("secret", secret),
                                             ("image", img_a != img_b)) if differs)
        diff = file_diff(service, files_a, files_b)
        if pod_a != pod_b:
            diff += file_diff(service, {"pod.json": pod_a}, {"pod.json": pod_b})
        for node in sorted(role_nodes.get(role) or []):
            if node in removed:
                continue
            out.append({"node": node, "role": role, "service": service, "change": kind or "pod",
                        "restart": restart, "image_before": ", ".join(img_a), "image_after": ", ".join(img_b),
                        "diff": secrets.text(diff)})
    for path in plan.get("update") or []:
        # a service whose inputs come from resources the update changes (the virtual IP, a
        # node's address): what it gets is known only once they exist: said, not guessed
        m = MAY_CHANGE.match(path)
        if not m or m.group(1) in touched:
            continue
        head = m.group(1)
        if resources is not None:
            if head not in resources:
                continue
            role, service = resources[head]
        else:
            role = max((r for r in role_nodes if head.startswith(r)), key=len, default=None)
            if role is None:
                continue
            service = head[len(role):]
        for node in sorted(set(role_nodes.get(role) or []) - set(removed)):
            out.append({"node": node, "role": role, "service": service, "change": f"inputs from {m.group(2)}",
                        "restart": None, "image_before": "", "image_after": "", "diff": ""})
    for path, change in sorted(changes.items()):
        m = NEW_SERVER.match(path)
        if m and change.get("before") is None and m.group(1) in role_nodes:
            out.append({"node": (change.get("after") or {}).get("name") or path, "role": m.group(1),
                        "service": None, "change": "added", "restart": False, "image_before": "",
                        "image_after": "", "diff": ""})
    for node, role in sorted(removed.items()):
        out.append({"node": node, "role": role, "service": None, "change": "removed", "restart": False,
                    "image_before": "", "image_after": "", "diff": ""})
    return out


def lines(rows: list[dict]) -> list[str]:
    """`undercloud deploy --dry-run`'s text: a line per node and service, its diff below."""
    if not rows:
        return ["nothing would change"]
    out = []
    for r in rows:
        if r["service"] is None:
            out.append(f"{r['node']} ({r['role']}): would be {r['change']}")
            continue
        if r["restart"] is None:
            out.append(f"{r['node']} ({r['role']}): {r['service']}: may change with its {r['change']} "
                       f"(known once they change): restart unknown")
            continue
        what = [f"{r['change']} changes"]
        if r["image_before"] != r["image_after"]:
            what.append(f"image {r['image_before']} -> {r['image_after']}")
        what.append("restart" if r["restart"] else "no restart")
        out.append(f"{r['node']} ({r['role']}): {r['service']}: " + "; ".join(what))
        out += ["    " + line for line in r["diff"].splitlines()]
    return out
