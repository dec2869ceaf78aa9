"""The servers service: flavors, placement, image choice, first-boot data, and the realisers.

    servers = ServersService(store, env)           # env: realiser Env (home, api port, ...)
    servers.create(id=..., name=..., flavor="container", image="overcloud-full",
                   first_boot={server_id, token, url, ...})  # BUILD; the realiser starts it
    servers.refresh(id)                            # live status from the realiser (ACTIVE...)
    servers.delete(id); servers.gone(id)           # start removing; True once removed

Every check a request can fail (flavor, image for the flavor's hypervisor type, networks,
capacity, a free node) runs before anything is written, so a refused request leaves
nothing behind. The first-boot data (with the server's token) lives in
`$UNDERCLOUD_HOME/servers/<id>/first-boot/` (mode 700), which realisers hand to the
machine read-only (container mount, config-drive ISO, ...).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select, update

from undercloud import server_types
from undercloud.agent.files import remove_temps, write_atomic
from undercloud.config import host_name
from undercloud.errors import (
    Conflict,
    InvalidInput,
    NeedsFirstBoot,
    NotFound,
    ServiceUnavailable,
    UndercloudError,
)
from undercloud.host.labnet import LAB_NETWORK
from undercloud.provisioning.servers import base
from undercloud.provisioning.servers.base import ACTIVE, BUILD, DELETED, ERROR, REBUILD, Env, Realiser, Spec
from undercloud.provisioning.servers.flavors import Flavors, hypervisor_type
from undercloud.store import Store
from undercloud.store.addresses import Address
from undercloud.store.servers import HypervisorHost, Leftover, Server

log = logging.getLogger("undercloud.servers")

GONE = "the machine is gone (removed outside the undercloud?)"  # the fault when a machine vanished
NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,61}[A-Za-z0-9])?$")  # a hostname label (dots allowed)
# Nova's default allocation ratios: container and VM hosts may overcommit CPUs and memory.
CPU_RATIO, RAM_RATIO = 16.0, 1.5
AVAILABLE_TTL = 60.0
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


def view(row: Server) -> dict:
    return {
        "id": row.id, "name": row.name, "status": row.status, "task": row.task, "fault": row.fault,
        "hypervisor_type": row.hypervisor_type, "flavor": row.flavor.get("name"),
        "flavor_detail": row.flavor, "image": row.image_name, "image_id": row.image_id,
        "host": row.host, "node": row.node_id, "instance_name": (row.state or {}).get("instance_name"), "addresses": row.addresses or {},
        "networks": row.networks or [], "volumes": row.volumes or [], "notes": row.notes or [],
        "metadata": row.metadata_ or {}, "owner": row.owner,
        "created_at": row.created_at, "updated_at": row.updated_at,
    }


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


class ServersService:
    def __init__(self, store: Store, env: Env, realisers: dict[str, Realiser] | None = None):
        self.store = store
        self.env = env
        self.flavors = Flavors(store)
        self.root = Path(env.home.path) / "servers"
        self._realisers: dict[str, Realiser] = dict(realisers or {})
        self._lock = threading.Lock()  # guards _realisers and _making
        self._available: dict[str, float] = {}  # hypervisor type -> when it was last found usable
        self._making: set[str] = set()  # servers whose machine this worker is making now

    # ---- realisers -----------------------------------------------------------------
    def realiser(self, ht: str) -> Realiser:
        """The realiser of hypervisor type `ht`: `container`, or qualified: `openstack:<cloud>`."""
        with self._lock:
            r = self._realisers.get(ht)
            if r is None:
                kind, _, target = ht.partition(":")
                cls = base.realisers().get(kind)
                if cls is None:
                    raise UndercloudError(f"servers of hypervisor_type {ht!r} cannot be realised by this "
                                          f"undercloud (realisers: {', '.join(sorted(base.realisers())) or 'none'})",
                                          "flavor")
                if bool(target) != cls.remote:  # openstack:<cloud>; container alone
                    raise UndercloudError(f"hypervisor_type {ht!r}: " + (f"{kind} servers name their cloud: "
                                          f"{kind}:<cloud>" if cls.remote else f"{kind} takes nothing after it"),
                                          "flavor")
                r = self._realisers[ht] = cls(self.env, target) if target else cls(self.env)
        return r

    def _flavor(self, ref: str) -> tuple[dict, str, Realiser]:
        """(flavor, hypervisor type, realiser) of a flavor reference: a flavor of this
        undercloud, or `<type>:<target>/<flavor>`, a flavor of a remote realiser's cloud
        (`openstack:<cloud>/m1.small`)."""
        kind, sep, rest = ref.partition(":")
        cls = base.realisers().get(kind) if sep and "/" in rest else None
        if cls is None or not cls.remote:
            fl = self.flavors.get(ref)
            ht = hypervisor_type(fl["properties"])
            return fl, ht, self.realiser(ht)
        ht, _, name = ref.partition("/")
        realiser = self.realiser(ht)
        self._check_available(ht, realiser)
        try:
            return realiser.flavor(name), ht, realiser
        except base.RealiserError as exc:
            raise NotFound(str(exc), "flavor") from None

    def _check_available(self, ht: str, realiser: Realiser) -> None:
        why = self._unavailable(ht, realiser)
        if why:
            raise UndercloudError(f"cannot realise {ht} servers here: {why}", "flavor")

    def _unavailable(self, ht: str, realiser: Realiser) -> str | None:
        """Why `realiser` cannot make servers here, or None: `realiser.available()` (e.g.
        `podman info`, 0.3 s), asked at most once a minute once it said yes."""
        if time.monotonic() - self._available.get(ht, -AVAILABLE_TTL) < AVAILABLE_TTL:
            return None
        why = realiser.available()
        if why:
            self._available.pop(ht, None)
            return why
        self._available[ht] = time.monotonic()
        return None

    def startup(self) -> None:
        """First start: default flavors and this machine as a hypervisor host; then let the
        realisers of existing servers re-establish what they need (listeners...)."""
        made = self.flavors.ensure_defaults()
        if made:
            log.info("created the default flavors: %s", ", ".join(made))
        self.ensure_local_hosts()
        self.remove_leftovers()
        # what a killed run left of its temporary files (config drives and deploy requests
        # hold tokens): in the servers', bare metal's and network boot's directories
        gone = [p for d in (self.root, self.root.parent / "baremetal", self.root.parent / "netboot")
                if d.is_dir() for p in remove_temps(d)]
        if gone:
            log.info("servers: removed %d temporary file(s) left by an earlier run", len(gone))
        with self.store.session() as s:
            types = set(s.scalars(select(Server.hypervisor_type).distinct()))
        for ht in types:
            try:
                r = self.realiser(ht)
                if hasattr(r, "startup"):
                    r.startup()
            except Exception as exc:  # noqa: BLE001 - one type's trouble must not stop the service
                log.warning("servers: %s realiser start-up: %s", ht, exc)

    def network(self, ht: str) -> dict:
        """The network `ht` servers are on (made when missing): subnet, gateway and the
        addresses kept for virtual IPs (`base.virtual_ips`), which `undercloud deploy` uses."""
        realiser = self.realiser(ht)
        self._check_available(ht, realiser)
        try:
            return {"hypervisor_type": ht, **realiser.network_info()}
        except base.RealiserError as exc:
            raise UndercloudError(str(exc), f"hypervisor {ht}") from None

    # ---- hypervisor hosts ----------------------------------------------------------
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
        with self.store.session() as s:
            used = self._used(s)
            up = self._hosts_up()
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
        # this host's container engine, as its watch last found it (other hosts' watch their own)
        engine = self.engine_health(summary=True)
        for row in out:
            row["engine"] = engine if row["hypervisor_type"] == server_types.CONTAINER and row["name"] == host_name() else ""
        return out

    def forget_host(self, name: str) -> dict:
        """Remove a hypervisor host that will not come back: down, and running no server
        (a worker of it registers it again when it starts)."""
        with self.store.session() as s:
            types = sorted(s.scalars(select(HypervisorHost.hypervisor_type).where(HypervisorHost.name == name)))
            if not types:
                raise NotFound(f"no hypervisor host {name[:80]!r} (`server hypervisors` lists them)", "host")
            if name in self._hosts_up():
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

    def _used(self, s, ht: str | None = None) -> dict[tuple[str, str], tuple[int, int, int, int]]:
        """(host, hypervisor type) -> (vCPUs, RAM MB, disk GB, servers) its servers use: one query."""
        query = (select(Server.host, Server.hypervisor_type, func.sum(Server.vcpus), func.sum(Server.ram),
                        func.sum(Server.disk), func.count())
                 .where(Server.host.is_not(None)).group_by(Server.host, Server.hypervisor_type))
        if ht is not None:
            query = query.where(Server.hypervisor_type == ht)
        return {(host, t): (int(c or 0), int(r or 0), int(d or 0), int(n)) for host, t, c, r, d, n in s.execute(query)}

    def _hosts_up(self) -> set[str]:
        """The hosts a worker of heart-beats (this worker's own always)."""
        return self.env.hosts_up() | {host_name()}

    def _place(self, s, flavor: dict, ht: str, hints: dict) -> str:
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
        used, up = self._used(s, ht), self._hosts_up()
        for h in hosts:
            vcpus, ram, disk, _n = used.get((h.name, ht), (0, 0, 0, 0))
            if h.name not in up:
                why.append(f"{h.name} has no live undercloud worker")
            elif h.name == host_name() and (unavailable := self._unavailable(ht, self.realiser(ht))):
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

    # ---- images --------------------------------------------------------------------
    def choose_image(self, ref: str, ht: str, flavor_name: str, formats: tuple[str, ...]) -> dict:
        """The image named (or with id) `ref` for hypervisor type `ht`; the newest if several."""
        images = self.env.images
        if images is None:
            raise UndercloudError("no image store in this undercloud", "image")
        try:
            one = images.get(ref)  # by id: must suit the flavor too
            candidates = [one] if one["id"] == ref else images.list(name=ref)
        except (NotFound, Conflict):
            candidates = images.list(name=ref)
        if not candidates:
            raise NotFound(f"no image named {ref!r} (see `undercloud image list`)", "image")
        # "missing": the content is on another worker (records are shared, content per home)
        fits = [i for i in candidates if i.get("hypervisor_type") == ht
                and (not formats or i["disk_format"] in formats) and i.get("status") in ("active", "missing")]
        if not fits:
            have = ", ".join(sorted({f"{i.get('hypervisor_type') or 'no hypervisor_type'} ({i['disk_format']})"
                                     for i in candidates}))
            kind = "oci" if ht == server_types.CONTAINER else "qcow2"
            raise Conflict(f"no {ht} image named {ref!r}: flavor {flavor_name!r} asks for hypervisor_type {ht}, "
                           f"{ref!r} exists for: {have} (build one: undercloud image build {ref} --type {kind})",
                           "image")
        for i in sorted(fits, key=lambda i: i.get("created_at") or "", reverse=True):
            if i["status"] == "active" or images.ensure_blob(i).exists():  # fetched from the worker that has it
                return i
        raise Conflict(f"image {ref!r}: its content is on no live worker (`undercloud image list` says missing)",
                       "image")

    # ---- requests ------------------------------------------------------------------
    @staticmethod
    def check_networks(networks: list | None) -> list[dict]:
        out = []
        for i, n in enumerate(networks or []):
            where = f"networks[{i}]"
            if not isinstance(n, dict):
                raise InvalidInput("each network must be a mapping (network, fixed_ip)", where)
            net = n.get("network") or LAB_NETWORK
            if net not in (LAB_NETWORK, "lab"):
                raise InvalidInput(f"unknown network {net!r}: servers join the lab network {LAB_NETWORK!r}",
                                   f"{where}.network")
            ip = base.check_fixed_ip(n.get("fixed_ip"), f"{where}.fixed_ip")
            out.append({"network": LAB_NETWORK, "fixed_ip": ip})
        if len(out) > 1:
            raise InvalidInput("one network per server (the lab network)", "networks")
        return out or [{"network": LAB_NETWORK, "fixed_ip": None}]

    @staticmethod
    def check_volumes(volumes: list | None) -> list[dict]:
        out = []
        for i, path in enumerate(volumes or []):
            if not isinstance(path, str) or not path.startswith("/") or ".." in path.split("/"):
                raise InvalidInput(f"not an absolute path: {path!r}", f"persistent_volumes[{i}]")
            slug = re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "root"
            out.append({"name": slug, "path": path})
        return out

    def create(self, *, id: str, name: str, flavor: str, image: str, first_boot: dict,
               networks: list | None = None, metadata: dict | None = None, volumes: list | None = None,
               owner: str | None = None, scheduler_hints: dict | None = None) -> dict:
        """Start a server; repeating the call for the same id resumes it (see `resume`)."""
        if self._row(id) is not None:
            return self.resume(id, first_boot)
        if not name or not NAME.match(name):
            raise InvalidInput(f"{name!r} is not a valid host name (letters, digits, '-', '.'; at most 63)",
                               "name")
        fl, ht, realiser = self._flavor(flavor)
        if realiser.uses_nodes or realiser.remote:  # else asked per host at placement
            self._check_available(ht, realiser)
        img = self.choose_image(image, realiser.image_hypervisor_type or ht, fl["name"], realiser.disk_formats)
        if realiser.remote:
            try:
                nets = realiser.check_networks(networks)
            except base.RealiserError as exc:
                raise InvalidInput(str(exc), "networks") from None
        else:
            nets = self.check_networks(networks)
        vols = self.check_volumes(volumes)
        node = None
        if realiser.uses_nodes:
            node = self._claim(id, fl, img, scheduler_hints or {})
        try:
            with self.store.session() as s:
                host = (None if realiser.uses_nodes or realiser.remote
                        else self._place(s, fl, ht, scheduler_hints or {}))
                row = Server(id=id, name=name, hypervisor_type=ht, flavor=fl, vcpus=fl["vcpus"], ram=fl["ram"],
                             disk=fl["disk"], image_id=img["id"],
                             image_name=img["name"], host=host, node_id=node["uuid"] if node else None,
                             status=BUILD, task="spawning", networks=nets, addresses={}, volumes=vols,
                             notes=[], metadata_=dict(metadata or {}), owner=owner, state={})
                s.add(row)
        except BaseException:
            if node is not None:
                self.env.scheduler.release(id)
            raise
        if self._elsewhere(row):  # placed on another host: its worker makes the machine
            try:
                return self.resume(id, first_boot)
            except UndercloudError as exc:
                self._save(id, status=ERROR, task=None, fault=f"spawning: {exc.message}")
                raise UndercloudError(f"server {name}: spawning on host {row.host} failed: {exc.message}",
                                      "server") from None
        spec = self.spec(row, first_boot=first_boot)

        def spawn(sp: Spec) -> None:
            self._write_first_boot(sp, realiser)
            realiser.create(sp)

        self._make(row.id, spawn, spec)
        return self.get(id)

    def resume(self, server_id: str, first_boot: dict | None = None, background: bool = False) -> dict:
        """Continue a create interrupted by a crash: the realiser finds what it made already.
        Uses the first-boot data on disk (same token); `first_boot` only if that was lost.
        A server of another host is resumed by a worker of its host (the `spawn` action),
        which makes the machine in the `background`: the caller waits for ACTIVE as usual."""
        with self.store.session() as s:
            row = self._find(s, server_id)
        if row.status != BUILD:
            return view(row)
        if self._elsewhere(row):
            return self._on_its_host(row, "POST", f"/v1/servers/{row.id}/action",
                                     {"action": "spawn", "first_boot": first_boot})
        realiser = self.realiser(row.hypervisor_type)
        spec = self.spec(row)
        if not spec.first_boot:
            if not first_boot:
                raise NeedsFirstBoot(f"server {row.name}: its first-boot data was lost before it was written",
                                     "server")
            spec.first_boot = dict(first_boot)
            self._write_first_boot(spec, realiser)
        if not background:
            self._make(row.id, realiser.create, spec)
            return self.get(row.id)

        def spawn() -> None:
            try:
                self._make(row.id, realiser.create, spec)
            except UndercloudError as exc:  # stored as the server's fault: the waiting caller sees it
                log.warning("%s", exc)

        threading.Thread(target=spawn, name=f"spawn-{row.name}", daemon=True).start()
        return view(row)

    def _make(self, server_id: str, fn, spec: Spec) -> None:
        """Make the server's machine (`fn(spec)`) unless this worker is making it already (a
        spawn or resume asked again meanwhile: the caller waits for ACTIVE as usual)."""
        with self._lock:
            if server_id in self._making:
                return
            self._making.add(server_id)
        try:
            self._call(server_id, fn, spec, "spawning")
        finally:
            with self._lock:
                self._making.discard(server_id)

    def _claim(self, id: str, fl: dict, img: dict, hints: dict) -> dict:
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

    def _write_first_boot(self, spec: Spec, realiser: Realiser) -> None:
        d = self.first_boot_dir(spec.id)
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d.parent, 0o700)
        # where its agent reaches the undercloud (the network made if missing): a failure is its fault
        spec.first_boot["url"] = self._call(spec.id, realiser.agent_url, spec, "spawning")
        spec.first_boot["ca"] = self.env.ca()  # what the agent verifies that URL with
        data = dict(spec.first_boot, hostname=spec.name, server_id=spec.id, networks=spec.networks)
        write_atomic(d / "config.json", json.dumps(data, indent=2, sort_keys=True))
        # user data also as a file of its own (NoCloud's name), executable when it is a script
        ud = data.get("user_data")
        path = d / "user-data"
        if isinstance(ud, str) and ud:
            write_atomic(path, ud, 0o700 if ud.startswith("#!") else 0o600)
        else:
            path.unlink(missing_ok=True)
        spec.first_boot = data

    def first_boot_dir(self, server_id: str) -> Path:
        return self.root / server_id / "first-boot"

    def read_first_boot(self, server_id: str) -> dict:
        try:
            return json.loads((self.first_boot_dir(server_id) / "config.json").read_text())
        except (OSError, ValueError):
            return {}

    def spec(self, row: Server, first_boot: dict | None = None, image: dict | None = None) -> Spec:
        img = image
        if img is None:
            try:
                img = self.env.images.get(row.image_id) if self.env.images is not None else None
            except NotFound:
                img = None
        img = img or {"id": row.image_id, "name": row.image_name, "disk_format": None, "checksum": None,
                      "properties": {}}
        path = None
        if self.env.images is not None and img.get("checksum"):
            path = self.env.images.ensure_blob(img) if img.get("id") and img.get("size") is not None \
                else self.env.images.blob_path(img["checksum"])
        node = None
        if row.node_id and self.env.nodes is not None:
            try:
                node = self.env.nodes.get(row.node_id)
            except NotFound:
                node = None
        return Spec(id=row.id, name=row.name, hypervisor_type=row.hypervisor_type, flavor=row.flavor,
                    image=img, image_path=path,
                    first_boot=first_boot if first_boot is not None else self.read_first_boot(row.id),
                    networks=list(row.networks or []), volumes=list(row.volumes or []),
                    host=self._host(row), node=node, state=dict(row.state or {}))

    def _host(self, row: Server) -> dict | None:
        if not row.host:
            return None
        with self.store.session() as s:
            h = s.get(HypervisorHost, (row.host, row.hypervisor_type))
            return None if h is None else {"name": h.name, "hypervisor_type": h.hypervisor_type}

    def _call(self, server_id: str, fn, spec: Spec, task: str):
        """Run a realiser call, then persist its state; a failure becomes the server's fault."""
        try:
            result = fn(spec)
        except Exception as exc:  # noqa: BLE001 - any failure is the server's fault, in one line
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            if not isinstance(exc, (UndercloudError, base.RealiserError)) or not msg:
                msg = f"{type(exc).__name__}: {msg}"  # a bug, not a user error: say what kind
            self._save(server_id, spec, status=ERROR, task=None, fault=f"{task}: {msg}")
            raise UndercloudError(f"server {spec.name}: {task} failed: {msg}", "server") from None
        self._save(server_id, spec)
        return result

    def _save(self, server_id: str, spec: Spec | None = None, **fields) -> None:
        with self.store.session() as s:
            row = s.get(Server, server_id)
            if row is None:
                return
            if spec is not None:
                row.state = dict(spec.state)
            for k, v in fields.items():
                setattr(row, k, v)

    # ---- queries -------------------------------------------------------------------
    def _row(self, server_id: str) -> dict | None:
        with self.store.session() as s:
            row = s.get(Server, server_id)
            return None if row is None else view(row)

    def _find(self, s, ref: str) -> Server:
        row = s.get(Server, ref)
        if row is not None:
            return row
        rows = s.scalars(select(Server).where(Server.name == ref)).all()
        if len(rows) == 1:
            return rows[0]
        if rows:
            raise Conflict(f"{len(rows)} servers are named {ref!r}: use the id", "server")
        raise NotFound(f"no server named or with id {ref!r}", "server")

    def get(self, ref: str) -> dict:
        with self.store.session() as s:
            return view(self._find(s, ref))

    def list(self) -> list[dict]:
        with self.store.session() as s:
            return [view(r) for r in s.scalars(select(Server).order_by(Server.name, Server.created_at))]

    def exists(self, server_id: str) -> bool:
        return self._row(server_id) is not None

    def set_metadata(self, server_id: str, metadata: dict, name: str | None = None) -> None:
        """Metadata and name change in place (a rename does not touch the running machine)."""
        if name is not None and not NAME.match(name):
            raise InvalidInput(f"{name!r} is not a valid host name", "name")
        self._save(server_id, metadata_=dict(metadata or {}), **({"name": name} if name else {}))

    def count(self) -> int:
        with self.store.session() as s:
            return s.scalar(select(func.count()).select_from(Server)) or 0

    # ---- life cycle ----------------------------------------------------------------
    def sync_status(self) -> dict:
        """One status pass over the settled servers (ACTIVE or SHUTOFF, no task under way), as
        Nova syncs power states: a machine that died or was stopped outside shows in `server
        list` without anyone asking for it by name. One realiser status call per server."""
        t0 = time.perf_counter()
        others = self._other_hosts()
        with self.store.session() as s:
            rows = s.execute(select(Server.id, Server.status)
                             .where(Server.status.in_((ACTIVE, "SHUTOFF")), Server.task.is_(None))
                             # containers and VMs of another host: its worker sees them, this one cannot
                             .where(Server.host.is_(None) | Server.host.not_in(others)
                                    | Server.hypervisor_type.not_in(LOCAL_TYPES))).all()
        changed = 0
        for row in rows:
            try:
                changed += self.refresh(row.id)["status"] != row.status
            except NotFound:  # deleted meanwhile
                continue
        removed = self.remove_leftovers()
        return {"servers": len(rows), "changed": changed, "leftovers_removed": len(removed),
                "seconds": time.perf_counter() - t0}

    def sync_networks(self) -> None:
        """The tunnels of this host's container lab network to the other hosts on it (a host
        that joined or left): nothing before this worker made the network."""
        with self._lock:
            r = self._realisers.get(server_types.CONTAINER)
        if r is not None:
            r.sync_network()

    def watch_engines(self) -> None:
        """A look at the container engine this host's container nodes drive (restarted when
        it has gone bad); nothing before this worker runs container servers."""
        with self._lock:
            r = self._realisers.get(server_types.CONTAINER)
        if r is not None:
            r.watch_engine()

    def engine_health(self, summary: bool = False):
        """What the last looks found (state ok|restarted|failing, restarts, reason; with
        `summary` one line), or None when nothing is watched."""
        with self._lock:
            r = self._realisers.get(server_types.CONTAINER)
        watch = getattr(r, "engine_watch", None)
        if watch is None:
            return "" if summary else None
        return watch.summary() if summary else dict(watch.status)

    # ---- servers of another host ----------------------------------------------------
    def _other_hosts(self) -> set[str]:
        """The other registered hypervisor hosts (each worker registers its own). A server's
        host that is not registered at all is taken for this one."""
        with self.store.session() as s:
            return set(s.scalars(select(HypervisorHost.name).distinct())) - {host_name()}

    def _elsewhere(self, row: Server) -> str | None:
        """The host of a container or VM server another host runs (None: this one, or a
        server of no host: bare metal, another cloud's)."""
        if row.host in (None, host_name()):  # the usual case, asked without a query
            return None
        return row.host if row.host in self._other_hosts() else None

    def _worker_of(self, row: Server) -> str | None:
        workers = self.env.workers_on(row.host) if self.env.forward is not None else []
        return workers[0] if workers else None

    def _on_its_host(self, row: Server, method: str, path: str, body: Any = None, worker: str | None = None) -> Any:
        """Run a request about `row` on a live worker of its host (only that host can reach
        the machine; `worker` when already found); with none alive, the operation waits for
        the host: one line."""
        worker = worker or self._worker_of(row)
        if worker is None:
            raise ServiceUnavailable(f"server {row.name} runs on host {row.host}, where no undercloud worker is "
                                     "alive; its operations wait for that host", "server")
        return self.env.forward(worker, method, path, body)

    def refresh(self, ref: str) -> dict:
        """Ask the realiser how the server is; store status, addresses and fault."""
        with self.store.session() as s:
            row = self._find(s, ref)
        if self._elsewhere(row):  # its host's worker asks; without one, or no answer, as last known
            worker = self._worker_of(row)
            if worker is None:
                return view(row)
            try:
                return self._on_its_host(row, "GET", f"/v1/servers/{row.id}", worker=worker)
            except ServiceUnavailable as exc:  # a busy host (an emulated VM loading an image): ask again later
                log.info("server %s: %s; shown as last known", row.name, exc.message)
                return view(row)
        if row.task == "deleting":
            return view(row)
        seen = (row.status, row.task, dict(row.state or {}))
        realiser = self.realiser(row.hypervisor_type)
        spec = self.spec(row)
        try:
            st = realiser.status(spec)
        except Exception as exc:  # noqa: BLE001
            st = base.Status(ERROR, reason=f"status: {exc}")
        fields: dict = {"addresses": st.addresses or row.addresses, "notes": st.notes or row.notes}
        if row.status == ERROR and st.status == BUILD:
            pass  # a failed create stays failed
        elif st.status in (ACTIVE, "SHUTOFF"):
            fields.update(status=st.status, task=None, fault=None)
        elif st.status == ERROR:
            fields.update(status=ERROR, task=None, fault=st.reason or "failed")
        elif st.status == BUILD:
            built = time.time() - (row.task_at or row.created_at)
            if built > realiser.build_timeout:
                fields.update(status=ERROR, task=None,
                              fault=f"not ACTIVE after {realiser.build_timeout:.0f} s"
                                    + (f" (waiting for {st.reason})" if st.reason else ""))
        elif st.status == DELETED and row.status != BUILD:
            fields.update(status=ERROR, task=None, fault=GONE)
        with self.store.session() as s:
            now = s.get(Server, row.id)
            # A power, rebuild or delete that saved meanwhile knows better: what was read
            # before it would undo its record (the next refresh reads again).
            if now is not None and (now.status, now.task, dict(now.state or {})) == seen:
                now.state = dict(spec.state)
                for k, v in fields.items():
                    setattr(now, k, v)
        return self.get(row.id)

    def power(self, ref: str, on: bool) -> dict:
        with self.store.session() as s:
            row = self._find(s, ref)
        if self._elsewhere(row):
            return self._on_its_host(row, "POST", f"/v1/servers/{row.id}/action",
                                     {"action": "power-on" if on else "power-off"})
        # ERROR too: a machine that crashed or was stopped outside is powered on again, as a
        # BMC powers a node on whatever happened to it (a machine that is gone says so).
        if row.status not in (ACTIVE, "SHUTOFF", ERROR) or row.task:
            raise Conflict(f"server {row.name} is {row.status}{f' ({row.task})' if row.task else ''}; "
                           f"power on/off needs ACTIVE, SHUTOFF or ERROR", "server")
        if row.status == ERROR:
            if self.refresh(row.id)["fault"] == GONE:
                raise Conflict(f"server {row.name}: the machine is gone; `undercloud server rebuild {row.name}` "
                               f"makes it again", "server")
            with self.store.session() as s:
                row = self._find(s, ref)  # as the refresh left it
        realiser = self.realiser(row.hypervisor_type)
        spec = self.spec(row)
        self._call(row.id, lambda sp: realiser.power(sp, on), spec, "powering-on" if on else "powering-off")
        return self.refresh(row.id)

    def rebuild(self, ref: str, image: str | None = None, first_boot: dict | None = None) -> dict:
        """Recreate the server from `image` (default: its image's name, newest build); keys of
        `first_boot` (e.g. new user_data) replace those of its first-boot data."""
        with self.store.session() as s:
            row = self._find(s, ref)
        if self._elsewhere(row):
            return self._on_its_host(row, "POST", f"/v1/servers/{row.id}/action",
                                     {"action": "rebuild", "image": image, "first_boot": first_boot})
        realiser = self.realiser(row.hypervisor_type)
        if not realiser.can_rebuild:
            raise Conflict(f"{row.hypervisor_type} servers cannot be rebuilt in place", "server")
        img = self.choose_image(image or row.image_name, row.hypervisor_type, row.flavor.get("name", "?"),
                                realiser.disk_formats)
        self._save(row.id, image_id=img["id"], image_name=img["name"], status=REBUILD, task="rebuilding",
                   fault=None, task_at=time.time())
        with self.store.session() as s:
            row = s.get(Server, row.id)
        spec = self.spec(row, image=img)
        if first_boot:
            spec.first_boot = {**spec.first_boot, **first_boot}
            self._write_first_boot(spec, realiser)
        self._call(row.id, realiser.rebuild, spec, "rebuilding")
        return self.get(row.id)

    def console(self, ref: str, lines: int = 100) -> str:
        with self.store.session() as s:
            row = self._find(s, ref)
        if self._elsewhere(row):
            return self._on_its_host(row, "GET", f"/v1/servers/{row.id}/console?lines={int(lines)}")["console"]
        return self.realiser(row.hypervisor_type).console(self.spec(row), lines)

    def delete(self, ref: str) -> dict:
        """Start removing the server (repeatable); `gone(id)` says when it is done. A server
        that is a hypervisor host (a node of the UndercloudWorker service: the host is named
        after it) is refused while servers run on it: they would be stranded there."""
        with self.store.session() as s:
            row = self._find(s, ref)
            if row.name not in (row.host, host_name()) and s.scalar(
                    select(func.count()).select_from(HypervisorHost).where(HypervisorHost.name == row.name)):
                held = s.scalars(select(Server.name).where(Server.host == row.name, Server.id != row.id)
                                 .order_by(Server.name)).all()
                if held:
                    raise Conflict(f"server {row.name} is the hypervisor host of {len(held)} server(s) "
                                   f"({', '.join(held[:5])}{', ...' if len(held) > 5 else ''}): delete them first",
                                   "server")
        # its agent's token is refused from now on, whether or not the caller waits for the teardown
        self.env.revoke_agent(row.id)
        if self._elsewhere(row):  # started there; `gone` asks there again until it is done
            if self._worker_of(row) is None:
                self._delete_locally(row)
            else:
                self._on_its_host(row, "DELETE", f"/v1/servers/{row.id}?wait=0")
            return view(row)
        self._save(row.id, task="deleting")
        realiser = self.realiser(row.hypervisor_type)
        spec = self.spec(row)
        try:
            realiser.delete(spec)
        except Exception as exc:  # noqa: BLE001
            self._save(row.id, spec, status=ERROR, task=None, fault=f"deleting: {exc}")
            raise UndercloudError(f"server {row.name}: deleting failed: {exc}", "server") from None
        self._save(row.id, spec)
        self.gone(row.id)
        return view(row)

    def gone(self, server_id: str) -> bool:
        """True once the realiser has removed everything; the record goes then."""
        with self.store.session() as s:
            row = s.get(Server, server_id)
        if row is None:
            return True
        if self._elsewhere(row):  # only its host can tell; its worker removes the record when done
            worker = self._worker_of(row)
            if worker is None:  # the host went down meanwhile
                self._delete_locally(row)
                return True
            try:
                return bool(self._on_its_host(row, "DELETE", f"/v1/servers/{row.id}?wait=0", worker=worker)
                            .get("deleted"))
            except NotFound:  # removed there since we read it
                return True
        realiser = self.realiser(row.hypervisor_type)
        spec = self.spec(row)
        st = realiser.status(spec)
        if st.status != DELETED:
            return False
        if row.node_id and self.env.scheduler is not None:
            self.env.scheduler.release(row.id)
        shutil.rmtree(self.root / row.id, ignore_errors=True)
        with self.store.session() as s:
            r = s.get(Server, server_id)
            if r is not None:
                s.delete(r)
        try:
            realiser.cleanup()
        except Exception as exc:  # noqa: BLE001 - shared objects are removed on a later delete
            log.warning("servers: %s clean-up: %s", row.hypervisor_type, exc)
        return True

    def _delete_locally(self, row: Server) -> None:
        """Nova's local delete: the server's host has no live worker (down, or gone for good),
        so the record and its address go now, in one transaction, and its machine is left to
        that host (a Leftover), whose worker removes it when it comes back (`remove_leftovers`)."""
        with self.store.session() as s:
            r = s.get(Server, row.id)
            if r is None:
                return
            s.add(Leftover(id=r.id, name=r.name, host=r.host, hypervisor_type=r.hypervisor_type,
                           volumes=list(r.volumes or []), state=dict(r.state or {})))
            s.execute(delete(Address).where(Address.holder == r.id))
            s.delete(r)
        shutil.rmtree(self.root / row.id, ignore_errors=True)
        log.warning("server %s (%s) deleted while its host %s has no live worker: that host removes its "
                    "machine when its worker comes back", row.name, row.id, row.host)

    def remove_leftovers(self) -> list[str]:
        """The machines on this host of servers deleted while it was down (at start, before
        anything is made: their addresses may be another server's now; and every status pass)."""
        with self.store.session() as s:
            rows = s.scalars(select(Leftover).where(Leftover.host == host_name())).all()
        removed = []
        for lo in rows:
            spec = Spec(id=lo.id, name=lo.name, hypervisor_type=lo.hypervisor_type, flavor={}, image={},
                        image_path=None, first_boot={}, networks=[], volumes=list(lo.volumes or []),
                        state=dict(lo.state or {}))
            try:
                realiser = self.realiser(lo.hypervisor_type)
                realiser.delete(spec)
                with self.store.session() as s:
                    s.execute(delete(Leftover).where(Leftover.id == lo.id))
                removed.append(lo.name)
                realiser.cleanup()  # the network, when it was the last
            except Exception as exc:  # noqa: BLE001 - the next pass tries again
                log.warning("servers: removing the machine of deleted server %s: %s", lo.name, exc)
        if removed:
            log.info("removed the machines of servers deleted while this host was down: %s", ", ".join(removed))
        return removed

    def wait(self, ref: str, until: set[str], timeout: float, interval: float = 0.2) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            srv = self.refresh(ref)
            if srv["status"] in until or srv["status"] == ERROR:
                return srv
            if time.monotonic() > deadline:
                raise UndercloudError(f"server {srv['name']} still {srv['status']} after {timeout:.0f} s", "server")
            time.sleep(interval)
