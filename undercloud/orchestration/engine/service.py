"""Stack operations as the API offers them: create, update (dry run), delete, cancel,
signal, resume after a restart, and the read side (list, show, resources, events, outputs).

Each operation on a root stack runs in one thread (a `Walk` drives the whole tree); the
stack row's `operation` records what runs so that the next start of the service resumes it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from undercloud import tokens
from undercloud.errors import (
    Conflict,
    Elsewhere,
    InvalidInput,
    NotFound,
    ServiceUnavailable,
    UndercloudError,
    internal_error,
)
from undercloud.masking import MASK, Mask
from undercloud.names import NAME_MAX
from undercloud.orchestration.engine.walk import INTERNAL, Plan, Signal, StackNode, Walk, new_root_row
from undercloud.orchestration.engine.writer import Fenced, ResourceRow, Writer
from undercloud.orchestration.limits import BY_NAME, LIMITS, cut
from undercloud.orchestration.resources import registry
from undercloud.orchestration.resources.base import Plugin, StackRef
from undercloud.orchestration.services import EngineOnly, PluginServices
from undercloud.store import Store
from undercloud.store.stacks import Stack, StackEvent, StackResource
from undercloud.store.workers import Worker

log = logging.getLogger("undercloud.engine")

DEFAULT_TIMEOUT = 3600.0
STOP_WAIT = 30.0  # seconds a delete waits for the operation it supersedes to stop
RES = StackResource.__table__
STACKS = Stack.__table__
EVENTS = StackEvent.__table__
WORKERS = Worker.__table__
_STOPPED = threading.Event()  # what a fenced walk sees as its `stopping`
_STOPPED.set()


def _template_api():
    from undercloud.orchestration.template import Bundle, load

    return Bundle, load


def secrets_of(root: dict) -> Mask:
    """The texts of every hidden value of a root stack's tree, as each read masks them: those
    its operations recorded (`secrets`: parameters, environments, parents' properties alike),
    and its own hidden parameters' (a stack stored before the record was kept)."""
    from undercloud.orchestration.template.parameters import secret_texts

    given = root.get("parameters") or {}
    hidden = (root.get("operation") or {}).get("hidden") or []
    return Mask(frozenset(root.get("secrets") or ()) | secret_texts([given[n] for n in hidden if n in given]))


def _signal_error(resource: str, exc: Exception, secrets: Mask) -> Exception:
    """A plugin refusing a signal says why; a bug in it is an internal error (no values shown)."""
    if isinstance(exc, INTERNAL) and not isinstance(exc, UndercloudError):
        return internal_error(exc, log, f"signal to {resource}")
    return InvalidInput(f"signal to {resource}: {cut(secrets.text(str(exc)))}")


def iso(t: float | None) -> str | None:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t else None



INLINE_ENV = "/undercloud/inline-environment.yaml"  # a bundle key, not a file on disk


def with_environment(bundle: dict, environment: dict) -> dict:
    """The bundle with `environment` ({parameter_defaults: ...}) as its last environment,
    merged over the one an earlier update gave."""
    import yaml

    if not isinstance(environment, dict) or set(environment) - {"parameter_defaults"} \
            or not isinstance(environment.get("parameter_defaults", {}), dict):
        raise InvalidInput("only {parameter_defaults: {...}} can be given inline", "environment")
    files = dict(bundle.get("files") or {})
    try:
        before = yaml.safe_load(files.get(INLINE_ENV) or "") or {}
    except yaml.YAMLError:
        before = {}
    defaults = {**(before.get("parameter_defaults") or {}), **environment.get("parameter_defaults", {})}
    files[INLINE_ENV] = yaml.safe_dump({"parameter_defaults": defaults}, sort_keys=True)
    envs = [e for e in bundle.get("environments") or [] if e != INLINE_ENV] + [INLINE_ENV]
    return {**bundle, "files": files, "environments": envs}

class StackService:
    def __init__(self, store: Store, services: PluginServices | None = None):
        self.store = store
        # What plugins use of the undercloud (the API's Context); on its own: the store.
        self.services = services or EngineOnly(store, self)
        self.lock = threading.Lock()
        self.ops: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self.walks: dict[str, Walk] = {}  # root id -> the walk under way
        self.prepared: dict[str, Any] = {}  # root id -> the template validated by the request
        self.superseded: set[str] = set()  # root ids whose operation a delete stops
        # The last walk, for benchmarks and tests that look into it; the service keeps none (a
        # big stack's finished walk is hundreds of thousands of objects, in memory until the next).
        self.keep_last_walk = False
        self.last_walk: Walk | None = None
        self.stopping = threading.Event()  # set when the service stops: walks end at their next step
        # This process among the workers sharing the store, and who of them is alive (the
        # service sets both from store/workers.py; on its own the engine is the only one).
        self.worker_id = "local"
        self.live_workers: Callable[[], set[str]] = lambda: {self.worker_id}
        self.dead_after = 0.0  # seconds without a heartbeat after which a worker is dead
        self.takes_over = True  # False on a hypervisor host's worker: it resumes only its own
        # (worker, stack id, resource, payload, token): hands a signal to the worker whose walk
        # holds the resource (the service sets it: api/workers.py); None: refused, try later
        self.forward_signal: Callable[[str, str, str, Any, str], None] | None = None

    # -- loading ----------------------------------------------------------------------
    def _root(self, name_or_id: str) -> dict:
        with self.store.engine.connect() as conn:
            row = conn.execute(select(STACKS).where(STACKS.c.parent_id.is_(None)).where(
                (STACKS.c.name == name_or_id) | (STACKS.c.id == name_or_id))).mappings().first()
        if row is None:
            raise NotFound(f"stack {name_or_id!r} not found")
        return dict(row)

    def _tree(self, root_id: str) -> tuple[list[dict], list[ResourceRow]]:
        with self.store.engine.connect() as conn:
            stacks = [dict(r) for r in conn.execute(select(STACKS).where(STACKS.c.root_id == root_id)).mappings()]
            rows = [ResourceRow.from_store(r) for r in conn.execute(
                select(RES).where(RES.c.root_id == root_id)).mappings()]
        return stacks, rows

    def _load(self, bundle: dict, parameters: dict, name: str, stack_id: str) -> Any:
        Bundle, load = _template_api()
        return load(Bundle.from_json(bundle), parameters=parameters or {}, stack_name=name, stack_id=stack_id)

    def _hidden(self, tmpl: Any) -> list[str]:
        return sorted(n for n, p in tmpl.parameters.items() if getattr(p, "hidden", False))

    # -- operations ---------------------------------------------------------------------
    def create(self, name: str, bundle: dict, parameters: dict | None = None, *, rollback: bool = False,
               timeout: float | None = None, wait: bool = False) -> dict:
        if not name or not name[0].isalpha() or not all(c.isalnum() or c in "-_." for c in name):
            raise InvalidInput(f"stack name {name!r}: must start with a letter and hold only letters, "
                               "digits, '-', '_' and '.'")
        if len(name) > NAME_MAX:
            raise InvalidInput(f"stack name {name[:40]!r}...: {len(name)} characters, at most {NAME_MAX}")
        with self.store.engine.connect() as conn:
            if conn.execute(select(STACKS.c.id).where(STACKS.c.parent_id.is_(None))
                            .where(STACKS.c.name == name)).first():
                raise Conflict(f"stack {name!r} already exists")
        op = {"kind": "create", "rollback": rollback, "timeout": timeout or DEFAULT_TIMEOUT, "started": time.time()}
        row = new_root_row(name, bundle, parameters or {}, "", "CREATE", op)
        row["engine_id"], row["generation"] = self.worker_id, 1
        tmpl = self._load(bundle, parameters or {}, name, row["id"])  # validation before any write
        row["description"] = getattr(tmpl, "description", "") or ""
        op["hidden"] = self._hidden(tmpl)
        row["secrets"] = sorted(tmpl.secrets) or None  # masked in every read (secrets_of)
        w = Writer(self.store)
        w.insert_stack(row)
        w.event(row["id"], row, name, "OS::Heat::Stack", row["id"], "CREATE", "IN_PROGRESS", "Stack CREATE started")
        w.flush()
        self.prepared[row["id"]] = tmpl
        self._start(row["id"], wait, row["generation"])
        return self.show(row["id"])

    def update(self, name_or_id: str, bundle: dict | None, parameters: dict | None = None, *,
               rollback: bool = False, timeout: float | None = None, dry_run: bool = False, wait: bool = False,
               existing: bool = False, environment: dict | None = None, max_fail: int = 0) -> dict:
        """Update to `bundle` and `parameters`; with `existing` (Heat's PATCH), the stored
        bundle when none is given and the stored parameters with `parameters` over them.
        `environment` ({parameter_defaults}) goes after the bundle's environments (with
        `existing`, over what an earlier one gave). Up to `max_fail` group members whose
        update fails are rolled back to their previous properties one by one while the
        rest goes on (their servers' later deployments skipped); one more fails the update."""
        root = self._root(name_or_id)
        if root["status"] == "IN_PROGRESS":
            raise Conflict(f"stack {root['name']} is {root['action']}_IN_PROGRESS; wait for it or cancel it")
        if root["action"] == "DELETE":
            raise Conflict(f"stack {root['name']} is being deleted")
        if existing:
            bundle = bundle or root["bundle"]
            parameters = {**(root["parameters"] or {}), **(parameters or {})}
        if not bundle:
            raise InvalidInput("an update needs a bundle (or existing: true, to keep the stored one)", "bundle")
        if environment:
            bundle = with_environment(bundle, environment)
        tmpl = self._load(bundle, parameters or {}, root["name"], root["id"])
        if dry_run:
            return self.plan(root, bundle, parameters or {}, self._hidden(tmpl))
        if not isinstance(max_fail, int) or isinstance(max_fail, bool) or max_fail < 0:
            raise InvalidInput(f"max_fail must be a whole number of 0 or more, not {str(max_fail)[:50]!r}",
                               "max_fail")
        op = {"kind": "update", "rollback": rollback, "timeout": timeout or DEFAULT_TIMEOUT,
              "started": time.time(), "hidden": self._hidden(tmpl),
              # everything converged to the previous files: unchanged nested stacks can be skipped
              "converged": root["status"] == "COMPLETE"}
        # members rolled back within an earlier max_fail: walked again (retried) wherever they are
        carried = (root.get("operation") or {}).get("tolerated") or []
        if carried:
            op.update(converged=False, carried=carried)
        if max_fail:
            op["max_fail"] = max_fail
        root.update(prev_bundle=root["bundle"], prev_parameters=root["parameters"], bundle=bundle,
                    parameters=parameters or {}, action="UPDATE", status="IN_PROGRESS",
                    status_reason="Stack UPDATE started", operation=op, updated_at=time.time(), engine_id=self.worker_id,
                    description=getattr(tmpl, "description", "") or "",
                    # earlier values stay masked: resources and events may still hold them
                    secrets=sorted(frozenset(root.get("secrets") or ()) | tmpl.secrets) or None)
        gen = self._begin(root, "UPDATE")
        self.prepared[root["id"]] = tmpl
        self._start(root["id"], wait, gen)
        return self.show(root["id"])

    def delete(self, name_or_id: str, wait: bool = False) -> dict:
        root = self._root(name_or_id)
        self._not_elsewhere(root)
        owner = root.get("engine_id")
        if root["status"] == "IN_PROGRESS" and owner not in (None, self.worker_id) \
                and self._claim(root["id"], owner, root["generation"]) is None:  # a dead worker's: taken from it first, or lost to a taker
            raise ServiceUnavailable(f"stack {root['name']}: another worker is taking its {root['action']} over; "
                                     "try again")
        self._stop_running(root["id"])
        root = self._root(root["id"])
        op = {"kind": "delete", "timeout": DEFAULT_TIMEOUT, "started": time.time(),
              "hidden": (root.get("operation") or {}).get("hidden", [])}
        root.update(action="DELETE", status="IN_PROGRESS", status_reason="Stack DELETE started", operation=op,
                    updated_at=time.time(), engine_id=self.worker_id)
        gen = self._begin(root, "DELETE")
        self._start(root["id"], wait, gen)
        try:
            return self.show(root["id"])
        except NotFound:
            return {"id": root["id"], "stack_name": root["name"], "stack_status": "DELETE_COMPLETE"}

    def cancel(self, name_or_id: str) -> dict:
        root = self._root(name_or_id)
        self._not_elsewhere(root)
        with self.lock:
            op = self.ops.get(root["id"])
        if root["status"] != "IN_PROGRESS" or op is None:
            raise Conflict(f"stack {root['name']} has no operation in progress ({root['action']}_{root['status']})")
        if root["action"] == "DELETE":
            raise Conflict(f"stack {root['name']}: a delete cannot be cancelled")
        op[1].set()
        return self.show(root["id"])

    def _not_elsewhere(self, root: dict) -> None:
        """Refuse to touch an operation that another live worker runs (only it holds the walk)."""
        owner = root.get("engine_id")
        if root["status"] == "IN_PROGRESS" and owner not in (None, self.worker_id) and owner in self.live_workers():
            raise Elsewhere(f"stack {root['name']}: its {root['action']} runs on worker {owner}; ask that worker "
                            "(`undercloud service workers` lists them) or wait for it", owner)

    def _begin(self, root: dict, action: str) -> int:
        """Write the start of an operation (`root` as changed for it) and its event: a
        compare-and-set on the generation read with the row (one conditional UPDATE: every
        start and take-over bumps it, so it still holds only while nothing started since that
        read). Of two starts at once one wins, the other is told 409 and wrote nothing.
        Returns the operation's generation."""
        gen = int(root.get("generation") or 0)
        root["generation"] = gen + 1
        w = Writer(self.store, guard=(root["id"], gen))
        w.touch_stack(root)
        w.event(root["id"], root, root["name"], "OS::Heat::Stack", root["id"], action, "IN_PROGRESS",
                f"Stack {action} started")
        try:
            w.flush()
        except Fenced:
            raise Conflict(f"stack {root['name']}: another operation started meanwhile; nothing of this "
                           f"{action.lower()} was done (look at the stack, then try again)") from None
        return gen + 1

    def _mine(self, root_id: str, gen: int) -> dict:
        """The root row, while its operation is still this walk's (generation `gen`)."""
        root = self._root(root_id)
        if int(root.get("generation") or 0) != gen:
            raise Fenced(root_id)
        return root

    def _stop_running(self, root_id: str) -> None:
        """Stop the operation under way (a delete supersedes it: no rollback)."""
        with self.lock:
            op = self.ops.get(root_id)
            self.superseded.add(root_id)
        try:
            if op:
                op[1].set()
                op[0].join(STOP_WAIT)
                if op[0].is_alive():
                    raise Conflict(f"the operation under way did not stop within {STOP_WAIT:.0f} s; try again")
        finally:
            self.superseded.discard(root_id)

    def _start(self, root_id: str, wait: bool, gen: int) -> None:
        cancel = threading.Event()
        t = threading.Thread(target=self._run, args=(root_id, cancel, False, gen), name=f"stack-{root_id[:8]}",
                             daemon=True)
        with self.lock:
            old, old_walk = self.ops.get(root_id), self.walks.get(root_id)
        if old is not None:  # the last operation's thread, ending (it wrote its end) or fenced by this start
            if old_walk is not None:
                old_walk.stopping = _STOPPED
            old[0].join(STOP_WAIT)
        with self.lock:
            self.ops[root_id] = (t, cancel)
        t.start()
        if wait:
            t.join()

    # -- running ------------------------------------------------------------------------
    def _run(self, root_id: str, cancel: threading.Event, resuming: bool, gen: int) -> None:
        try:
            self._operate(root_id, cancel, resuming, gen)
        except Fenced:  # taken over or superseded: the new owner carries on; this walk wrote nothing more
            log.warning("stack %s: the operation of generation %d was taken over; this worker's walk stops",
                        root_id, gen)
        except Exception as exc:  # an engine bug must not leave the stack IN_PROGRESS
            # logged under an id, never with its message: it may hold SQL parameters or values
            err = internal_error(exc, log, f"operation of stack {root_id}")
            try:
                root = self._mine(root_id, gen)
                self._finish(root, "FAILED", f"Stack {root['action']} failed: {err}")
            except Fenced:
                pass
            except Exception as exc2:  # noqa: BLE001
                internal_error(exc2, log, f"recording the failure of stack {root_id}")
        finally:
            with self.lock:
                if self.ops.get(root_id, (None,))[0] is threading.current_thread():  # not a newer operation's
                    self.ops.pop(root_id, None)
                    self.walks.pop(root_id, None)

    def _operate(self, root_id: str, cancel: threading.Event, resuming: bool, gen: int) -> None:
        root = self._mine(root_id, gen)
        op = root.get("operation") or {}
        kind = op.get("kind")
        timeout = float(op.get("timeout") or DEFAULT_TIMEOUT)
        if resuming:
            timeout = max(60.0, timeout - (time.time() - float(op.get("started") or time.time())))
        if kind == "delete":
            w = self._delete_all(root, cancel, timeout, resuming)
            if w.interrupted:
                return
            if w.failure:
                self._finish(root, "FAILED", w.failure, w)
            else:
                self._mine(root_id, gen)  # still this walk's (a taker would run the same delete)
                self._purge(root_id)
            return
        if kind == "rollback":
            self._rollback(root, cancel, timeout, resuming)
            return
        previous = root.get("prev_bundle") if kind == "update" and op.get("converged") else None
        w = self._forward(root, root["bundle"], root["parameters"], cancel, timeout, resuming, previous=previous)
        if w.interrupted:
            return  # the service stops: resumed at its next start
        if w.failure is None:
            reason = f"Stack {root['action']} completed successfully"
            if w.tolerated:
                root["operation"] = {**op, "tolerated": w.tolerated}
                reason += (f"; {len(w.tolerated)} member(s) failed and were rolled back to their previous "
                           f"properties (max_fail {w.max_fail}): {'; '.join(w.tolerated)}")
                reason = w.clean(reason)
            self._finish(root, "COMPLETE", reason, w)
            return
        action = root["action"]
        failed = f"Stack {action} failed: {w.failure}"
        if not (op.get("rollback") and root_id not in self.superseded):
            self._finish(root, "FAILED", failed, w)
            return
        if w.tolerated or op.get("carried"):  # still behind after the rollback: the next update retries them
            op = {**op, "tolerated": [*op.get("carried", []), *w.tolerated]}
        if w.behind:
            op = {**op, "restore": w.behind}
        # The FAILED event and the row straight to ROLLBACK IN_PROGRESS, in one write: a client
        # polling the status never sees the operation ended (FAILED) before its rollback began.
        root.update(action="ROLLBACK", status="IN_PROGRESS", status_reason=f"rolling back: {w.failure}",
                    operation={**op, "kind": "rollback"}, updated_at=time.time())
        wr = w.writer
        wr.event(root["id"], root, root["name"], "OS::Heat::Stack", root["id"], action, "FAILED", failed)
        wr.touch_stack(root)
        wr.event(root["id"], root, root["name"], "OS::Heat::Stack", root["id"], "ROLLBACK", "IN_PROGRESS",
                 f"Stack ROLLBACK started: {w.failure}")
        wr.flush()
        self._rollback(root, threading.Event(), timeout, False)

    def _walk(self, root: dict, cancel: threading.Event, timeout: float, resuming: bool,
              plan: Plan | None = None, lazy: bool = False) -> Walk:
        if lazy:
            with self.store.engine.connect() as conn:
                stacks = [dict(r) for r in conn.execute(select(STACKS).where(STACKS.c.root_id == root["id"])).mappings()]
            rows = None
        else:
            stacks, rows = self._tree(root["id"])
        w = Walk(self.store, root, services=self.services, timeout=timeout, resuming=resuming, plan=plan,
                 cancel=cancel, stopping=self.stopping)
        stacks = [root if s["id"] == root["id"] else s for s in stacks]
        w.load_rows(stacks, rows)
        self.walks[root["id"]] = w
        if self.keep_last_walk:
            self.last_walk = w
        return w

    def _forward(self, root: dict, bundle: dict, params: dict, cancel: threading.Event, timeout: float,
                 resuming: bool, plan: Plan | None = None, previous: dict | None = None) -> Walk:
        """Walk the tree to `bundle`; `previous` is the bundle everything converged to before
        (None when unknown), which lets unchanged nested stacks be skipped."""
        w = self._walk(root, cancel, timeout, resuming, plan, lazy=True)
        from undercloud.orchestration.template.bundle import same_meaning  # as _template_api: when used

        w.same_files = previous is not None and same_meaning(bundle, previous)
        tmpl = self.prepared.pop(root["id"], None) if plan is None and bundle is root.get("bundle") else None
        if tmpl is None:
            tmpl = self._load(bundle, params, root["name"], root["id"])
        node = StackNode(root, tmpl, w.rows_for(root["id"]))
        w.add_stack(node)
        w.drive()
        if w.failure is None and not w.interrupted:
            w.delete_tasks(w.cleanup_rows(w.stacks))
            w.drive()
        return w

    def _delete_all(self, root: dict, cancel: threading.Event, timeout: float, resuming: bool) -> Walk:
        w = self._walk(root, cancel, timeout, resuming)
        pairs = [(w.stack_rows[r.stack_id], r) for rs in w.rows_by_stack.values() for r in rs
                 if r.stack_id in w.stack_rows]
        w.delete_tasks(pairs)
        w.drive()
        return w

    def _rollback(self, root: dict, cancel: threading.Event, timeout: float, resuming: bool) -> None:
        if not root.get("prev_bundle"):
            # A create rolls back to nothing.
            w = self._delete_all(root, cancel, timeout, resuming)
        else:
            self._unreplace(root)
            root = self._mine(root["id"], root["generation"])
            root.update(bundle=root["prev_bundle"], parameters=root["prev_parameters"])
            w = self._forward(root, root["prev_bundle"], root["prev_parameters"], cancel, timeout, True)
        if w.interrupted:
            return
        root = self._mine(root["id"], root["generation"]) if w.failure else root
        if w.failure:
            self._finish(root, "FAILED", f"Stack ROLLBACK failed: {w.failure}", None, action="ROLLBACK",
                         clean=w.clean)
        else:
            if root.get("prev_bundle"):
                root.update(bundle=root["prev_bundle"], parameters=root["prev_parameters"])
            self._finish(root, "COMPLETE", "Stack ROLLBACK completed successfully", w, action="ROLLBACK")

    def _unreplace(self, walked: dict) -> None:
        """Before a rollback: old rows of replacements become current again (once: the
        operation records it, so a resumed rollback does not swap them back)."""
        root_id = walked["id"]
        root = self._mine(root_id, walked["generation"])
        op = dict(root.get("operation") or {})
        if op.get("unreplaced"):
            return
        _, rows = self._tree(root_id)
        by_uuid = {r.uuid: r for r in rows}
        pairs = [(r, by_uuid[r.replaced_by]) for r in rows if r.replaced_by in by_uuid]
        w = Writer(self.store, guard=(root_id, root["generation"]))
        for old, new in pairs:
            new.replaced_by, old.replaced_by = old.uuid, None
            w.touch_row(new)
            w.touch_row(old)
        root["operation"] = {**op, "unreplaced": True}
        w.touch_stack(root)
        w.flush()

    def _finish(self, root: dict, status: str, reason: str, w: Walk | None = None, action: str | None = None,
                clean: Any = None) -> None:
        action = action or root["action"]
        root.update(action=action, status=status, status_reason=reason, updated_at=time.time())
        if w is not None and status == "COMPLETE" and w.stacks:
            root["outputs"] = w.stacks[0].row.get("outputs")
        wr = w.writer if w is not None else Writer(self.store, clean=clean,
                                                   guard=(root["id"], int(root.get("generation") or 0)))
        wr.touch_stack(root)
        wr.event(root["id"], root, root["name"], "OS::Heat::Stack", root["id"], action, status, reason)
        wr.flush()

    def _purge(self, root_id: str) -> None:
        """The deleted stack's rows go, and with them the address held for it (an
        overcloud's virtual IP, `vip:<name>`: store/addresses.py)."""
        from sqlalchemy import delete

        from undercloud.store.addresses import Address, vip_holder

        with self.store.engine.begin() as conn:
            name = conn.execute(select(STACKS.c.name).where(STACKS.c.id == root_id)).scalar()
            conn.execute(delete(RES).where(RES.c.root_id == root_id))
            conn.execute(delete(EVENTS).where(EVENTS.c.root_id == root_id))
            conn.execute(delete(STACKS).where(STACKS.c.root_id == root_id))
            if name is not None:
                conn.execute(delete(Address).where(Address.holder == vip_holder(name)))

    def plan(self, root: dict, bundle: dict, params: dict, hidden: list[str] = ()) -> dict:
        p = Plan()
        previous = root["bundle"] if root["status"] == "COMPLETE" else None
        self._forward(dict(root), bundle, params, threading.Event(), DEFAULT_TIMEOUT, False, plan=p,
                      previous=previous)
        # the properties hold hidden values (stored ones and the update's own): masked as reads mask them
        from undercloud.orchestration.template.parameters import secret_texts

        mask = Mask(secrets_of(root).order + tuple(secret_texts([params[n] for n in hidden if n in params])))
        return {"stack_name": root["name"], "dry_run": True, **mask.value(p.as_dict())}

    def resume_all(self) -> list[str]:
        """At service start: continue every operation this worker's previous run, a dead worker
        or a store older than workers left IN_PROGRESS (those resumed too often end FAILED
        instead); returns the ids of those resumed."""
        return self.take_over(at_start=True)

    def take_over(self, at_start: bool = False) -> list[str]:
        """Continue the operations whose worker stopped heart-beating (called every heartbeat).
        Each is claimed by one conditional UPDATE of its row: of two workers taking over the
        same stack, one wins; the walk resumes from what the dead one wrote."""
        live = self.live_workers()
        with self.store.engine.connect() as conn:
            rows = conn.execute(select(STACKS.c.id, STACKS.c.engine_id, STACKS.c.generation)
                                .where(STACKS.c.parent_id.is_(None)).where(STACKS.c.status == "IN_PROGRESS")).all()
        resumed = []
        for sid, owner, seen in rows:
            if owner == self.worker_id or owner is None:
                if not at_start:
                    continue  # this worker's own (its thread may be starting), or taken at a start
            elif owner in live or not self.takes_over:
                continue
            with self.lock:
                if sid in self.ops:
                    continue
            gen = self._claim(sid, owner, seen)
            if gen is None or not self._count_resume(sid, gen):
                continue
            resumed.append(sid)
            if owner in (None, self.worker_id):
                log.info("resuming the interrupted operation of stack %s", sid)
            else:
                log.warning("taking over the operation of stack %s from worker %s (no heartbeat)", sid, owner)
            cancel = threading.Event()
            t = threading.Thread(target=self._run, args=(sid, cancel, True, gen), name=f"stack-{sid[:8]}",
                                 daemon=True)
            with self.lock:
                self.ops[sid] = (t, cancel)
            t.start()
        return resumed

    def fence(self) -> list[str]:
        """Stop the walks whose operation another worker took over (this one looked dead: its
        heartbeats did not reach the store in time). They end at their next step as at a
        service stop, finishing nothing; the taker carries on. Called every heartbeat."""
        with self.lock:
            # not dry runs: they run no operation
            running = {sid: w.writer.guard for sid, w in self.walks.items() if sid in self.ops}
        if not running:
            return []
        with self.store.engine.connect() as conn:
            owners = {sid: (owner, gen) for sid, owner, gen in conn.execute(
                select(STACKS.c.id, STACKS.c.engine_id, STACKS.c.generation).where(STACKS.c.id.in_(list(running))))}
        lost = [sid for sid, guard in running.items() if sid in owners and (
            owners[sid][0] not in (None, self.worker_id) or (guard is not None and guard[1] != owners[sid][1]))]
        for sid in lost:
            with self.lock:
                walk = self.walks.get(sid)
            if walk is not None:
                log.warning("stack %s: worker %s took its operation over; this worker's walk stops", sid,
                            owners[sid][0])
                walk.stopping = _STOPPED
        return lost

    def _claim(self, root_id: str, owner: str | None, seen: int) -> int | None:
        """Take the operation of `root_id` from `owner` (read with generation `seen`), unless
        it moved on or (for another worker) beat again meanwhile: the check and the write are
        one statement, which bumps the generation (fencing the walk it takes over). Returns
        the new generation, None when lost."""
        stmt = STACKS.update().where(STACKS.c.id == root_id).where(STACKS.c.status == "IN_PROGRESS") \
            .where(STACKS.c.generation == seen)
        if owner is None:
            stmt = stmt.where(STACKS.c.engine_id.is_(None))
        else:
            stmt = stmt.where(STACKS.c.engine_id == owner)
            if owner != self.worker_id and self.dead_after:
                beating = select(WORKERS.c.id).where(WORKERS.c.id == owner).where(
                    WORKERS.c.heartbeat_at >= time.time() - self.dead_after)
                stmt = stmt.where(~beating.exists())
        with self.store.engine.begin() as conn:
            won = conn.execute(stmt.values(engine_id=self.worker_id, generation=seen + 1)).rowcount == 1
        return seen + 1 if won else None

    def _count_resume(self, root_id: str, gen: int) -> bool:
        """Note one more resume of the operation; past the limit it ends FAILED instead (an
        operation that dies with the service each time must not take every start with it)."""
        try:
            root = self._mine(root_id, gen)
            op = dict(root.get("operation") or {})
            resumes = int(op.get("resumes") or 0) + 1
            if resumes > LIMITS.resumes:
                self._finish(root, "FAILED", f"Stack {root['action']} failed: interrupted by {resumes - 1} "
                             f"restarts of the undercloud service without finishing; not resumed again (set "
                             f"{BY_NAME['resumes'].env} to allow more)")
                return False
            root["operation"] = {**op, "resumes": resumes}
            w = Writer(self.store, guard=(root_id, gen))
            w.touch_stack(root)
            w.flush()
            return True
        except Fenced:  # taken by another worker meanwhile
            return False

    def stop(self, wait: float = 5.0) -> None:
        """At service stop: running operations end at their next step, their progress written;
        the next start resumes them."""
        self.stopping.set()
        with self.lock:
            ops = list(self.ops.values())
        deadline = time.monotonic() + wait
        for t, _ in ops:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def wait(self, name_or_id: str, timeout: float | None = None) -> None:
        root = self._root(name_or_id)
        with self.lock:
            op = self.ops.get(root["id"])
        if op:
            op[0].join(timeout)

    # -- signals --------------------------------------------------------------------------
    def signal(self, stack_id: str, resource: str, payload: Any, token: str | None = None,
               forwarded: bool = False) -> None:
        """Deliver a signal to a resource (wait condition handles, deployments). One for a walk
        that another worker runs is forwarded to it (once: `forwarded` marks a forwarded one)."""
        with self.store.engine.connect() as conn:
            row = conn.execute(select(RES).where(RES.c.stack_id == stack_id).where(RES.c.name == resource)
                               .where(RES.c.replaced_by.is_(None))).mappings().first()
            srow = conn.execute(select(STACKS).where(STACKS.c.id == stack_id)).mappings().first()
        if row is None or srow is None:
            raise NotFound(f"resource {resource!r} not found in stack {stack_id}")
        row = ResourceRow.from_store(row)
        if token is not None and not tokens.same(token, str((row.data or {}).get("token") or "")):
            raise NotFound(f"resource {resource!r} not found in stack {stack_id}")
        # A running walk owns the live plugin: hand it the signal there.
        with self.lock:
            walk = self.walks.get(srow["root_id"])
        if walk is not None:
            done = threading.Event()
            errors: list[Exception] = []
            walk.inbox.put(Signal(stack_id, resource, payload, done, errors))
            walk.wake.set()
            if done.wait(30) and not errors:
                return
            if errors and not isinstance(errors[0], LookupError):
                raise _signal_error(resource, errors[0], Mask(walk.secrets))
        else:
            root = self._root(srow["root_id"])
            owner = root.get("engine_id")
            if self.forward_signal and token and not forwarded and root["status"] == "IN_PROGRESS" \
                    and owner not in (None, self.worker_id) and owner in self.live_workers():
                self.forward_signal(owner, stack_id, resource, payload, token)  # its walk holds the plugin
                return
            self._not_elsewhere(root)  # no way to reach that walk: the sender tries again later
        cls = registry.get(row.type) or Plugin
        p = cls(name=row.name, uuid=row.uuid, stack=StackRef(srow["id"], srow["name"], srow["root_id"]),
                properties=row.properties or {}, data=dict(row.data or {}), physical_id=row.physical_id)
        try:
            p.signal(payload)
        except Exception as exc:
            raise _signal_error(resource, exc, secrets_of(self._root(srow["root_id"]))) from None
        row.data = p.data
        w = Writer(self.store)
        w.touch_row(row)
        w.event(srow["root_id"], dict(srow), row.name, row.type, row.physical_id, "SIGNAL",
                "COMPLETE", "Signal received")
        w.flush()

    # -- reading --------------------------------------------------------------------------
    def software_config(self, config_id: str, types: tuple[str, ...]) -> dict | None:
        """The software config a resource of one of `types`, in any stack, holds under the
        physical id `config_id` (a config passed down to a nested stack as a parameter)."""
        with self.store.session() as s:
            row = s.execute(select(RES.c.attributes).where(RES.c.physical_id == config_id,
                                                           RES.c.type.in_(types))).first()
        return (row.attributes or {}).get("software_config") if row is not None else None

    def list(self) -> list[dict]:
        with self.store.engine.connect() as conn:
            rows = conn.execute(select(STACKS).where(STACKS.c.parent_id.is_(None))
                                .order_by(STACKS.c.created_at)).mappings().all()
        return [self._summary(dict(r)) for r in rows]

    def _summary(self, r: dict) -> dict:
        return {"id": r["id"], "stack_name": r["name"], "stack_status": f"{r['action']}_{r['status']}",
                "creation_time": iso(r["created_at"]), "updated_time": iso(r["updated_at"])}

    def show(self, name_or_id: str) -> dict:
        r = self._root(name_or_id)
        hidden = set((r.get("operation") or {}).get("hidden", []))
        secrets = secrets_of(r)
        params = {k: (MASK if k in hidden else secrets.value(v)) for k, v in (r.get("parameters") or {}).items()}
        from sqlalchemy import func

        with self.store.engine.connect() as conn:
            counts = dict(conn.execute(select(RES.c.status, func.count()).where(RES.c.root_id == r["id"])
                                       .where(RES.c.replaced_by.is_(None)).group_by(RES.c.status)).all())
            busy_leaves = conn.execute(select(func.count()).where(RES.c.root_id == r["id"])
                                       .where(RES.c.status == "IN_PROGRESS").where(RES.c.nested_id.is_(None))).scalar()
            busy = conn.execute(select(RES.c.name, STACKS.c.path).join(STACKS, STACKS.c.id == RES.c.stack_id)
                                .where(RES.c.root_id == r["id"]).where(RES.c.status == "IN_PROGRESS")
                                .where(RES.c.nested_id.is_(None)).order_by(RES.c.id).limit(20)).all()
        total = sum(counts.values())
        complete, failed = counts.get("COMPLETE", 0), counts.get("FAILED", 0)
        in_progress = [f"{path}.{name}" if path else name for name, path in busy]
        # outputs too (Heat shows them as they are): a value built from a hidden one is masked
        outputs = [{"output_key": k, "output_value": secrets.value(v.get("value")),
                    "description": v.get("description", ""),
                    **({"output_error": secrets.text(v["error"])} if v.get("error") else {})}
                   for k, v in (r.get("outputs") or {}).items()]
        return {**self._summary(r), "stack_status_reason": secrets.text(r["status_reason"] or ""),
                "description": r["description"],
                "parameters": params, "outputs": outputs,
                "progress": {"total": total, "complete": complete, "failed": failed,
                             "in_progress": in_progress, "in_progress_count": busy_leaves}}

    def resources(self, name_or_id: str, nested_depth: int = 0) -> list[dict]:
        r = self._root(name_or_id)
        with self.store.engine.connect() as conn:
            stacks = {s["id"]: dict(s) for s in conn.execute(select(STACKS).where(STACKS.c.root_id == r["id"])).mappings()}
            rows = conn.execute(select(RES).where(RES.c.root_id == r["id"]).where(RES.c.replaced_by.is_(None))
                                .order_by(RES.c.id)).mappings().all()
        out, secrets = [], secrets_of(r)
        for x in rows:
            st = stacks.get(x["stack_id"]) or {}
            depth = st.get("path", "").count(".") + 1 if st.get("path") else 0
            if depth > nested_depth:
                continue
            out.append({"resource_name": x["name"], "path": f"{st['path']}.{x['name']}" if st.get("path") else x["name"],
                        "physical_resource_id": secrets.text(x["physical_id"] or ""), "resource_type": x["type"],
                        "resource_status": f"{x['action']}_{x['status']}", "updated_time": iso(x["updated_at"]),
                        "stack_name": st.get("name", "")})
        return out

    def resource(self, name_or_id: str, path: str) -> dict:
        r = self._root(name_or_id)
        stack_path, _, name = path.rpartition(".")
        with self.store.engine.connect() as conn:
            st = conn.execute(select(STACKS).where(STACKS.c.root_id == r["id"]).where(STACKS.c.path == stack_path)).mappings().first()
            x = None
            if st is not None:
                x = conn.execute(select(RES).where(RES.c.stack_id == st["id"]).where(RES.c.name == name)
                                 .where(RES.c.replaced_by.is_(None))).mappings().first()
        if x is None:
            raise NotFound(f"resource {path!r} not found in stack {r['name']}")
        secrets = secrets_of(r)
        attrs = secrets.value(dict(x["attributes"] or {}))
        for key in (registry.get(x["type"]) or Plugin).secret_attributes & set(attrs):
            attrs[key] = MASK
        return {"resource_name": x["name"], "path": path,
                "physical_resource_id": secrets.text(x["physical_id"] or ""),
                "resource_type": x["type"], "resource_status": f"{x['action']}_{x['status']}",
                "resource_status_reason": secrets.text(x["status_reason"] or ""), "attributes": attrs,
                "properties": secrets.value(x["properties"]), "requires": x["requires"],
                "creation_time": iso(x["created_at"]),
                "updated_time": iso(x["updated_at"]), "nested_stack_id": x["nested_id"], "stack_id": st["id"]}

    def events(self, name_or_id: str, after: int = 0, limit: int = 1000, nested_depth: int | None = None) -> list[dict]:
        r = self._root(name_or_id)
        with self.store.engine.connect() as conn:
            rows = conn.execute(select(EVENTS).where(EVENTS.c.root_id == r["id"]).where(EVENTS.c.id > after)
                                .order_by(EVENTS.c.id).limit(limit)).mappings().all()
        # reasons were masked when written; masked again here, with every hidden value known now
        out, secrets = [], secrets_of(r)
        for e in rows:
            if nested_depth is not None and e["path"] and e["path"].count(".") + 1 > nested_depth:
                continue
            # a stack's own events (root or nested) carry the stack's name, a resource's its path
            own = not e["path"] or (e["resource_type"] == "OS::Heat::Stack" and e["physical_id"] == e["stack_id"])
            out.append({"id": e["id"], "resource_name": e["resource_name"] if own else f"{e['path']}.{e['resource_name']}",
                        "stack_name": e["stack_name"],
                        "resource_type": e["resource_type"],
                        "physical_resource_id": secrets.text(e["physical_id"] or ""),
                        "resource_status": f"{e['action']}_{e['status']}",
                        "resource_status_reason": secrets.text(e["reason"] or ""),
                        "event_time": iso(e["time"])})
        return out

    def outputs(self, name_or_id: str) -> list[dict]:
        return self.show(name_or_id)["outputs"]
