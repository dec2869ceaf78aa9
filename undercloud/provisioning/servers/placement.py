"""Hypervisor hosts and placement: where a new server runs.

A container or VM server runs on a registered hypervisor host of its type that is up and has
room (`Placement.place`); each worker registers its own host for the types it offers
(`ensure_local_hosts`). A bare-metal server runs on a node the scheduler claims
(`claim_node`). Apart from the servers service so that the hosts' table and the capacity
arithmetic have one home; the service keeps the server records and asks here where they go.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from sqlalchemy import delete, func, select, update

from undercloud import server_types
from undercloud.config import host_name
from undercloud.errors import Conflict, InvalidInput, NotFound, UndercloudError
from undercloud.provisioning.servers.base import Env
from undercloud.store import Store
from undercloud.store.servers import HypervisorHost, Leftover, Server

# Nova's default allocation ratios: container and VM hosts may overcommit CPUs and memory.
CPU_RATIO, RAM_RATIO = 16.0, 1.5
# Nova's ComputeCapabilitiesFilter key for the host a server must run on (flavor property or
# scheduler hint): how a flavor, or one server, is pinned to a hypervisor host.
HOST_SPEC = "capabilities:hypervisor_hostname"

# The types a worker's own host may realise: their realisers neither use nodes nor are remote
# (tests/unit/test_server_types.py checks it).
LOCAL_TYPES = (server_types.CONTAINER, server_types.VM)


def local_types() -> tuple[str, ...]:
    """The hypervisor types this worker's host offers: UNDERCLOUD_HYPERVISOR_TYPES (comma
    separated, as Nova's compute_driver is configured per host), else container and vm."""
    raw = os.environ.get("UNDERCLOUD_HYPERVISOR_TYPES")
    if raw is None:
        return LOCAL_TYPES
    types = tuple(t.strip() for t in raw.split(",") if t.strip())
    bad = [t for t in types if t not in LOCAL_TYPES]
    if bad:
        raise InvalidInput(f"UNDERCLOUD_HYPERVISOR_TYPES: {bad[0]!r} is not a type a host realises "
                           f"({', '.join(LOCAL_TYPES)})", "UNDERCLOUD_HYPERVISOR_TYPES")
    return types


def host_capacity() -> tuple[int, int, int]:
    """(vcpus, memory MB, disk GB) this machine offers to container and VM servers."""
    cpus = os.cpu_count() or 1
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        mem = pages * size // (1 << 20)
    except (ValueError, OSError):
        mem = 4096
    disk = shutil.disk_usage("/").total // (1 << 30)
    return int(cpus * CPU_RATIO), int(mem * RAM_RATIO), int(disk)


