"""The nodes service: inventory, lifecycle (from states.TRANSITIONS), power, sync.

Every provision-state change is one conditional UPDATE (`... WHERE provision_state =
<expected>`), so two requests, a worker and the timeout checker can never both move a
node: the loser sees it moved and stops. Work that talks to a BMC runs on a small thread
pool; the API returns at once with the node in its busy state (`verifying`, ...), and
`--wait` follows it.

Many nodes move in batches, as Ironic's conductors do: one writer thread (`_Writer`) writes
every verb and every finished work's transition; what is queued when it looks (up to BATCH
nodes) shares one transaction: one conditional UPDATE per (from, to) group, RETURNING the
nodes that moved, and their events in one INSERT (each node's events in the same order as
one at a time). The nodes a transaction moved into busy states run their work grouped by
BMC (`drivers.endpoint`): a group runs in turn with one BMC session. One node's failure
is its own: it fails with its reason, the others of its batch go on.

Node work runs on a pool sized from the store's connections (`Store.capacity`): work beyond
it waits in the pool's queue. A store too busy to answer (SQLite locked, no free
connection) makes the work wait and try again, never fails a node: only the state's own
timeout (checked by the periodic loop) does.

How a node gets its image, loses it and is inspected is its deploy interface (Ironic's deploy
and inspect interfaces, `DeployInterface`), given to the service where it is built: the
servers layer's bare-metal realiser (servers/baremetal.py: the deploy ramdisk, from virtual
media or the network), else `BootDiskDeploy` (no ramdisk). Inspection asks the deploy
interface first, then `inspect_steps` (the BMC's inventory); cleaning runs `clean_steps`
(power off).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid as uuidlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import delete, insert, or_, select, update
from sqlalchemy import exc as sa_exc

from undercloud.errors import Conflict, InvalidInput, NotFound, UndercloudError, internal_error
from undercloud.provisioning import drivers, instackenv, states
from undercloud.provisioning.drivers import Driver, DriverError
from undercloud.store import Store
from undercloud.store.nodes import Node, NodeEvent, Port
from undercloud.store.workers import HashRing

log = logging.getLogger("undercloud.nodes")

WAIT = "wait"  # what a step returns when something outside (an agent) will call back

# A step gets (node: NodeRecord, driver) and returns None (done), WAIT, or for inspect
# steps an inventory dict. Raising UndercloudError fails the node with that message.
Step = Callable[["NodeRecord", Driver], Any]


@dataclass
class NodeRecord:
    """What steps and hooks see of a node (driver_info unmasked: they talk to the BMC)."""

    id: str
    name: str | None
    driver: str
    driver_info: dict
    properties: dict
    instance_uuid: str | None
    instance_info: dict
    macs: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.name or self.id


BATCH = 500  # nodes whose transitions share one transaction


@dataclass
class Outcome:
    """What a node's busy work came to; written with other nodes' in one transaction."""

    node_id: str
    state: str                   # the busy state the work ran in
    info: dict                   # the node's driver_info, to scrub its secrets from `error`
    event: str = "done"          # done, wait or fail
    error: str | None = None
    power: str | None = None     # what the BMC reported after the work
    inventory: dict | None = None
    release: bool = False        # undeploy: the node serves no instance any more


@dataclass
class _Acts:
    """One request's verb for its nodes, in order; the first refusal stops the rest."""

    idents: list[str]
    verb: str
    views: list[dict] = field(default_factory=list)
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class _Writer:
    """The one thread writing nodes' transitions, so node writes never wait on each other's
    locks and a rack of nodes costs a few commits, not three per node."""

    def __init__(self, svc: NodeService):
        self.svc = svc
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def put(self, item) -> None:
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="node-writer", daemon=True)
                self.thread.start()
        self.queue.put(item)

    def stop(self) -> None:
        with self.lock:
            if self.thread is not None:
                self.queue.put(None)
                self.thread = None

    def _loop(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            items, size = [item], _size(item)
            while size < BATCH:
                try:
                    more = self.queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self.queue.put(None)  # stop after this batch
                    break
                items.append(more)
                size += _size(more)
            try:
                acts = [i for i in items if isinstance(i, _Acts)]
                if acts:
                    self.svc._write_acts(acts)
                outs = [i for i in items if isinstance(i, Outcome)]
                if outs:
                    self.svc._write_outcomes(outs)
            except Exception:  # noqa: BLE001 - the writer must outlive a bug in one batch
                log.exception("node writer: a batch failed")
            finally:
                for i in items:
                    if isinstance(i, _Acts):
                        i.done.set()


def _size(item) -> int:
    return len(item.idents) if isinstance(item, _Acts) else 1


def inspect_bmc_inventory(node: NodeRecord, driver: Driver) -> dict | None:
    """Inspection through the BMC (Redfish System resource); None where it cannot tell."""
    return driver.management.inventory()


def clean_power_off(node: NodeRecord, driver: Driver) -> None:
    """Without a cleaning ramdisk, cleaning leaves the node off, ready to boot."""
    driver.power.set("off")


class DeployInterface(Protocol):
    """How a node is deployed, torn down and inspected (Ironic's deploy and inspect
    interfaces). Each gets the node and its driver, runs on the service's node workers, and
    returns None (done) or WAIT (a ramdisk will call back); `inspect_hardware` may also
    return the inventory it found, or None where it cannot inspect (the BMC's inventory is
    asked next). Raising UndercloudError fails the node with that message.

    `deploy_name` is what `node show` gives as the deploy interface; `inspect_name` says how
    a node of that driver class, driver_info and MACs would be inspected ("ramdisk" or
    "bmc"), by the rule `inspect_hardware` follows."""

    deploy_name: str

    def inspect_name(self, driver: type[Driver], info: dict, macs: list[str]) -> str: ...

    def deploy(self, node: NodeRecord, driver: Driver) -> str | None: ...

    def tear_down(self, node: NodeRecord, driver: Driver) -> str | None: ...

    def inspect_hardware(self, node: NodeRecord, driver: Driver) -> dict | str | None: ...


class BootDiskDeploy:
    """Without a deploy ramdisk: deploy boots the node's own disk, tear-down powers it off,
    and inspection is left to the BMC."""

    deploy_name = "boot-disk"

    def inspect_name(self, driver: type[Driver], info: dict, macs: list[str]) -> str:
        return INSPECT_BY_BMC

    def deploy(self, node: NodeRecord, driver: Driver) -> None:
        driver.management.set_boot_device("disk", persistent=True)
        driver.power.set("on")

    def tear_down(self, node: NodeRecord, driver: Driver) -> None:
        driver.power.set("off")

    def inspect_hardware(self, node: NodeRecord, driver: Driver) -> None:
        return None


INSPECT_BY_BMC = "bmc"          # the BMC's inventory (Redfish's System, a cloud's flavor)
INSPECT_BY_RAMDISK = "ramdisk"  # the deploy ramdisk booted in inspection mode, the BMC's as a fallback


def view(n: Node, macs: list[str] | None = None, deploy: DeployInterface | None = None) -> dict:
    """A node as the API shows it: the BMC password masked; the interfaces in effect (as
    Ironic's node show), deploy and inspect where the node service gives its `deploy`."""
    macs = macs if macs is not None else []
    info = n.driver_info or {}
    interfaces = drivers.interfaces(n.driver, info)
    inspect = None
    if deploy is not None and interfaces["boot_interface"] is not None:
        inspect = deploy.inspect_name(drivers.module(n.driver).DRIVER, info, macs)
    return {
        "uuid": n.id, "name": n.name, "driver": n.driver, "driver_info": drivers.mask(n.driver_info or {}),
        "properties": n.properties or {}, "resource_class": n.resource_class,
        "provision_state": n.provision_state, "target_state": n.target_state,
        "power_state": n.power_state, "last_error": n.last_error,
        "maintenance": bool(n.maintenance), "maintenance_reason": n.maintenance_reason,
        "instance_uuid": n.instance_uuid, "instance_info": n.instance_info or {},
        "ports": macs, "allowed_verbs": states.allowed_verbs(n.provision_state),
        "created_at": n.created_at, "updated_at": n.updated_at,
        "provision_updated_at": n.provision_updated_at,
        # boot: how its deploy ramdisk boots (the rule the deploy uses); None where its
        # driver_info names one its driver lacks
        **interfaces,
        "deploy_interface": deploy.deploy_name if deploy is not None else None,
        "inspect_interface": inspect,
    }


def store_busy(exc: BaseException) -> bool:
    """The store could not serve us now (locked, or no free connection): try again later."""
    if isinstance(exc, sa_exc.TimeoutError):
        return True
    return isinstance(exc, sa_exc.OperationalError) and any(
        w in str(exc.orig).lower() for w in ("locked", "busy", "too many connections"))


STORE_PATIENCE = 600.0  # seconds node work waits for a busy store before it gives up (and logs)


def patient(fn: Callable, *args, **kwargs):
    """`fn(...)`, tried again with growing pauses while the store is busy."""
    delay, deadline = 0.05, time.monotonic() + STORE_PATIENCE
    while True:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if not store_busy(exc) or time.monotonic() > deadline:
                raise
            log.warning("store busy (%s); %s again in %.2f s", type(exc).__name__, fn.__name__, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def default_workers(store: Store) -> int:
    """Node work holds one store connection at a time, and only between BMC calls: a quarter
    of the store's connections leaves the rest to API requests, the engine and the loops."""
    return max(2, min(16, getattr(store, "capacity", 8) // 4))


class NodeService:
    def __init__(self, store: Store, workers: int | None = None, timeouts: dict[str, float] | None = None,
                 enforce_power: bool = False, sync_workers: int = 16,
                 cloud_config: drivers.CloudConfig | None = None,
                 deploy_interface: Callable[[], DeployInterface] | None = None):
        self.store = store
        # The deploy interface, asked for at each use: the bare-metal realiser that is the
        # real one is made from the servers service, which is made from this one.
        self._deploy_interface = deploy_interface or BootDiskDeploy
        # a cloud's entry by name, for the drivers of nodes that are a cloud's servers (the API
        # service gives provisioning.clouds.Clouds.config); None: this process knows no clouds
        self.cloud_config = cloud_config
        self.workers = workers or default_workers(store)
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="node-work")
        self.writer = _Writer(self)
        self.sync_pool = ThreadPoolExecutor(sync_workers, thread_name_prefix="power-sync")
        self.timeouts = {**states.TIMEOUTS, **(timeouts or {})}
        self.enforce_power = enforce_power
        self.inspect_steps: list[Step] = [inspect_bmc_inventory]
        self.clean_steps: list[Step] = [clean_power_off]
        self._sync_lock = threading.Lock()
        # This process among the workers sharing the store, and who of them is alive (the
        # service sets both from store/workers.py; on its own this service is the only one).
        self.worker_id = "local"
        self.live_workers: Callable[[], set[str]] = lambda: {self.worker_id}
        # those of them sharing the power sync (not a hypervisor host's worker)
        self.ring_workers: Callable[[], set[str]] = lambda: self.live_workers()

    def close(self) -> None:
        self.writer.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.sync_pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ queries
    def _find(self, s, ident: str) -> Node:
        node = s.get(Node, ident)
        if node is None:
            node = s.scalars(select(Node).where(Node.name == ident)).first()
        if node is None:
            raise NotFound(f"no node named or with UUID {ident!r}")
        return node

    def _macs(self, s, node_ids: list[str] | None = None) -> dict[str, list[str]]:
        q = select(Port.node_id, Port.address).order_by(Port.address)
        if node_ids is not None:
            q = q.where(Port.node_id.in_(node_ids))
        out: dict[str, list[str]] = {}
        for node_id, mac in s.execute(q):
            out.setdefault(node_id, []).append(mac)
        return out

    def get(self, ident: str) -> dict:
        with self.store.session() as s:
            n = self._find(s, ident)
            return view(n, self._macs(s, [n.id]).get(n.id, []), self.deploy_interface)

    def list(self, provision_state: str | None = None, maintenance: bool | None = None) -> list[dict]:
        with self.store.session() as s:
            q = select(Node).order_by(Node.name, Node.id)
            if provision_state:
                q = q.where(Node.provision_state == provision_state)
            if maintenance is not None:
                q = q.where(Node.maintenance == maintenance)
            nodes = s.scalars(q).all()
            macs = self._macs(s) if nodes else {}
            deploy = self.deploy_interface
            return [view(n, macs.get(n.id, []), deploy) for n in nodes]

    def events(self, ident: str, limit: int = 50) -> list[dict]:
        with self.store.session() as s:
            n = self._find(s, ident)
            rows = s.scalars(select(NodeEvent).where(NodeEvent.node_id == n.id)
                             .order_by(NodeEvent.id.desc()).limit(limit)).all()
            return [{"at": e.at, "kind": e.kind, "message": e.message} for e in reversed(rows)]

    def record(self, ident: str) -> NodeRecord:
        with self.store.session() as s:
            n = self._find(s, ident)
            return self._record(s, n)

    def _record(self, s, n: Node) -> NodeRecord:
        return NodeRecord(n.id, n.name, n.driver, dict(n.driver_info or {}), dict(n.properties or {}),
                          n.instance_uuid, dict(n.instance_info or {}), self._macs(s, [n.id]).get(n.id, []))

    # ---------------------------------------------------------------- inventory
    def import_nodes(self, text: str, filename: str = "instackenv.json") -> list[dict]:
        """Enrol every node of an instackenv file, all or nothing."""
        specs = instackenv.parse(text, filename)
        with self.store.session() as s:
            problems = self._conflicts(s, specs)
            if problems:
                raise Conflict("\n".join(problems) + f"\n{len(problems)} problem(s); nothing was imported")
            now = time.time()
            for spec in specs:
                s.add(Node(id=spec.uuid, name=spec.name, driver=spec.driver, driver_info=spec.driver_info,
                           bmc_key=spec.bmc_key, properties=spec.properties, resource_class=spec.resource_class,
                           provision_state=states.ENROLL, provision_updated_at=now, created_at=now,
                           updated_at=now, instance_info={}))
                s.add_all(Port(address=mac, node_id=spec.uuid) for mac in spec.macs)
                s.add(NodeEvent(node_id=spec.uuid, at=now, kind="state",
                                message=f"enrolled from {filename} with driver {spec.driver}"))
            s.flush()
            return [{"uuid": sp.uuid, "name": sp.name, "driver": sp.driver, "provision_state": states.ENROLL,
                     "ports": sp.macs} for sp in specs]

    def _conflicts(self, s, specs: list[instackenv.NodeSpec]) -> list[str]:
        """Duplicates of nodes already enrolled (name, UUID, MAC, BMC)."""
        names = {sp.name for sp in specs if sp.name}
        ids = {sp.uuid for sp in specs}
        macs = {m for sp in specs for m in sp.macs}
        keys = {sp.bmc_key for sp in specs}
        have_names = {a: b for a, b in s.execute(select(Node.name, Node.id).where(Node.name.in_(names)))}
        have_ids = set(s.scalars(select(Node.id).where(Node.id.in_(ids))))
        have_macs = {a: b or i for a, b, i in s.execute(
            select(Port.address, Node.name, Node.id).join(Node, Node.id == Port.node_id).where(Port.address.in_(macs)))}
        have_keys = {a: b or i for a, b, i in s.execute(
            select(Node.bmc_key, Node.name, Node.id).where(Node.bmc_key.in_(keys)))}
        problems = []
        for sp in specs:
            if sp.name in have_names:
                problems.append(f"{sp.where}: name: node {sp.name} is already enrolled")
            if sp.uuid in have_ids:
                problems.append(f"{sp.where}: uuid: node {sp.uuid} is already enrolled")
            for mac in sp.macs:
                if mac in have_macs:
                    problems.append(f"{sp.where}: ports: MAC {mac} belongs to node {have_macs[mac]}")
            if sp.bmc_key in have_keys:
                problems.append(f"{sp.where}: pm_addr: this BMC is already enrolled as node {have_keys[sp.bmc_key]}")
        return problems

    def delete(self, ident: str) -> None:
        with self.store.session() as s:
            n = self._find(s, ident)
            if n.provision_state not in states.DELETE_ALLOWED or n.instance_uuid:
                held = f", held by instance {n.instance_uuid}" if n.instance_uuid else ""
                raise Conflict(f"cannot delete node {n.name or n.id} in state '{n.provision_state}'{held} "
                               f"(allowed in: {', '.join(sorted(states.DELETE_ALLOWED))})")
            s.execute(delete(NodeEvent).where(NodeEvent.node_id == n.id))
            s.execute(delete(Port).where(Port.node_id == n.id))
            s.delete(n)

    # ---------------------------------------------------------------- lifecycle
    def _fire(self, node_id: str, event: str, *, expect: str | None = None, error: str | None = None,
              target: str | None = None, values: dict | None = None, s=None) -> str | None:
        """Move a node by `event` if it is still in `expect`; returns the new state or None."""
        def go(s) -> str | None:
            n = s.get(Node, node_id)
            if n is None:
                return None
            src = expect or n.provision_state
            if n.provision_state != src:
                return None
            dst = states.next_state(src, event, n.name or n.id)
            now = time.time()
            vals = {"provision_state": dst, "provision_updated_at": now, "updated_at": now,
                    "reservation": self.worker_id if dst in states.BUSY else None, **(values or {})}
            if target is not None:
                vals["target_state"] = target
            elif states.is_stable(dst):
                vals["target_state"] = None
            if error is not None:
                vals["last_error"] = drivers.scrub(error, n.driver_info or {})
            elif event in states.VERBS:
                vals["last_error"] = None
            res = s.execute(update(Node).where(Node.id == node_id, Node.provision_state == src).values(**vals))
            if res.rowcount != 1:
                return None
            msg = f"{src} -> {dst} ({event})"
            if error:
                msg += f": {vals['last_error']}"
            s.add(NodeEvent(node_id=node_id, at=now, kind="state", message=msg))
            s.expire_all()
            return dst

        if s is not None:
            return go(s)
        with self.store.session() as s2:
            return go(s2)

    def act(self, ident: str, verb: str) -> dict:
        """Apply a user verb; work that needs the BMC continues in the background."""
        return self.act_many([ident], verb)[0]

    def act_many(self, idents: list[str], verb: str) -> list[dict]:
        """`act` for several nodes in order, sharing transactions (with other requests' too) and,
        for their work, BMC sessions. The first refusal stops there, as one request per node
        would: the nodes before it moved, it and those after did not."""
        if verb not in states.VERBS:
            raise InvalidInput(f"unknown verb {verb!r} (verbs: {', '.join(states.VERBS)})")
        views: list[dict] = []
        for k in range(0, len(idents), BATCH):
            op = _Acts(list(idents[k:k + BATCH]), verb)
            self.writer.put(op)
            op.done.wait()
            views += op.views
            if op.error is not None:
                raise op.error
            if len(op.views) != len(op.idents):  # the writer failed it without a reason: a bug
                raise internal_error(RuntimeError("node writer returned no view"), log, f"node {verb}")
        return views

    # (writer thread) verbs
    def _write_acts(self, ops: list[_Acts]) -> None:
        try:
            work = self._acts_txn(ops)
        except Exception as exc:  # noqa: BLE001 - handed to each request
            if len(ops) > 1 and not store_busy(exc):  # one request's bug must not fail the others
                for op in ops:
                    self._write_acts([op])
                return
            for op in ops:
                op.views, op.error = [], exc
            return
        self._start_work(work)

    def _acts_txn(self, ops: list[_Acts]) -> list[tuple[str, NodeRecord]]:
        for op in ops:  # afresh (a batch that failed is tried again request by request)
            op.views, op.error = [], None
        now = time.time()
        with self.store.session() as s:
            idents = list({i for op in ops for i in op.idents})
            found = s.execute(select(*Node.__table__.c).where(or_(Node.id.in_(idents), Node.name.in_(idents)))).all()
            by_id = {n.id: n for n in found}
            by_name = {n.name: n for n in found if n.name}
            now_in: dict[str, str] = {}           # node -> its state as this transaction leaves it
            groups: dict[tuple, tuple[dict, list[str]]] = {}
            plan: list[tuple] = []  # (request, node row, from, to, values, error)
            moved: set[str] = set()

            def flush() -> None:
                for (src, *_), (vals, ids) in groups.items():
                    moved.update(self._move(s, src, ids, vals))
                groups.clear()

            for op in ops:
                for ident in op.idents:
                    n = by_id.get(ident) or by_name.get(ident)
                    try:
                        if n is None:
                            raise NotFound(f"no node named or with UUID {ident!r}")
                        if op.verb in ("deploy", "rebuild") and not n.instance_uuid:
                            raise Conflict(f"node {n.name or n.id} is not claimed by a server; deploy through "
                                           f"the scheduler (servers) so that one node serves one server")
                        src = now_in.get(n.id, n.provision_state)
                        dst = states.next_state(src, op.verb, n.name or n.id)
                    except UndercloudError as exc:
                        op.error = exc
                        break
                    if n.id in now_in:  # asked twice in this batch: the first move goes first
                        flush()
                    now_in[n.id] = dst
                    error = "aborted by request" if op.verb == "abort" else None
                    vals = self._values(dst, op.verb, now, error, n.driver_info, target=VERB_TARGET.get(op.verb))
                    key = (src, dst, op.verb, error)
                    groups.setdefault(key, (vals, []))[1].append(n.id)
                    plan.append((op, n, src, dst, vals, error))
            flush()
            events, work = [], []
            macs = self._macs(s, sorted(moved)) if moved else {}
            deploy = self.deploy_interface if moved else None
            for op, n, src, dst, vals, error in plan:
                if n.id not in moved:  # another worker or process moved it first
                    if op.error is None:
                        op.error = Conflict(f"node {n.name or n.id} changed state while {op.verb} was asked; "
                                            f"try again")
                    continue
                events.append(self._event(n.id, src, dst, op.verb, vals, now, error))
                shown = view(n, macs.get(n.id, []), deploy)
                shown.update({k: v for k, v in vals.items() if k in shown},
                             allowed_verbs=states.allowed_verbs(dst))
                op.views.append(shown)
                if dst in WORK and now_in[n.id] == dst:
                    work.append((dst, NodeRecord(n.id, n.name, n.driver, dict(n.driver_info or {}),
                                                 dict(n.properties or {}), n.instance_uuid,
                                                 dict(n.instance_info or {}), macs.get(n.id, []))))
            if events:
                s.execute(insert(NodeEvent.__table__), events)
        return work

    def _values(self, dst: str, event: str, now: float, error: str | None, info: dict | None,
                target: str | None = None) -> dict:
        """The columns a move to `dst` by `event` sets (as `_fire` sets them)."""
        vals: dict = {"provision_state": dst, "provision_updated_at": now, "updated_at": now,
                      "reservation": self.worker_id if dst in states.BUSY else None}
        if target is not None:
            vals["target_state"] = target
        elif states.is_stable(dst):
            vals["target_state"] = None
        if error is not None:
            vals["last_error"] = drivers.scrub(error, info or {})
        elif event in states.VERBS:
            vals["last_error"] = None
        return vals

    @staticmethod
    def _move(s, src: str, ids: list[str], vals: dict) -> set[str]:
        """One conditional UPDATE for nodes still in `src`; the ids it moved."""
        stmt = (update(Node).where(Node.id.in_(ids), Node.provision_state == src).values(**vals)
                .returning(Node.id).execution_options(synchronize_session=False))
        return set(s.scalars(stmt))

    @staticmethod
    def _event(node_id: str, src: str, dst: str, event: str, vals: dict, now: float, error: str | None) -> dict:
        """The transition's event row, as `_fire` words it."""
        msg = f"{src} -> {dst} ({event})"
        if error:
            msg += f": {vals['last_error']}"
        return {"node_id": node_id, "at": now, "kind": "state", "message": msg}

    # (writer thread) work finished
    def _write_outcomes(self, outs: list[Outcome]) -> None:
        try:
            chained = patient(self._outcomes_txn, outs)
        except Exception as exc:  # noqa: BLE001
            if len(outs) > 1 and not store_busy(exc):  # isolate the node whose write fails
                for o in outs:
                    self._write_outcomes([o])
                return
            o = outs[0]
            if store_busy(exc):  # not the nodes' fault: their states' timeouts decide, if it comes to that
                log.error("nodes %s: the store stayed busy for %.0f s while %s; left to the state's timeout",
                          ", ".join(x.node_id for x in outs), STORE_PATIENCE, o.state)
                return
            err = internal_error(exc, log, f"node {o.node_id} {o.state}")
            try:
                patient(self._fire, o.node_id, "fail", expect=o.state, error=f"{err.message} while {o.state}")
            except Exception:  # noqa: BLE001 - left to the state's timeout
                log.exception("node %s: could not record the failure", o.node_id)
            return
        if chained:  # deleting -> cleaning: the next work
            records = patient(self._records, [node_id for node_id, _ in chained])
            self._start_work([(st, records[i]) for i, st in chained if i in records])

    def _outcomes_txn(self, outs: list[Outcome]) -> list[tuple[str, str]]:
        now = time.time()
        with self.store.session() as s:
            rows = {r.id: r for r in s.execute(
                select(Node.id, Node.name, Node.provision_state, Node.target_state)
                .where(Node.id.in_([o.node_id for o in outs])))}
            groups: dict[tuple, tuple[dict, list[str]]] = {}
            plan = []
            for o in outs:
                r = rows.get(o.node_id)
                if r is None or r.provision_state != o.state:  # it moved meanwhile (timed out, deleted)
                    continue
                rows.pop(o.node_id)  # once per batch
                event, error, before = o.event, o.error, None
                if event == "done" and o.state == states.CLEANING:
                    event = "done-manual" if r.target_state == states.MANAGEABLE else "done"
                if event == "done" and o.inventory:
                    try:
                        before = self._apply_inventory(s, o.node_id, o.inventory)
                    except UndercloudError as exc:
                        event, error = "fail", str(exc)
                dst = states.next_state(o.state, event, r.name or r.id)
                vals = self._values(dst, event, now, error, o.info)
                if o.power is not None and event != "fail":
                    vals.update(power_state=o.power, power_sync_failures=0)
                if o.release and event != "fail":
                    vals.update(instance_uuid=None, instance_info={})
                key = (o.state, dst, event, vals.get("last_error"), vals.get("power_state"), "instance_info" in vals)
                groups.setdefault(key, (vals, []))[1].append(o.node_id)
                plan.append((o, dst, event, vals, before, error))
            s.flush()  # inventories first
            moved: set[str] = set()
            for (src, *_), (vals, ids) in groups.items():
                moved.update(self._move(s, src, ids, vals))
            events, chained = [], []
            for o, dst, event, vals, before, error in plan:
                if o.node_id not in moved:
                    continue
                if before:
                    events.append({**before, "at": now})
                events.append(self._event(o.node_id, o.state, dst, event, vals, now, error))
                if dst in WORK:
                    chained.append((o.node_id, dst))
            if events:
                s.execute(insert(NodeEvent.__table__), events)
        return chained

    def _records(self, ids: list[str]) -> dict[str, NodeRecord]:
        with self.store.session() as s:
            macs = self._macs(s, ids)
            return {n.id: NodeRecord(n.id, n.name, n.driver, dict(n.driver_info or {}), dict(n.properties or {}),
                                     n.instance_uuid, dict(n.instance_info or {}), macs.get(n.id, []))
                    for n in s.execute(select(*Node.__table__.c).where(Node.id.in_(ids)))}

    # (pool) the work of busy states
    def _start_work(self, work: list[tuple[str, NodeRecord]]) -> None:
        """Run the nodes' work, those behind one BMC in turn with one session, the rest in parallel."""
        groups: dict[Any, list[tuple[str, NodeRecord]]] = {}
        for state, record in work:
            try:
                # deploy and undeploy run the servers layer's hooks (images, media: long) each on
                # its own, in parallel, as before
                key = None if state in ALONE else drivers.endpoint(record.driver, record.driver_info)
            except Exception:  # noqa: BLE001 - an unknown driver or odd driver_info: its work says why
                key = None
            groups.setdefault(key if key is not None else ("node", record.id), []).append((state, record))
        todo = deque(groups.values())
        for _ in range(min(self.workers, len(todo))):  # each takes the next group until none is left
            self.pool.submit(self._run_groups, todo)

    def _run_groups(self, todo: deque) -> None:
        while True:
            try:
                group = todo.popleft()
            except IndexError:
                return
            with drivers.Sessions() as sessions:
                for state, record in group:
                    out = self._run(record, state, sessions)
                    if out is not None:
                        self.writer.put(out)

    def _run(self, record: NodeRecord, state: str, sessions: drivers.Sessions) -> Outcome | None:
        """Run the work of busy `state` for one node; what it came to (None: left to the timeout)."""
        out = Outcome(record.id, state, record.driver_info)
        try:
            driver = self.driver(record, sessions)
            if WORK[state](self, record, driver, out) == WAIT:
                out.event = WAIT
        except UndercloudError as exc:
            out.event, out.error = "fail", str(exc)
        except Exception as exc:  # noqa: BLE001 - a bug must still end the busy state
            if store_busy(exc):  # not the node's fault: its state's timeout decides, if it comes to that
                log.error("node %s: the store stayed busy for %.0f s while %s; left to the state's timeout",
                          record.id, STORE_PATIENCE, state)
                return None
            err = internal_error(exc, log, f"node {record.id} {state}")
            out.event, out.error = "fail", f"{err.message} while {state}"
        if out.event == "fail":
            out.power = out.inventory = None
            out.release = False
        return out

    # The work of each busy state: (service, record, driver, outcome) -> None | WAIT; what it
    # finds (power, inventory) goes in the outcome, written with the transition.
    def _verify(self, node: NodeRecord, driver: Driver, out: Outcome) -> None:
        driver.validate()
        out.power = driver.power.get()

    @property
    def deploy_interface(self) -> DeployInterface:
        return self._deploy_interface()

    def _inspect(self, node: NodeRecord, driver: Driver, out: Outcome) -> str | None:
        for step in (self.deploy_interface.inspect_hardware, *self.inspect_steps):
            found = step(node, driver)
            if found == WAIT:
                return WAIT
            if found:
                out.inventory = found
                return None
        raise UndercloudError(f"no inspection method for driver {node.driver}: its BMC reports no inventory "
                              f"and no inspection ramdisk is configured")

    def _clean(self, node: NodeRecord, driver: Driver, out: Outcome) -> str | None:
        for step in self.clean_steps:
            if step(node, driver) == WAIT:
                return WAIT
        out.power = driver.power.get()
        return None

    def _deploy(self, node: NodeRecord, driver: Driver, out: Outcome) -> str | None:
        outcome = self.deploy_interface.deploy(node, driver)
        out.power = driver.power.get()
        return outcome

    def _undeploy(self, node: NodeRecord, driver: Driver, out: Outcome) -> str | None:
        outcome = self.deploy_interface.tear_down(node, driver)
        out.power = driver.power.get()
        out.release = True
        return outcome

    def _clean_done_event(self, node_id: str) -> str:
        with self.store.session() as s:
            n = s.get(Node, node_id)
            return "done-manual" if n is not None and n.target_state == states.MANAGEABLE else "done"

    def apply_inventory(self, node_id: str, inv: dict) -> None:
        """Merge what inspection found: properties, and ports for new MACs."""
        with self.store.session() as s:
            s.add(NodeEvent(**self._apply_inventory(s, node_id, inv)))

    def _apply_inventory(self, s, node_id: str, inv: dict) -> dict:
        """Within `s`: every MAC checked before anything is written (a refusal leaves nothing);
        returns the inspection's event row."""
        n = s.get(Node, node_id)
        have = {m for m in self._macs(s, [node_id]).get(node_id, [])}
        new = []
        for mac in inv.get("macs", []):
            mac = mac.lower()
            if mac in have or mac in new:
                continue
            owner = s.get(Port, mac)
            if owner is not None:
                raise UndercloudError(f"inspection found MAC {mac}, which belongs to node {owner.node_id}")
            new.append(mac)
        props = dict(n.properties or {})
        for key in ("cpus", "memory_mb", "local_gb", "cpu_arch"):
            if inv.get(key) is not None:
                props[key] = inv[key]
        n.properties = props
        s.add_all(Port(address=mac, node_id=node_id) for mac in new)
        found = ", ".join(f"{k}={inv[k]}" for k in ("cpus", "memory_mb", "local_gb", "cpu_arch") if inv.get(k))
        return {"node_id": node_id, "at": time.time(), "kind": "inspect",
                "message": f"found {found}; MACs {inv.get('macs', [])}"}

    def callback(self, ident: str, ok: bool = True, error: str | None = None,
                 inventory: dict | None = None) -> dict:
        """An agent reports that the work a node waits for finished (or failed)."""
        with self.store.session() as s:
            n = self._find(s, ident)
            state, node_id = n.provision_state, n.id
        if state not in states.WAIT:
            raise Conflict(f"node {ident} is not waiting for a call-back (state '{state}')")
        if ok and inventory and state == states.INSPECT_WAIT:
            try:
                self.apply_inventory(node_id, inventory)
            except UndercloudError as exc:
                ok, error = False, str(exc)
        if not ok:
            event = "fail"
        elif state == states.CLEAN_WAIT:
            event = self._clean_done_event(node_id)
        else:
            event = "done"
        new = self._fire(node_id, event, expect=state, error=(error or "failed") if not ok else None)
        if new is None:
            raise Conflict(f"node {ident} left state '{state}' meanwhile")
        return self.get(node_id)

    # ------------------------------------------------------------ power & boot
    def driver(self, node, sessions: drivers.Sessions | None = None) -> Driver:
        """`node`'s driver (a NodeRecord, or a row with its `driver` and `driver_info`), given
        what this service knows (its clouds): the drivers of this service's nodes are made here."""
        return drivers.get(node.driver, node.driver_info, sessions, cloud_config=self.cloud_config)

    def _driver_for_action(self, ident: str, what: str) -> tuple[NodeRecord, Driver]:
        with self.store.session() as s:
            n = self._find(s, ident)
            if n.provision_state in states.BUSY:
                raise Conflict(f"node {n.name or n.id} is busy ({n.provision_state}); {what} must wait")
            record = self._record(s, n)
        return record, self.driver(record)

    def set_power(self, ident: str, action: str) -> dict:
        if action not in drivers.POWER_ACTIONS:
            raise InvalidInput(f"unknown power action {action!r} (one of: {', '.join(drivers.POWER_ACTIONS)})")
        record, driver = self._driver_for_action(ident, f"power {action}")
        try:
            driver.power.set(action)
            state = driver.power.get()
        except DriverError as exc:
            raise DriverError(drivers.scrub(str(exc), record.driver_info)) from None
        self._store_power(record.id, state, f"power {action} -> {state}")
        return self.get(record.id)

    def set_boot_device(self, ident: str, device: str, persistent: bool = False) -> dict:
        if device not in drivers.BOOT_DEVICES:
            raise InvalidInput(f"unknown boot device {device!r} (one of: {', '.join(drivers.BOOT_DEVICES)})")
        record, driver = self._driver_for_action(ident, "setting the boot device")
        try:
            driver.management.set_boot_device(device, persistent)
        except DriverError as exc:
            raise DriverError(drivers.scrub(str(exc), record.driver_info)) from None
        with self.store.session() as s:
            s.add(NodeEvent(node_id=record.id, kind="boot",
                            message=f"boot device {device} ({'persistent' if persistent else 'next boot only'})"))
        return self.get(record.id)

    def record_power(self, node_id: str, driver: Driver) -> None:
        """Store what the BMC reports now (after work outside the state machine changed it)."""
        self._store_power(node_id, driver.power.get())

    def _store_power(self, node_id: str, state: str, message: str | None = None) -> None:
        patient(self._write_power, node_id, state, message)

    def _write_power(self, node_id: str, state: str, message: str | None) -> None:
        with self.store.session() as s:
            s.execute(update(Node).where(Node.id == node_id).values(power_state=state, power_sync_failures=0))
            if message:
                s.add(NodeEvent(node_id=node_id, kind="power", message=message))

    def set_maintenance(self, ident: str, on: bool, reason: str | None = None) -> dict:
        with self.store.session() as s:
            n = self._find(s, ident)
            n.maintenance, n.maintenance_reason = on, (reason or "set by operator") if on else None
            if not on:
                n.power_sync_failures = 0
            s.add(NodeEvent(node_id=n.id, kind="maintenance",
                            message=f"maintenance on: {n.maintenance_reason}" if on else "maintenance off"))
            node_id = n.id
        return self.get(node_id)

    # ----------------------------------------------------------- periodic work
    def sync_power(self, enforce: bool | None = None) -> dict:
        """One power-sync pass, as Ironic's conductor does it: read every BMC (in parallel),
        record drift (or, when enforcing, put the recorded state back)."""
        enforce = self.enforce_power if enforce is None else enforce
        with self._sync_lock:
            t0 = time.perf_counter()
            settled = (Node.maintenance.is_(False), Node.provision_state.not_in(states.BUSY),
                       Node.provision_state != states.ENROLL)
            cols = (Node.id, Node.driver, Node.driver_info, Node.power_state, Node.power_sync_failures)
            live = self.ring_workers()
            with self.store.session() as s:
                if self.worker_id not in live:  # a hypervisor host's worker: the others sync
                    rows = []
                elif live == {self.worker_id}:
                    rows = s.execute(select(*cols).where(*settled)).all()
                else:  # each node is synced by one worker: its owner on the ring of live workers
                    ring = HashRing(live)
                    mine = [i for i in s.scalars(select(Node.id).where(*settled)) if ring.owner(i) == self.worker_id]
                    rows = [r for k in range(0, len(mine), 500)
                            for r in s.execute(select(*cols).where(Node.id.in_(mine[k:k + 500])))]

            def read(row) -> tuple[str, str | None, str | None]:
                try:
                    return row.id, self.driver(row).power.get(), None
                except Exception as exc:  # noqa: BLE001 - any failure counts as one failed read
                    return row.id, None, drivers.scrub(str(exc), row.driver_info or {})

            by_id = {r.id: r for r in rows}
            results = list(self.sync_pool.map(read, rows, chunksize=64)) if rows else []
            drift = failed = enforced = 0
            with self.store.session() as s:
                for node_id, found, err in results:
                    row = by_id[node_id]
                    if err is not None:
                        failed += 1
                        count = (row.power_sync_failures or 0) + 1
                        vals: dict = {"power_sync_failures": count}
                        if count >= MAX_SYNC_FAILURES:
                            vals.update(maintenance=True, maintenance_reason=f"power sync failed {count} times: {err}")
                        s.execute(update(Node).where(Node.id == node_id).values(**vals))
                        continue
                    if found == row.power_state:
                        if row.power_sync_failures:
                            s.execute(update(Node).where(Node.id == node_id).values(power_sync_failures=0))
                        continue
                    if row.power_state is None:  # first reading: nothing drifted
                        s.execute(update(Node).where(Node.id == node_id).values(power_state=found))
                        continue
                    drift += 1
                    if enforce:
                        try:
                            self.driver(row).power.set(row.power_state)
                            enforced += 1
                            s.add(NodeEvent(node_id=node_id, kind="drift",
                                            message=f"power drift: BMC reported {found}, recorded "
                                                    f"{row.power_state}; put it back {row.power_state}"))
                        except Exception as exc:  # noqa: BLE001
                            s.add(NodeEvent(node_id=node_id, kind="drift", message=drivers.scrub(
                                f"power drift: could not enforce {row.power_state}: {exc}", row.driver_info)))
                        continue
                    res = s.execute(update(Node).where(Node.id == node_id, Node.power_state == row.power_state)
                                    .values(power_state=found, power_sync_failures=0))
                    if res.rowcount:
                        s.add(NodeEvent(node_id=node_id, kind="drift",
                                        message=f"power drift: recorded {row.power_state}, BMC reports {found}"))
            took = time.perf_counter() - t0
        return {"nodes": len(rows), "drift": drift, "failed": failed, "enforced": enforced, "seconds": took}

    def check_timeouts(self, now: float | None = None) -> int:
        """Fail every node that stayed in a busy or wait state beyond its timeout."""
        now = now or time.time()
        with self.store.session() as s:
            rows = s.execute(select(Node.id, Node.provision_state, Node.provision_updated_at)
                             .where(Node.provision_state.in_(list(self.timeouts)))).all()
        count = 0
        for node_id, state, since in rows:
            limit = self.timeouts[state]
            if since is not None and now - since > limit:
                if self._fire(node_id, "fail", expect=state,
                              error=f"timed out after {limit:.0f} s in state '{state}'"):
                    count += 1
        return count

    def recover_interrupted(self, at_start: bool = True) -> int:
        """Busy work whose worker stopped cannot finish (a BMC call cannot resume halfway): fail
        it. At start: this worker's own (left by its previous run) and that of dead workers;
        afterwards (every heartbeat): that of workers that stopped heart-beating."""
        live = self.live_workers()
        with self.store.session() as s:
            rows = s.execute(select(Node.id, Node.provision_state, Node.reservation)
                             .where(Node.provision_state.in_(list(states.BUSY)))).all()
        failed = 0
        for node_id, st, owner in rows:
            if owner in live and (owner != self.worker_id or not at_start):
                continue
            if owner is None and not at_start:
                continue
            who = "the undercloud service" if owner in (None, self.worker_id) else f"worker {owner}"
            failed += bool(self._fire(node_id, "fail", expect=st, error=f"interrupted: {who} stopped while {st}"))
        return failed


MAX_SYNC_FAILURES = 3

# where each verb leaves a node when its work succeeds (its target_state meanwhile)
VERB_TARGET = {"provide": states.AVAILABLE, "clean": states.MANAGEABLE, "undeploy": states.AVAILABLE,
               "manage": states.MANAGEABLE, "inspect": states.MANAGEABLE, "deploy": states.ACTIVE,
               "rebuild": states.ACTIVE}

# busy states whose work never shares a BMC session (nor waits for another node's)
ALONE = frozenset({states.DEPLOYING, states.DELETING})

# busy state -> its work
WORK: dict[str, Callable[[NodeService, NodeRecord, Driver, Outcome], str | None]] = {
    states.VERIFYING: NodeService._verify,
    states.INSPECTING: NodeService._inspect,
    states.CLEANING: NodeService._clean,
    states.DEPLOYING: NodeService._deploy,
    states.DELETING: NodeService._undeploy,
}


def new_uuid() -> str:
    return str(uuidlib.uuid4())
