"""Flavors (Nova's): sizes plus properties; `hypervisor_type` decides how a server is realised.

Properties follow Nova's extra specs: `capabilities:profile=control` (bare-metal profile
matching, as TripleO tags nodes), `capabilities:KEY=VALUE`, `resources:CUSTOM_<CLASS>=1`
(the node resource class), `resources:VCPU|MEMORY_MB|DISK_GB=0` (do not schedule bare metal
on sizes, as TripleO's flavors do), and `hypervisor_type` (baremetal, vm, container).
"""

from __future__ import annotations

from sqlalchemy import select

from undercloud.errors import Conflict, InvalidInput, NotFound
from undercloud.server_types import BAREMETAL, CONTAINER, HYPERVISOR_TYPES, VM
from undercloud.store import Store
from undercloud.store.servers import Flavor

_BM = {"hypervisor_type": BAREMETAL, "resources:CUSTOM_BAREMETAL": "1",
       "resources:VCPU": "0", "resources:MEMORY_MB": "0", "resources:DISK_GB": "0"}
# Created at the first start: bare metal as TripleO does, plus one per other hypervisor type.
DEFAULTS = {
    "baremetal": (1, 4096, 40, dict(_BM)),
    "control": (1, 4096, 40, {**_BM, "capabilities:profile": "control"}),
    "compute": (1, 4096, 40, {**_BM, "capabilities:profile": "compute"}),
    "container": (1, 512, 10, {"hypervisor_type": CONTAINER}),
    "vm": (1, 1024, 10, {"hypervisor_type": VM}),
    # An overcloud controller as a VM (`undercloud deploy --hypervisor vm`): room for MariaDB,
    # RabbitMQ, keystone and placement side by side.
    "vm-control": (2, 4096, 20, {"hypervisor_type": VM}),
}


def view(f: Flavor) -> dict:
    props = dict(f.properties or {})
    return {"name": f.name, "vcpus": f.vcpus, "ram": f.ram, "disk": f.disk,
            "hypervisor_type": hypervisor_type(props), "properties": props}


def hypervisor_type(props: dict) -> str:
    return props.get("hypervisor_type") or BAREMETAL


def validate(name: str, vcpus: int, ram: int, disk: int, properties: dict) -> None:
    if not name or len(name) > 255 or not name.strip():
        raise InvalidInput("a flavor needs a name (1-255 characters)", "name")
    for key, value, least in (("vcpus", vcpus, 1), ("ram", ram, 1), ("disk", disk, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise InvalidInput(f"must be an integer >= {least}, got {value!r}", f"--{key}")
    if not isinstance(properties, dict):
        raise InvalidInput("properties must be a mapping", "--property")
    for k, v in properties.items():
        if not isinstance(k, str) or not k or not isinstance(v, str):
            raise InvalidInput(f"{k!r}: keys and values must be strings", "--property")
    ht = properties.get("hypervisor_type")
    if ht is not None and ht not in HYPERVISOR_TYPES:
        raise InvalidInput(f"unknown hypervisor_type {ht!r}; one of {', '.join(HYPERVISOR_TYPES)}",
                           "--property hypervisor_type")


class Flavors:
    def __init__(self, store: Store):
        self.store = store

    def ensure_defaults(self) -> list[str]:
        """Create the default flavors that do not exist yet (first start); returns their names."""
        made = []
        with self.store.session() as s:
            if s.scalars(select(Flavor.name).limit(1)).first() is not None:
                return made  # flavors exist: the operator's choice stands, even deletions
            for name, (vcpus, ram, disk, props) in DEFAULTS.items():
                s.add(Flavor(name=name, vcpus=vcpus, ram=ram, disk=disk, properties=props))
                made.append(name)
        return made

    def create(self, name: str, vcpus: int, ram: int, disk: int, properties: dict | None = None) -> dict:
        properties = dict(properties or {})
        validate(name, vcpus, ram, disk, properties)
        with self.store.session() as s:
            if s.get(Flavor, name) is not None:
                raise Conflict(f"a flavor named {name!r} exists", "name")
            row = Flavor(name=name, vcpus=vcpus, ram=ram, disk=disk, properties=properties)
            s.add(row)
        return view(row)

    def list(self) -> list[dict]:
        with self.store.session() as s:
            return [view(f) for f in s.scalars(select(Flavor).order_by(Flavor.name))]

    def get(self, name: str) -> dict:
        with self.store.session() as s:
            row = s.get(Flavor, name)
            if row is None:
                known = ", ".join(s.scalars(select(Flavor.name).order_by(Flavor.name))) or "none"
                raise NotFound(f"no flavor {name!r} (flavors: {known})", "flavor")
            return view(row)

    def delete(self, name: str) -> dict:
        with self.store.session() as s:
            row = s.get(Flavor, name)
            if row is None:
                raise NotFound(f"no flavor {name!r}", "flavor")
            out = view(row)
            s.delete(row)  # servers keep the copy they were made with
        return out