class Placement:
    """The hypervisor hosts and where a new server goes. `why_unavailable(ht)` says why this
    host cannot realise `ht` servers now (None when it can): the servers service's realisers
    know, and only this host's are asked here (the other hosts' workers answer for theirs)."""

    def __init__(self, store: Store, env: Env, why_unavailable: Callable[[str], str | None]):
        self.store = store
        self.env = env
        self.why_unavailable = why_unavailable

    def ensure_local_hosts(self) -> None:
        """This host for the types it offers (each worker's host registers itself): container
        and VM servers, or those UNDERCLOUD_HYPERVISOR_TYPES lists (a hypervisor host without
        libvirt: `container`); a type no longer offered is dropped when no server holds it."""
        vcpus, mem, disk = host_capacity()
        name = host_name()
        offered = local_types()
        with self.store.session() as s:
            for ht in LOCAL_TYPES:
                row = s.get(HypervisorHost, (name, ht))
                if ht in offered and row is None:
                    s.add(HypervisorHost(name=name, hypervisor_type=ht, vcpus=vcpus, memory_mb=mem, disk_gb=disk))
                elif ht not in offered and row is not None and not s.scalar(
                        select(func.count()).select_from(Server).where(Server.host == name,
                                                                       Server.hypervisor_type == ht)):
                    s.delete(row)

    def hosts(self) -> list[dict]:
        """Each host with its capacity, what its servers use, its leftovers and whether a
        worker of it is up (the servers service adds the container engine's state)."""
        with self.store.session() as s:
            used = self.used(s)
            up = self.hosts_up()
            # machines of servers deleted while their host was down, still to be removed there
            left = dict(((host, t), n) for host, t, n in s.execute(
                select(Leftover.host, Leftover.hypervisor_type, func.count())
                .group_by(Leftover.host, Leftover.hypervisor_type)))
            out = []
            for h in s.scalars(select(HypervisorHost).order_by(HypervisorHost.hypervisor_type, HypervisorHost.name)):
                vcpus, ram, disk, n = used.get((h.name, h.hypervisor_type), (0, 0, 0, 0))
                out.append({"name": h.name, "hypervisor_type": h.hypervisor_type, "vcpus": h.vcpus,
                            "memory_mb": h.memory_mb, "disk_gb": h.disk_gb, "vcpus_used": vcpus,
                            "memory_mb_used": ram, "disk_gb_used": disk, "servers": n,
                            "leftovers": left.get((h.name, h.hypervisor_type), 0),
                            "state": "up" if h.name in up else "down"})
        return out

    def forget_host(self, name: str) -> dict:
        """Remove a hypervisor host that will not come back: down, and running no server
        (a worker of it registers it again when it starts)."""
        with self.store.session() as s:
            types = sorted(s.scalars(select(HypervisorHost.hypervisor_type).where(HypervisorHost.name == name)))
            if not types:
                raise NotFound(f"no hypervisor host {name[:80]!r} (`server hypervisors` lists them)", "host")
            if name in self.hosts_up():
                raise Conflict(f"host {name} has a live undercloud worker: stop it first", "host")
            n = s.scalar(select(func.count()).select_from(Server).where(Server.host == name))
            if n:
                raise Conflict(f"host {name} holds {n} server(s): delete them first (`server list`)", "host")
            s.execute(delete(HypervisorHost).where(HypervisorHost.name == name))
        if self.env.lab_networks is not None:  # off the lab networks it shared: no tunnel to it
            self.env.lab_networks.leave(name)
        if self.env.addresses is not None:
            self.env.addresses.release(f"host:{name}")
        return {"name": name, "hypervisor_types": types}

    def used(self, s, ht: str | None = None) -> dict[tuple[str, str], tuple[int, int, int, int]]:
        """(host, hypervisor type) -> (vCPUs, RAM MB, disk GB, servers) its servers use: one query."""
        query = (select(Server.host, Server.hypervisor_type, func.sum(Server.vcpus), func.sum(Server.ram),
                        func.sum(Server.disk), func.count())
                 .where(Server.host.is_not(None)).group_by(Server.host, Server.hypervisor_type))
        if ht is not None:
            query = query.where(Server.hypervisor_type == ht)
        return {(host, t): (int(c or 0), int(r or 0), int(d or 0), int(n)) for host, t, c, r, d, n in s.execute(query)}

    def hosts_up(self) -> set[str]:
        """The hosts a worker of heart-beats (this worker's own always)."""
        return self.env.hosts_up() | {host_name()}

    def other_hosts(self) -> set[str]:
        """The other registered hypervisor hosts (each worker registers its own). A server's
        host that is not registered at all is taken for this one."""
        with self.store.session() as s:
            return set(s.scalars(select(HypervisorHost.name).distinct())) - {host_name()}

    def place(self, s, flavor: dict, ht: str, hints: dict) -> str:
        """The host a new server runs on: of the registered hosts of its hypervisor type that
        are up, can realise it (asked here for this host; the others' workers answer when
        they make it) and have room, the one the flavor property or scheduler hint HOST_SPEC names,
        else this host, else the one with most free RAM (Nova's default weigher). This host
        first, unlike Nova's spreading: each host's servers share only that host's lab network,
        so a stack's servers stay together unless this host cannot take them."""
        pinned = {str(v) for v in (flavor["properties"].get(HOST_SPEC), hints.get(HOST_SPEC)) if v}
        # One placement of a type at a time, across workers: this write takes the hosts' rows
        # (row locks on PostgreSQL, the write lock on SQLite) before their use is read, and
        # holds them until the server's row is committed.
        s.execute(update(HypervisorHost).where(HypervisorHost.hypervisor_type == ht)
                  .values(vcpus=HypervisorHost.vcpus))
        query = select(HypervisorHost).where(HypervisorHost.hypervisor_type == ht).order_by(HypervisorHost.name)
        if pinned:
            query = query.where(HypervisorHost.name.in_(pinned))
        hosts = s.scalars(query).all() if len(pinned) < 2 else []
        if not hosts:
            if pinned:
                raise Conflict(f"no {ht} hypervisor host {' and '.join(sorted(pinned))!r} is registered "
                               f"({HOST_SPEC} of flavor {flavor['name']} or the scheduler hints)", "flavor")
            raise Conflict(f"no {ht} hypervisor host is registered here ({host_name()})", "flavor")
        why, fits = [], []
        used, up = self.used(s, ht), self.hosts_up()
        for h in hosts:
            vcpus, ram, disk, _n = used.get((h.name, ht), (0, 0, 0, 0))
            if h.name not in up:
                why.append(f"{h.name} has no live undercloud worker")
            elif h.name == host_name() and (unavailable := self.why_unavailable(ht)):
                why.append(f"{h.name} cannot realise {ht} servers: {unavailable}")
            elif vcpus + flavor["vcpus"] > h.vcpus:
                why.append(f"{h.name} has {h.vcpus - vcpus} free vCPUs < {flavor['vcpus']}")
            elif ram + flavor["ram"] > h.memory_mb:
                why.append(f"{h.name} has {h.memory_mb - ram} MB free < {flavor['ram']} MB")
            elif disk + flavor["disk"] > h.disk_gb:
                why.append(f"{h.name} has {h.disk_gb - disk} GB free < {flavor['disk']} GB")
            else:
                fits.append((h.name != host_name(), -(h.memory_mb - ram), h.name))
        if fits:
            return min(fits)[2]
        if len(why) > 5:
            why[5:] = [f"{len(why) - 5} more hosts cannot"]
        raise Conflict(f"no {ht} host can take flavor {flavor['name']}: " + "; ".join(why), "flavor")

    def claim_node(self, id: str, fl: dict, img: dict, hints: dict) -> dict:
        """A bare-metal node for server `id`, claimed through the scheduler: the flavor's
        capabilities, resource class and sizes (a size of `resources:<KEY>=0` is not asked)."""
        from undercloud.provisioning.scheduler import Request

        props = fl["properties"]
        caps = {k.split(":", 1)[1]: v for k, v in props.items()
                if k.startswith("capabilities:") and k != "capabilities:profile"}
        caps.update({k.split(":", 1)[1]: str(v) for k, v in hints.items() if k.startswith("capabilities:")})
        rc = next((k.split(":", 1)[1][len("CUSTOM_"):].lower() for k, v in props.items()
                   if k.startswith("resources:CUSTOM_") and str(v) != "0"), None)

        def size(key: str, value: int) -> int:
            return 0 if str(props.get(f"resources:{key}", "")) == "0" else value

        req = Request(instance_uuid=id, resource_class=rc, profile=props.get("capabilities:profile"),
                      capabilities=caps, cpus=size("VCPU", fl["vcpus"]), memory_mb=size("MEMORY_MB", fl["ram"]),
                      local_gb=size("DISK_GB", fl["disk"]), hypervisor_type=server_types.BAREMETAL,
                      instance_info={"image_source": img["id"], "image_checksum": img["checksum"],
                                     "flavor": fl["name"]})
        if self.env.scheduler is None:
            raise UndercloudError("no scheduler in this undercloud", "flavor")
        try:
            return self.env.scheduler.claim(req)
        except Conflict as exc:
            raise Conflict(f"no valid node for flavor {fl['name']!r}: {exc.message}", "flavor") from None
