"""The servers service: the server records, their life cycle, and the realisers.

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

`ServersService` is the one entry point; beside it in this package: flavors.py (sizes),
placement.py (hypervisor hosts, where a server goes), image_choice.py (which image),
first_boot.py (the first-boot files), forwarding.py (requests about a server another host
runs) and leftovers.py (machines of servers deleted while their host was down).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

from sqlalchemy import func, select

from undercloud import server_types
from undercloud.agent.files import remove_temps
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
from undercloud.provisioning.servers.first_boot import FirstBootFiles
from undercloud.provisioning.servers.flavors import Flavors, hypervisor_type
from undercloud.provisioning.servers.forwarding import Forwarding
from undercloud.provisioning.servers.image_choice import choose_image, server_image
from undercloud.provisioning.servers.leftovers import Leftovers
from undercloud.provisioning.servers.placement import LOCAL_TYPES, Placement
from undercloud.store import Store
from undercloud.store.servers import HypervisorHost, Server

log = logging.getLogger("undercloud.servers")

GONE = "the machine is gone (removed outside the undercloud?)"  # the fault when a machine vanished
NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,61}[A-Za-z0-9])?$")  # a hostname label (dots allowed)
AVAILABLE_TTL = 60.0
# A host's live worker that does not answer the spawn (an emulated node busy loading an image)
# is asked again until this many seconds have passed: the spawn action is idempotent.
SPAWN_ASK_FOR, SPAWN_ASK_EVERY = 240.0, 5.0


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
        # its parts (placement.py, ...); those that need a realiser ask this service's, at each call
        self.placement = Placement(store, env, lambda ht: self._unavailable(ht, self.realiser(ht)))
        self.forwarding = Forwarding(env, self.placement)
        self.first_boot_files = FirstBootFiles(self.root, env)
        self.leftovers = Leftovers(store, lambda ht: self.realiser(ht), self.first_boot_files)

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

    # ---- hypervisor hosts (placement.py) -------------------------------------------
    def ensure_local_hosts(self) -> None:
        """This host, registered for the hypervisor types it offers."""
        self.placement.ensure_local_hosts()

    def hosts(self) -> list[dict]:
        """The hypervisor hosts, their use and state, and this host's container engine."""
        out = self.placement.hosts()
        # this host's container engine, as its watch last found it (other hosts' watch their own)
        engine = self.engine_health(summary=True)
        for row in out:
            row["engine"] = engine if row["hypervisor_type"] == server_types.CONTAINER and row["name"] == host_name() else ""
        return out

    def forget_host(self, name: str) -> dict:
        """Remove a hypervisor host that is down and runs no server."""
        return self.placement.forget_host(name)

    # ---- images (image_choice.py) --------------------------------------------------
    def choose_image(self, ref: str, ht: str, flavor_name: str, formats: tuple[str, ...]) -> dict:
        """The image named (or with id) `ref` for hypervisor type `ht`; the newest if several."""
        return choose_image(self.env.images, ref, ht, flavor_name, formats)

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
            node = self.placement.claim_node(id, fl, img, scheduler_hints or {})
        try:
            with self.store.session() as s:
                host = (None if realiser.uses_nodes or realiser.remote
                        else self.placement.place(s, fl, ht, scheduler_hints or {}))
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
        if self.forwarding.elsewhere(row):  # placed on another host: its worker makes the machine
            try:
                return self._spawn_elsewhere(row, first_boot)
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

    def _spawn_elsewhere(self, row: Server, first_boot: dict | None) -> dict:
        """Ask the worker of the server's host to make it; while that host has a live worker
        that does not answer, ask again (it dedups a spawn it is already running)."""
        deadline = time.monotonic() + SPAWN_ASK_FOR
        while True:
            try:
                return self.resume(row.id, first_boot)
            except ServiceUnavailable as exc:
                if time.monotonic() >= deadline or self.forwarding.worker_of(row) is None:
                    raise
                log.info("server %s: %s; asking again", row.name, exc.message)
                time.sleep(SPAWN_ASK_EVERY)

    def resume(self, server_id: str, first_boot: dict | None = None, background: bool = False) -> dict:
        """Continue a create interrupted by a crash: the realiser finds what it made already.
        Uses the first-boot data on disk (same token); `first_boot` only if that was lost.
        A server of another host is resumed by a worker of its host (the `spawn` action),
        which makes the machine in the `background`: the caller waits for ACTIVE as usual."""
        with self.store.session() as s:
            row = self._find(s, server_id)
        if row.status != BUILD:
            return view(row)
        if self.forwarding.elsewhere(row):
            return self.forwarding.on_its_host(row, "POST", f"/v1/servers/{row.id}/action",
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

    # ---- first-boot files (first_boot.py) ------------------------------------------
    def _write_first_boot(self, spec: Spec, realiser: Realiser) -> None:
        # where its agent reaches the undercloud (the network made if missing): a failure is its fault
        self.first_boot_files.write(spec, lambda sp: self._call(sp.id, realiser.agent_url, sp, "spawning"))

    def first_boot_dir(self, server_id: str) -> Path:
        return self.first_boot_files.dir(server_id)

    def read_first_boot(self, server_id: str) -> dict:
        return self.first_boot_files.read(server_id)

    # ---- a server's Spec, and saving what its realiser did -------------------------
    def spec(self, row: Server, first_boot: dict | None = None, image: dict | None = None) -> Spec:
        img, path = server_image(self.env.images, row, image)
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
        others = self.placement.other_hosts()
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

    # ---- one server (another host's: asked of its host's worker, forwarding.py) ----
    def refresh(self, ref: str) -> dict:
        """Ask the realiser how the server is; store status, addresses and fault."""
        with self.store.session() as s:
            row = self._find(s, ref)
        if self.forwarding.elsewhere(row):  # its host's worker asks; without one, or no answer, as last known
            worker = self.forwarding.worker_of(row)
            if worker is None:
                return view(row)
            try:
                return self.forwarding.on_its_host(row, "GET", f"/v1/servers/{row.id}", worker=worker)
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
        if self.forwarding.elsewhere(row):
            return self.forwarding.on_its_host(row, "POST", f"/v1/servers/{row.id}/action",
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
        if self.forwarding.elsewhere(row):
            return self.forwarding.on_its_host(row, "POST", f"/v1/servers/{row.id}/action",
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
        if self.forwarding.elsewhere(row):
            return self.forwarding.on_its_host(row, "GET", f"/v1/servers/{row.id}/console?lines={int(lines)}")["console"]
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
        if self.forwarding.elsewhere(row):  # started there; `gone` asks there again until it is done
            if self.forwarding.worker_of(row) is None:
                self.leftovers.leave(row)
            else:
                self.forwarding.on_its_host(row, "DELETE", f"/v1/servers/{row.id}?wait=0")
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
        if self.forwarding.elsewhere(row):  # only its host can tell; its worker removes the record when done
            worker = self.forwarding.worker_of(row)
            if worker is None:  # the host went down meanwhile
                self.leftovers.leave(row)
                return True
            try:
                return bool(self.forwarding.on_its_host(row, "DELETE", f"/v1/servers/{row.id}?wait=0", worker=worker)
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
        self.first_boot_files.remove(row.id)
        with self.store.session() as s:
            r = s.get(Server, server_id)
            if r is not None:
                s.delete(r)
        try:
            realiser.cleanup()
        except Exception as exc:  # noqa: BLE001 - shared objects are removed on a later delete
            log.warning("servers: %s clean-up: %s", row.hypervisor_type, exc)
        return True

    def remove_leftovers(self) -> list[str]:
        """The machines on this host of servers deleted while it was down (leftovers.py)."""
        return self.leftovers.remove()

    def wait(self, ref: str, until: set[str], timeout: float, interval: float = 0.2) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            srv = self.refresh(ref)
            if srv["status"] in until or srv["status"] == ERROR:
                return srv
            if time.monotonic() > deadline:
                raise UndercloudError(f"server {srv['name']} still {srv['status']} after {timeout:.0f} s", "server")
            time.sleep(interval)
