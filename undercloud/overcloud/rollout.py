"""A rolling change of service images (`overcloud update`, `overcloud rollback`): which image
parameters change, and following the stack update node by node from its events. The
rollout itself is the engine's: the deploy steps' groups update `UpdateBatchSize` nodes at
a time (each healthy before the next) and a failure rolls the stack back, so a CLI that
dies strands nothing. Pure functions over the API's answers (`get` is the client's)."""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

from undercloud.errors import InvalidInput
from undercloud.orchestration.resources.base import HELD_BACK
from undercloud.overcloud import deployed
from undercloud.overcloud.deploy import deployment_reason

STEP_MEMBER = re.compile(r"^(\w+)Deployment_Step(\d)\.([^.]+)$")
POLL = 0.5


def choose(current: dict, services: tuple[str, ...] | list[str], roles: dict[str, set[str]] | None = None) -> list[str]:
    """The image parameters of `services` (all when none given); with `roles` (role -> the
    services it runs: `--role`), only those of services these roles run."""
    images = current["images"]
    known = sorted({s for i in images.values() for s in i.get("services", [])})
    unknown = [s for s in services if s not in known]
    if unknown:
        raise InvalidInput(f"no deployed service {', '.join(unknown)} (the deployed ones: {', '.join(known)})",
                           "--service")
    if roles is not None:
        running = set().union(*roles.values())
        missing = [s for s in services if s not in running]
        if missing:
            raise InvalidInput(f"role {', '.join(sorted(roles))} runs no {', '.join(missing)} (it runs: "
                               f"{', '.join(sorted(running)) or 'nothing'})", "--role")
        images = {p: i for p, i in images.items() if set(i.get("services", [])) & running}
    return sorted(p for p, i in images.items() if not services or set(i.get("services", [])) & set(services))


def with_records(current: dict, params: list[str], records: dict[str, dict], roles: list[str] = ()) -> dict:
    """The set `current` becomes with the image records (by name) for `params`: for every
    role (its image parameters, and no role's own image of them any more), or with `roles`
    for those roles only (their own image; none when it is the set's)."""
    new = copy.deepcopy(current)
    overrides = new.setdefault("overrides", {})
    for p in params:
        i = new["images"][p]
        r = records[i["name"]]
        image = dict(i, ref=r["properties"]["podman_image"], id=r["id"])
        if not roles:
            new["images"][p] = image
            for over in overrides.values():
                over.pop(p, None)
        for role in roles:
            if image["ref"] == i["ref"]:
                overrides.get(role, {}).pop(p, None)
            else:
                overrides.setdefault(role, {})[p] = image
    new["overrides"] = {role: over for role, over in overrides.items() if over}
    new["at"] = time.time()
    return new


def changed(old: dict, new: dict) -> list[str]:
    """What differs: image parameters, and "<role>:<param>" for a role's own image."""
    before, after = deployed.refs(old), deployed.refs(new)
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def events(get: Callable[..., Any], stack: str, after: int) -> Iterator[dict]:
    """Every event of the stack after id `after`, page by page. (No nested_depth: the
    service pages before it filters by depth, so a filtered page may be empty.)"""
    while True:
        rows = get(f"/v1/stacks/{stack}/events", params={"after": after, "limit": 1000})
        yield from rows
        if len(rows) < 1000:
            return
        after = rows[-1]["id"]


def last_event(get: Callable[..., Any], stack: str) -> int:
    return max((e["id"] for e in events(get, stack, 0)), default=0)


class Follow:
    """Follows a stack operation from its events: a line per node and deploy step as it
    starts, is healthy or fails (with the pod, container and health check that failed);
    keeps the first failure, and the nodes rolled back by themselves within max-fail."""

    def __init__(self, get: Callable[..., Any], stack: str, say: Callable[[str], None], after: int):
        self.get, self.stack, self._say, self.after = get, stack, say, after
        self.start = time.monotonic()
        self.failures: list[tuple[str, str, list[str]]] = []  # node, what failed, log tail
        self.tolerated: dict[str, tuple[str, list[str]]] = {}  # node -> what failed, log tail
        self.nodes: dict[str, str] = {}  # node -> its last state
        self.rolling_back = False

    @property
    def failure(self) -> tuple[str, str, list[str]] | None:
        """The first failure that was not one of max-fail."""
        return next((f for f in self.failures if f[0] not in self.tolerated), None)

    def say(self, msg: str) -> None:
        self._say(f"[{time.monotonic() - self.start:6.1f}s] {msg}")

    def poll(self) -> None:
        for e in events(self.get, self.stack, self.after):
            self.after = e["id"]
            self.event(e)

    def event(self, e: dict) -> None:
        status = e["resource_status"]
        if e["resource_name"] == self.stack:
            if status == "ROLLBACK_IN_PROGRESS":
                self.rolling_back = True
                self.say("rolling back what changed to the previous images and configuration")
            return
        m = STEP_MEMBER.match(e["resource_name"])
        if not m:
            return
        _role, step, node = m.groups()
        action, _, state = status.partition("_")
        again = " (rollback)" if self.rolling_back else ""
        reason = e.get("resource_status_reason") or ""
        if action == "ROLLBACK" and not self.rolling_back:  # max-fail: this node alone
            if state == "IN_PROGRESS":
                failed = next((f for f in reversed(self.failures) if f[0] == node), None)
                if failed:
                    self.tolerated[node] = failed[1:]
                self.say(f"{node}: step {step} rolling back to its previous images and configuration")
            elif state == "COMPLETE" and reason.startswith(HELD_BACK):
                self.nodes[node] = "held back"
                self.say(f"{node}: step {step} not run (the node failed an earlier step)")
            elif state == "COMPLETE":
                self.nodes[node] = "rolled back"
                self.say(f"{node}: step {step} rolled back: healthy on its previous images")
            elif state == "FAILED":
                self.tolerated.pop(node, None)
                self.failures.append((node, f"step {step}: {deployment_reason(reason)[0]}",
                                      deployment_reason(reason)[1]))
                self.say(f"{node}: step {step} rollback failed: {deployment_reason(reason)[0]}")
            return
        if state == "IN_PROGRESS":
            self.say(f"{node}: step {step}{again} running")
        elif state == "COMPLETE":
            self.nodes[node] = "rolled back" if self.rolling_back else "updated"
            self.say(f"{node}: step {step}{again} healthy")
        elif state == "FAILED":
            head, tail = deployment_reason(reason)
            if not self.rolling_back:
                self.failures.append((node, f"step {step}: {head}", tail))
            self.nodes[node] = "failed"
            self.say(f"{node}: step {step}{again} failed: {head}")

    def run(self) -> dict:
        """Until the operation ends; returns the stack."""
        while True:
            s = self.get(f"/v1/stacks/{self.stack}")
            self.poll()
            if not s["stack_status"].endswith("_IN_PROGRESS"):
                self.poll()
                return s
            time.sleep(POLL)
