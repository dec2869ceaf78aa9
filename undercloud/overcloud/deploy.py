"""What `undercloud deploy` derives and reads back: image parameters from the build, progress
per role / step / service from the stack's resources, and a failed step's node, service,
health check and log tail. Pure functions over the API's answers (`get` is the client's)."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from undercloud.errors import UndercloudError
from undercloud.overcloud.plan import STEP_NAMES, Library
from undercloud.server_types import BAREMETAL, CONTAINER, VM

NODE_IMAGE_TYPES = {CONTAINER: ("oci",), VM: ("qcow2",), BAREMETAL: ("qcow2",)}


def service_images(library: Library) -> list[str]:
    """The service images the enabled services declare (what to build)."""
    return sorted(set(library.images().values()))


def image_parameters(library: Library, records: dict[str, dict]) -> dict[str, Any]:
    """Each declared image parameter -> the built image's podman reference, and
    ServiceImageSources: reference -> its download path in the image store, from which a
    node whose podman lacks an image loads it when a Pod first needs it (VM and bare-metal
    nodes; container nodes on a hypervisor host: this host's podman has them, one check each)."""
    params: dict[str, Any] = {}
    sources = {}
    for param, name in sorted(library.images().items()):
        record = records.get(name) or {}
        ref = (record.get("properties") or {}).get("podman_image")
        if not ref:
            raise UndercloudError(f"image {name} has no podman_image property after the build", "deploy")
        params[param] = ref
        sources[ref] = f"/v1/images/{record['id']}/file"
    params["ServiceImageSources"] = sources
    return params


class Progress:
    """Progress per role / step / service, from the stack's top-level resources."""

    def __init__(self, plan, start: float, before: list[dict], say: Callable[[str], None]):
        # Resources as they were before this operation: an update reports only what it touches.
        self.plan, self.start, self._say = plan, start, say
        self.before = {r["resource_name"]: (r["resource_status"], r.get("updated_time")) for r in before}
        self.seen: dict[str, str] = {}

    def say(self, msg: str) -> None:
        self._say(f"[{time.monotonic() - self.start:6.1f}s] {msg}")

    def update(self, rows: list[dict]) -> None:
        by = {r["resource_name"]: r for r in rows}
        for role in self.plan.roles:
            for name, what in [(f"{role.name}Servers", "servers")] + [
                    (f"{role.name}Deployment_Step{n}", n) for n in STEP_NAMES]:
                r = by.get(name)
                if r is None:
                    continue
                status = r["resource_status"]
                if self.seen.get(name) == status or self.before.get(name) == (status, r.get("updated_time")):
                    continue
                self.seen[name] = status
                action, _, state = status.partition("_")
                if what == "servers":
                    if state == "IN_PROGRESS":
                        self.say(f"{role.name}: servers ({action.lower()})")
                    elif state == "COMPLETE":
                        self.say(f"{role.name}: servers ready")
                    continue
                services = ", ".join(self.plan.services_at(role, what)) or "no services"
                if state == "IN_PROGRESS":
                    self.say(f"step {what} ({STEP_NAMES[what]}) on {role.name}: {services}")
                elif state == "COMPLETE":
                    self.say(f"step {what} on {role.name}: healthy on every node")


def failure_details(get: Callable[..., Any], stack: str) -> tuple[str, list[str]]:
    """(one line naming step, node, service and health check; the service's log tail)."""
    s = get(f"/v1/stacks/{stack}")
    rows = get(f"/v1/stacks/{stack}/resources", params={"nested_depth": 2})
    for r in rows:
        m = re.match(r"^(\w+)Deployment_Step(\d)\.(.+)$", r.get("path") or "")
        if not m or not r["resource_status"].endswith("FAILED"):
            continue
        role, step, node = m.groups()
        try:
            reason = get(f"/v1/stacks/{stack}/resources/{r['path']}").get("resource_status_reason") or ""
        except UndercloudError:
            reason = ""
        head, tail = deployment_reason(reason)
        return f"step {step} failed on node {node} (role {role}): {head}", tail
    return f"stack {stack} {s['stack_status']}: {s['stack_status_reason']}", []


def deployment_reason(reason: str) -> tuple[str, list[str]]:
    """A failed deployment's reason: (what failed: pod, container, health check; the
    service's log tail)."""
    detail = re.search(r"non-zero status code: -?\d+ \((.*)\)$", reason, re.S)
    text = detail.group(1) if detail else reason
    head, _, tail = text.partition(" | last lines of its log: | ")
    return head, [x for x in tail.split(" | ") if x] if tail else []


ENDPOINT_WAIT = 90.0  # seconds for every API to answer through the VIP once its service is healthy


def _endpoint_answer(url: str, ca_file: str | None = None) -> str | None:
    """None when the API answers (any status below 500), else why not; an https one verified
    with `ca_file` (none: the system's trust store)."""
    from undercloud.config import client_context

    context = client_context(ca_file) if ca_file and url.startswith("https:") else None  # None: the system's
    try:
        with urllib.request.urlopen(url, timeout=5, context=context):
            return None
    except urllib.error.HTTPError as exc:
        return None if exc.code < 500 else f"HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        return str(getattr(exc, "reason", exc))


def wait_for_endpoints(endpoints: dict[str, str], timeout: float = ENDPOINT_WAIT,
                       answer: Callable[[str, str | None], str | None] = _endpoint_answer,
                       ca_file: str | None = None) -> dict[str, str]:
    """Wait until each endpoint answers through the virtual IP: haproxy takes a backend back
    only at its next check, a little after the service passed its own. Returns what still
    does not answer after `timeout`: service -> why."""
    deadline = time.monotonic() + timeout
    waiting = dict(endpoints)
    failing: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(waiting)))) as pool:
        while waiting:
            urls = list(waiting.values())
            failing = {svc: why for svc, why in zip(waiting, pool.map(answer, urls, [ca_file] * len(urls))) if why}
            waiting = {svc: waiting[svc] for svc in failing}
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(1.0)
    return failing
