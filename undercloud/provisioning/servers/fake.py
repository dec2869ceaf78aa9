"""A realiser with no machine behind it, for unit tests and scale benchmarks only.

Not discovered as a hypervisor type: tests and benchmarks hand it to ServersService
explicitly (`realisers={"container": FakeRealiser(env, "container")}`). Machines live in
memory; each is ACTIVE `delay` seconds after create, with an address from 10.254.0.0/16.
"""

from __future__ import annotations

import itertools
import threading
import time

from undercloud import server_types
from undercloud.host.labnet import LAB_NETWORK
from undercloud.provisioning.nodes import BootDiskDeploy
from undercloud.provisioning.servers.base import (
    ACTIVE,
    BUILD,
    DELETED,
    ERROR,
    SHUTOFF,
    Realiser,
    Spec,
    Status,
)


class FakeRealiser(Realiser, BootDiskDeploy):  # as bare metal, the nodes' deploy interface without a ramdisk
    disk_formats = ("oci", "qcow2", "raw")
    can_rebuild = True

    def __init__(self, env, hypervisor_type: str = server_types.CONTAINER, delay: float = 0.0, uses_nodes: bool = False,
                 fail: str | None = None):
        super().__init__(env)
        self.type, self.delay, self.fail = hypervisor_type, delay, fail
        self.uses_nodes = uses_nodes  # type: ignore[misc]  (per instance here)
        self.machines: dict[str, dict] = {}
        self.calls: list[tuple[str, str]] = []
        self._ips = itertools.count(2)
        self._lock = threading.Lock()

    def create(self, spec: Spec) -> None:
        self.calls.append(("create", spec.id))
        if self.fail == "create":
            raise RuntimeError("the fake hypervisor refused")
        with self._lock:
            if spec.id not in self.machines:
                n = next(self._ips)
                ip = next((x["fixed_ip"] for x in spec.networks if x.get("fixed_ip")), f"10.254.{n // 250}.{n % 250}")
                self.machines[spec.id] = {"at": time.monotonic(), "ip": ip, "on": True,
                                          "image": spec.image.get("id"), "first_boot": dict(spec.first_boot),
                                          "node": (spec.node or {}).get("uuid")}
        spec.state["instance_name"] = f"fake-{spec.name}"

    def status(self, spec: Spec) -> Status:
        m = self.machines.get(spec.id)
        if m is None:
            return Status(DELETED)
        if self.fail == "boot":
            return Status(ERROR, reason="the fake machine crashed at boot")
        if time.monotonic() - m["at"] < self.delay:
            return Status(BUILD, reason="the fake machine to boot")
        return Status(ACTIVE if m["on"] else SHUTOFF, addresses={LAB_NETWORK: [m["ip"]]})

    def power(self, spec: Spec, on: bool) -> None:
        self.machines[spec.id]["on"] = on

    def delete(self, spec: Spec) -> None:
        self.calls.append(("delete", spec.id))
        self.machines.pop(spec.id, None)

    def rebuild(self, spec: Spec) -> None:
        self.calls.append(("rebuild", spec.id))
        m = self.machines[spec.id]
        m.update(image=spec.image.get("id"), at=time.monotonic())

    def console(self, spec: Spec, lines: int = 100) -> str:
        return f"fake console of {spec.name}\n"
