"""The graph walk: one thread per stack operation drives every resource of the whole tree
(nested stacks included) through its plugin, without a thread per resource.

A walk has two phases. The forward phase visits the new definition of every resource in
dependency order (create, update in place, replace, or leave alone); nested stacks join the
same walk as their parent resource starts. The cleanup phase deletes, in reverse dependency
order, what the new definition no longer has: removed resources, replaced ones, and whole
nested stacks below them. A stack delete is a cleanup phase of everything.

State is in memory (resource rows as `ResourceRow`, stack rows as dicts) and written by
`Writer` in batches: before any plugin call of a scheduling round the IN_PROGRESS rows are
flushed (write-ahead: a plugin always finds its `uuid` persisted), the rest every
FLUSH_EVERY seconds and at the end.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
import uuid as uuidlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from undercloud.errors import UndercloudError, internal_error
from undercloud.masking import Mask
from undercloud.names import fit_name
from undercloud.orchestration.engine.writer import RES, Fenced, ResourceRow, Writer
from undercloud.orchestration.limits import LIMITS, TooLarge, cut, exceeded, value_size
from undercloud.orchestration.resources import registry
from undercloud.orchestration.resources.base import (
    HELD_BACK,
    NestedStackPlugin,
    NestedView,
    Plugin,
    ResourceFailure,
    StackRef,
    with_defaults,
)
from undercloud.orchestration.resources.group import ResourceGroup
from undercloud.orchestration.resources.nested import TemplateResource
from undercloud.orchestration.template.parameters import secret_texts

log = logging.getLogger("undercloud.engine")

FLUSH_EVERY = 0.25
POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="uc-plugin")


class Action(StrEnum):
    """A resource's or stack's action, as stored and shown (the values are the store's)."""

    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    ROLLBACK = "ROLLBACK"
    SIGNAL = "SIGNAL"  # events only


class Status(StrEnum):
    """Where a resource or stack is within its action, as stored and shown."""

    INIT = "INIT"
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class TaskState(StrEnum):
    """Where a task of this walk is (in memory only)."""

    WAIT = "wait"  # for what it needs
    RUN = "run"  # ready or in a plugin call
    POLLING = "polling"  # its next check is scheduled
    DONE = "done"
    FAILED = "failed"


ENDED = frozenset({TaskState.DONE, TaskState.FAILED})


class Decision(StrEnum):
    """What a walk does with a resource of the new definition (`ResTask.decide`)."""

    CREATE = "create"
    UPDATE = "update"  # in place
    REPLACE = "replace"  # a new one, then the old one deleted (or the other way round)
    RESUME = "resume"  # an action a restart of the service interrupted
    NESTED = "nested"  # unchanged itself; its nested stack may not be
    UNCHANGED = "unchanged"


class Phase(StrEnum):
    """Where a task is within its action."""

    NONE = ""
    UPDATE = "update"  # an update in place under way
    PREDELETE = "predelete"  # a delete-before-create replace deleting the old one first
    NESTED_QUIET = "nested-quiet"  # walking a nested stack; no event unless something in it changes
    REVERT = "revert"  # a max_fail member going back to its previous properties


@dataclass(frozen=True, slots=True)
class CallDone:
    """On the inbox: a blocking plugin call finished in the pool, with its result or what it raised."""

    task: Any  # ResTask | DelTask
    poll: bool  # a check_complete, not the action's start
    result: Any = None
    exc: BaseException | None = None


@dataclass(frozen=True, slots=True)
class Signal:
    """On the inbox: a signal for a resource of the running walk (`StackService.signal`);
    `done` is set once it is applied, `errors` then holds what refused it."""

    stack_id: str
    name: str
    payload: Any
    done: threading.Event
    errors: list[Exception]


def plugin_class(rtype: str, template_file: str | None = None) -> type[Plugin]:
    if template_file:
        return TemplateResource
    cls = registry.get(rtype)
    if cls is None:
        # A type known when it was created but whose plugin is gone: treat as a no-op.
        return Plugin
    return cls


# Failures that are bugs or the store's (their messages may hold values: SQL parameters, resolved
# properties, hidden parameters): logged under an id and shown as "internal error <id>". Any other
# exception of a plugin fails its resource with its message (hidden values masked, cut to a line).
INTERNAL = (SQLAlchemyError, LookupError, TypeError, AttributeError, NameError, AssertionError,
            ArithmeticError, MemoryError, RecursionError, UnicodeError)


def describe(exc: BaseException, what: str) -> str:
    if isinstance(exc, INTERNAL) and not isinstance(exc, UndercloudError | ResourceFailure):
        return str(internal_error(exc, log, what))
    return str(exc) or type(exc).__name__


def oversize(value: Any, what: str) -> str | None:
    """The message for a value over the value limit, else None."""
    try:
        value_size(value)
    except TooLarge as exc:
        return exceeded("value_chars", f"the length of {what} in characters", exc.args[0])
    return None


def new_row(stack: StackNode, name: str, rtype: str, action: str, reason: str = "") -> ResourceRow:
    now = time.time()
    return ResourceRow(uuid=str(uuidlib.uuid4()), stack_id=stack.row["id"], root_id=stack.row["root_id"],
                       name=name, type=rtype, action=action, status=Status.IN_PROGRESS, status_reason=reason,
                       created_at=now, updated_at=now)


def is_group_member(task: ResTask) -> bool:
    parent = task.stack.parent_task
    return parent is not None and issubclass(plugin_class(parent.rd.type, parent.rd.template_file), ResourceGroup)


class StackNode:
    """One stack of the tree in this walk: its template, stored rows and progress."""

    def __init__(self, row: dict, tmpl: Any, rows: list[ResourceRow], parent_task: ResTask | None = None):
        self.row = row
        self.tmpl = tmpl
        self.parent_task = parent_task
        self.current: dict[str, ResourceRow] = {}  # name -> row in use
        self.replaced: list[ResourceRow] = []      # old rows of replacements, deleted at cleanup
        self.refs: dict[str, str] = {}     # reference id / physical id -> name (find_peer in O(1))
        for r in rows:
            if r.replaced_by:
                self.replaced.append(r)
            else:
                self.current[r.name] = r
                self.index(r)
        self.tasks: dict[str, ResTask] = {}
        self.remaining = 0
        self.changed = False
        self.failed = False
        self.announced = False  # its IN_PROGRESS event of this operation is written

    def index(self, row: ResourceRow) -> None:
        for key in (row.ref, row.physical_id):
            if isinstance(key, str):
                self.refs[key] = row.name

    @property
    def ref(self) -> StackRef:
        return StackRef(self.row["id"], self.row["name"], self.row["root_id"], self.row["path"])

    def child_path(self, name: str) -> str:
        return f"{self.row['path']}.{name}" if self.row["path"] else name


class Resolver:
    """Runtime values for a stack's snippets: reference ids and stored attributes."""

    def __init__(self, stack: StackNode, plan: Plan | None = None):
        self.stack = stack
        self.plan = plan
        self.used_refs: set[str] = set()
        self.used_attrs: set[str] = set()

    def get_resource(self, name: str) -> Any:
        self.used_refs.add(name)
        row = self.stack.current.get(name)
        return row.ref if row and row.ref is not None else None

    def get_attr(self, name: str, attr: str, path: list) -> Any:
        self.used_attrs.add(name)
        row = self.stack.current.get(name)
        if not row or row.attributes is None:
            return None
        cls = plugin_class(row.type, "nested" if row.nested_id and not registry.get(row.type) else None)
        if attr is None:  # get_attr [name] alone: every attribute
            return dict(row.attributes)
        return cls.resolve_attribute(row.attributes, attr, list(path or []))


class Plan:
    """What an update would do (dry run): paths by action."""

    def __init__(self) -> None:
        self.actions: dict[str, list[str]] = {"create": [], "update": [], "replace": [], "delete": []}
        self.unchanged = 0
        self.changed_nodes: set[tuple[str, str]] = set()  # (stack id, name): attributes may change
        self.new_refs: set[tuple[str, str]] = set()       # references change (created, replaced)
        # path -> {type, before, after}: the resolved properties of a plain resource (not a
        # nested stack) this update would create or change, as the walk would hand its plugin
        self.changes: dict[str, dict] = {}

    def add(self, kind: str, path: str, note: str = "") -> None:
        self.actions[kind].append(path + (f" ({note})" if note else ""))

    def as_dict(self) -> dict:
        return {**{k: sorted(v) for k, v in self.actions.items()}, "unchanged": self.unchanged,
                "changes": dict(sorted(self.changes.items()))}


class ResTask:
    """The forward action on one resource of the new definition."""

    __slots__ = ("w", "stack", "name", "rd", "needs", "waiting", "dependents", "state", "action",
                 "row", "old_row", "plugin", "props", "metadata", "update_policy", "deadline", "child", "started",
                 "phase", "resume", "old_props", "old_metadata", "failed_with")

    def __init__(self, w: Walk, stack: StackNode, name: str, rd: Any, needs: set[str]):
        self.w, self.stack, self.name, self.rd, self.needs = w, stack, name, rd, needs
        self.waiting = 0
        self.dependents: list[ResTask] = []
        self.state = TaskState.WAIT
        self.action = ""
        self.row: ResourceRow | None = stack.current.get(name)
        self.old_row: ResourceRow | None = None
        self.plugin: Plugin | None = None
        self.props: dict = {}
        self.metadata: Any = None
        self.update_policy: Any = {}
        self.deadline = 0.0
        self.child: StackNode | None = None
        self.started = 0.0
        self.phase = Phase.NONE
        self.resume = False
        self.old_props: dict = {}
        self.old_metadata: Any = None
        self.failed_with = ""  # a tolerated failure this task rolls back from (max_fail)

    @property
    def path(self) -> str:
        return self.stack.child_path(self.name)

    # -- decide -----------------------------------------------------------------------
    def begin(self) -> bool:
        """Resolve and decide; returns True when a plugin call follows (write-ahead flush)."""
        w, stack, rd = self.w, self.stack, self.rd
        resolver = Resolver(stack, w.plan)
        try:
            props = stack.tmpl.resolve(rd.properties or {}, resolver) or {}
            metadata = stack.tmpl.resolve(rd.metadata, resolver) if rd.metadata else None
            # get_param in update_policy (max_batch_size: {get_param: ...}), as Heat allows
            self.update_policy = stack.tmpl.resolve(rd.update_policy, resolver) if rd.update_policy else {}
        except Exception as exc:  # a function that cannot resolve at runtime
            self.fail_early(f"resources.{self.name}.properties: {describe(exc, 'resolving ' + self.path)}")
            return False
        # what is stored and handed to plugins is bounded, whatever functions made it
        too_big = oversize(props, "its properties") or (metadata is not None and oversize(metadata, "its metadata"))
        if too_big:
            self.fail_early(f"resources.{self.name}: {too_big}")
            return False
        cls = plugin_class(rd.type, rd.template_file)
        self.props = with_defaults(cls.properties_schema, props if isinstance(props, dict) else {})
        self.metadata = metadata
        row = self.row
        restore = w.restore.get(row.uuid) if row is not None and w.restore else None
        if restore is not None and is_group_member(self):
            # rolled back within an earlier max_fail and changed by the update that failed:
            # what it had then, not the previous definition (the one it failed on)
            self.props, self.metadata = with_defaults(cls.properties_schema, restore[0]), restore[1]
        decision, note = self.decide(cls, resolver)
        if w.plan is not None:
            return self.plan_step(decision, note, cls)
        return self.apply_decision(decision, note, cls, restore)

    def decide(self, cls: type[Plugin], resolver: Resolver) -> tuple[Decision, str]:
        """What this walk does with the resource, and why (the note of a replace or update)."""
        w, row, rd = self.w, self.row, self.rd
        if row is None:
            return Decision.CREATE, ""
        old = row.properties or {}
        if row.status == Status.IN_PROGRESS and row.action in (Action.CREATE, Action.UPDATE) and w.resuming:
            return Decision.RESUME, ""
        if row.type != rd.type:
            return Decision.REPLACE, f"type {row.type} -> {rd.type}"
        if row.status != Status.COMPLETE and row.action not in (Action.UPDATE, Action.ROLLBACK) and not row.nested_id:
            # never completed (or half deleted): make a new one
            return Decision.REPLACE, f"was {row.action}_{row.status}"
        if row.status != Status.COMPLETE:
            # a failed update (or a nested stack that failed): converge it in place
            return Decision.UPDATE, f"was {row.action}_{row.status}"
        if old != self.props or row.rsrc_metadata != self.metadata:
            changed = {k for k in set(old) | set(self.props) if old.get(k) != self.props.get(k)}
            probe = cls(name=self.name, uuid=row.uuid, stack=self.stack.ref, properties=self.props,
                        data=dict(row.data or {}), physical_id=row.physical_id)
            schema = cls.properties_schema
            in_place = cls.update_any or all(k in schema and schema[k].update_allowed for k in changed)
            if in_place and not probe.needs_replace(changed, old):
                return Decision.UPDATE, ""
            return Decision.REPLACE, "changed: " + ", ".join(sorted(changed))
        if w.plan is not None:
            # its inputs may change: attributes of anything changing, references of
            # anything created or replaced (an update in place keeps the reference)
            sid = self.stack.row["id"]
            moved = {n for n in resolver.used_attrs if (sid, n) in w.plan.changed_nodes}
            moved |= {n for n in resolver.used_refs if (sid, n) in w.plan.new_refs}
            if moved:
                return Decision.UPDATE, "inputs from " + ", ".join(sorted(moved))
        return (Decision.NESTED if row.nested_id else Decision.UNCHANGED), ""

    def apply_decision(self, decision: Decision, note: str, cls: type[Plugin], restore: list | None) -> bool:
        """Start what `decision` says; True when a plugin call follows (write-ahead flush)."""
        w, row, stack, rd = self.w, self.row, self.stack, self.rd
        if decision == Decision.UNCHANGED:
            self.done_quiet()
            return False
        if decision == Decision.NESTED:
            child = w.stack_rows.get(row.nested_id)
            if w.same_files and not w.resuming and child is not None and child["status"] == Status.COMPLETE:
                self.done_quiet()
                return False
            self.action = Action.UPDATE
            self.phase = Phase.NESTED_QUIET
            self.old_props = dict(row.properties or {})
            return True
        if decision == Decision.RESUME:
            if not cls.resumable:
                self.action = row.action
                self.fail(f"interrupted by a restart of the undercloud service; {rd.type} cannot resume safely")
                return False
            self.action, self.resume = row.action, True
            self.old_props = dict(row.properties or {})
            return True
        if decision == Decision.UPDATE and restore is not None:
            self.action = Action.ROLLBACK
            self.old_props = dict(row.properties or {})
            self.transition(row, Action.ROLLBACK, Status.IN_PROGRESS, "back to its properties before the failed update")
            return True
        if decision == Decision.UPDATE:
            return self.start_update()
        if decision == Decision.REPLACE:
            self.old_row = row
            self.row = new_row(stack, self.name, rd.type, Action.CREATE, f"replacing {row.uuid}")
            if cls.replace_policy == "delete_before_create" and not row.nested_id:
                self.phase = Phase.PREDELETE
            self.start_create(note or "replacing")
            return True
        self.row = new_row(stack, self.name, rd.type, Action.CREATE)
        self.start_create("state changed")
        return True

    def start_update(self) -> bool:
        """An update in place; True when a plugin call follows (False: a held back member)."""
        w, row = self.w, self.row
        if w.skips(self):
            if w.nested_action != Action.ROLLBACK:  # marked as held back: a stack rollback leaves it too
                self.transition(row, Action.ROLLBACK, Status.COMPLETE, f"{HELD_BACK}: its server "
                                f"{self.props.get('server')} failed earlier in this update")
            self.done_quiet()
            return False
        self.action, self.phase = Action.UPDATE, Phase.UPDATE
        self.old_props = dict(row.properties or {})
        self.old_metadata = row.rsrc_metadata
        if row.action == Action.ROLLBACK and row.status == Status.COMPLETE and is_group_member(self):
            w.behind[row.uuid] = [self.old_props, self.old_metadata]  # what a stack rollback restores
        self.transition(row, Action.UPDATE, Status.IN_PROGRESS, "state changed")
        return True

    def plan_step(self, decision: Decision, note: str, cls: type[Plugin]) -> bool:
        w = self.w
        kind = {Decision.RESUME: "update", Decision.NESTED: None, Decision.UNCHANGED: None}.get(decision, decision)
        if kind:
            w.plan.add(kind, self.path, note)
            w.plan.changed_nodes.add((self.stack.row["id"], self.name))
            if kind in (Decision.CREATE, Decision.REPLACE):
                w.plan.new_refs.add((self.stack.row["id"], self.name))
        else:
            w.plan.unchanged += 1
        if decision == Decision.REPLACE and self.row:
            w.plan.add("delete", self.path, "replaced")
        nested = issubclass(cls, NestedStackPlugin)
        before = self.row.properties if self.row is not None else None
        if kind and not nested and before != self.props:
            w.plan.changes[self.path] = {"type": self.rd.type, "before": before, "after": self.props}
        descend = self.row is None or decision != Decision.REPLACE or not self.row.nested_id
        if note.startswith("inputs from") and descend and nested:
            # the nested stack's inputs are only known once those resources changed
            w.plan.add("update", self.path + ".*", "may change with " + note)
            descend = False
        if descend and nested:
            self.action = Action.CREATE if self.row is None else Action.UPDATE
            try:
                self.start_nested(cls, plan=True)
                return False
            except Exception as exc:  # inputs unknown until dependencies exist
                w.plan.add("create" if self.row is None else "update", self.path + ".*",
                           f"contents known once inputs exist: {exc}")
        self.state = TaskState.DONE
        w.finished(self)
        return False

    def start_create(self, reason: str) -> None:
        w, row = self.w, self.row
        self.action = Action.CREATE
        row.action, row.status, row.status_reason = Action.CREATE, Status.IN_PROGRESS, reason
        row.deletion_policy = (self.rd.deletion_policy or "Delete").capitalize()
        w.writer.insert_row(row)
        self.stack.current[self.name] = row
        if self.old_row is not None:
            self.old_row.replaced_by = row.uuid
            w.writer.touch_row(self.old_row)
            self.stack.replaced.append(self.old_row)
        w.changed(self.stack)
        w.event(self.stack, row, Action.CREATE, Status.IN_PROGRESS, reason)

    def transition(self, row: ResourceRow, action: str, status: str, reason: str) -> None:
        row.action, row.status, row.status_reason = action, status, reason
        row.updated_at = time.time()
        self.w.changed(self.stack)
        self.w.writer.touch_row(row)
        self.w.event(self.stack, row, action, status, reason)

    # -- act --------------------------------------------------------------------------
    def make_plugin(self, cls: type[Plugin]) -> Plugin:
        row = self.row
        if row.data is None:
            row.data = {}
        p = cls(name=self.name, uuid=row.uuid, stack=self.stack.ref, properties=self.props,
                data=row.data, physical_id=row.physical_id, services=self.w.services,
                metadata=self.metadata, update_policy=self.update_policy or {})
        p.action = self.action
        p.find_peer = self.w.peer_finder(self.stack)  # type: ignore[method-assign]
        return p

    def act(self) -> None:
        w = self.w
        cls = plugin_class(self.rd.type, self.rd.template_file)
        self.started = time.monotonic()
        limit = cls.timeout if cls.timeout is not None else w.timeout
        self.deadline = min(self.started + limit, w.deadline) if limit else w.deadline
        if self.phase == Phase.PREDELETE:
            old = self.old_row
            self.plugin = plugin_class(old.type)(
                name=self.name, uuid=old.uuid, stack=self.stack.ref, properties=old.properties or {},
                data=old.data, physical_id=old.physical_id, services=w.services)
            self.plugin.action = Action.DELETE
            w.call(self, self.plugin.delete, Action.DELETE)
            return
        self.plugin = self.make_plugin(cls)
        if issubclass(cls, NestedStackPlugin):
            try:
                self.start_nested(cls)
            except Exception as exc:  # the nested template cannot be built (its inputs, a limit)
                self.fail(describe(exc, f"nested stack of {self.path}"))
            return
        if self.action == Action.CREATE:
            w.call(self, self.plugin.create, Action.CREATE)
        else:
            w.call(self, lambda: self.plugin.update(self.old_props), Action.UPDATE)

    def start_nested(self, cls: type[Plugin], plan: bool = False) -> None:
        w = self.w
        row = self.row  # None only in a plan of a new resource
        plugin = self.plugin or cls(name=self.name, uuid=row.uuid if row else "plan",
                                    stack=self.stack.ref, properties=self.props,
                                    data=dict(row.data or {}) if row else {},
                                    update_policy=self.update_policy or {})
        plugin.action = self.action
        child_id = row.nested_id if row else None
        child_rows = w.rows_for(child_id) if child_id else []
        plugin.nested = NestedView(child_id or "", {}, {r.name: (r.ref, r.attributes or {})
                                                        for r in child_rows if not r.replaced_by})
        child_tmpl = plugin.nested_template(self.stack.tmpl)
        if not plan:
            w.admit(len(child_tmpl.resources))
        new = not (child_id and child_id in w.stack_rows)
        if not new:
            srow = w.stack_rows[child_id]
        else:
            srow = w.new_stack_row(self.stack, self.name, child_tmpl, self.props, row.uuid if row else "")
            if not plan:
                row.nested_id = srow["id"]
                w.writer.touch_row(row)
        child = StackNode(srow, child_tmpl, child_rows, parent_task=self)
        if new and not plan:
            child.announced = True
            w.stack_event(srow, Action.CREATE, Status.IN_PROGRESS, "Stack CREATE started")
        self.child = child
        w.add_stack(child)

    def child_done(self) -> None:
        """The nested stack finished its forward phase."""
        child = self.child
        w = self.w
        if w.plan is not None:
            self.state = TaskState.DONE
            w.finished(self)
            return
        if child.failed:
            self.fail(f"nested stack {child.row['name']} failed: {child.row['status_reason']}")
            return
        if self.phase == Phase.NESTED_QUIET:
            if not child.changed:
                self.done_quiet()
                return
            self.transition(self.row, Action.UPDATE, Status.IN_PROGRESS, "nested stack changed")
        self.complete()

    def poll(self) -> None:
        self.w.call(self, lambda: self.plugin.check_complete(self.plugin.action), self.plugin.action, poll=True)

    def step_done(self) -> None:
        """The current plugin action completed."""
        if self.phase == Phase.PREDELETE:
            old = self.old_row
            self.w.writer.drop_row(old)
            self.stack.replaced.remove(old)
            self.w.event(self.stack, old, Action.DELETE, Status.COMPLETE, "replaced (delete before create)")
            self.phase = Phase.NONE
            self.plugin = self.make_plugin(plugin_class(self.rd.type, self.rd.template_file))
            self.w.call(self, self.plugin.create, Action.CREATE)
            return
        if self.phase == Phase.REVERT:
            self.complete(f"rolled back to its previous properties after: {self.failed_with}")
            return
        self.complete()

    def complete(self, reason: str = "state changed") -> None:
        row, p = self.row, self.plugin
        if self.child is not None:
            p.physical_id = p.physical_id or self.child.row["id"]  # as Heat: the nested stack's id
            p.nested = NestedView(self.child.row["id"], self.child.row.get("outputs") or {},
                                  {n: (r.ref, r.attributes or {})
                                   for n, r in self.child.current.items()})
        try:
            attrs = p.attributes()
            ref = p.reference_id()
        except Exception as exc:
            self.fail(f"attributes: {exc}")
            return
        row.properties, row.rsrc_metadata = self.props, self.metadata
        row.attributes, row.ref, row.physical_id = attrs, ref, p.physical_id
        self.stack.index(row)
        row.data = p.data
        row.requires = sorted(self.needs)
        row.deletion_policy = (self.rd.deletion_policy or "Delete").capitalize()
        self.transition(row, self.action, Status.COMPLETE, reason)
        self.state = TaskState.DONE
        self.w.finished(self)

    def done_quiet(self) -> None:
        self.state = TaskState.DONE
        self.w.finished(self)

    def fail_early(self, message: str) -> None:
        self.action = Action.CREATE if self.row is None else Action.UPDATE
        if self.row is None:
            self.row = new_row(self.stack, self.name, self.rd.type, Action.CREATE)
            self.w.changed(self.stack)
            self.w.writer.insert_row(self.row)
            self.stack.current[self.name] = self.row
        self.fail(message)

    def fail(self, message: str, tolerable: bool = True) -> None:
        if self.state in ENDED:
            return
        if tolerable and self.w.tolerates(self, message):
            self.revert(message)
            return
        if self.phase == Phase.REVERT:
            message = f"{self.failed_with}; rolling it back to its previous properties failed: {message}"
        self.state = TaskState.FAILED
        row = self.row
        if row is not None:
            if self.phase == Phase.PREDELETE and self.old_row is not None:
                row = self.old_row
            self.transition(row, self.action or row.action, Status.FAILED, message)
        self.w.failed_task(self, f"{self.action or 'CREATE'} of {self.path} failed: {message}")

    def revert(self, message: str) -> None:
        """A group member's update failed within the operation's max_fail: it fails, updates
        back to its previous properties, and the group goes on (a failure there is final)."""
        w = self.w
        self.transition(self.row, Action.UPDATE, Status.FAILED, message)
        failed_props = self.props
        self.props, self.metadata = self.old_props, self.old_metadata
        self.phase, self.failed_with, self.action = Phase.REVERT, message, Action.ROLLBACK
        self.transition(self.row, Action.ROLLBACK, Status.IN_PROGRESS, f"rolling back to its previous properties: {message}")
        cls = plugin_class(self.rd.type, self.rd.template_file)
        self.plugin = self.make_plugin(cls)
        self.state = TaskState.RUN
        self.started = time.monotonic()
        limit = cls.timeout if cls.timeout is not None else w.timeout
        self.deadline = min(self.started + limit, w.deadline) if limit else w.deadline
        w.call(self, lambda: self.plugin.update(failed_props), Action.UPDATE)

    def waiting_for(self) -> str:
        if self.plugin is not None:
            try:
                return self.plugin.waiting_for(self.plugin.action)
            except Exception:  # noqa: BLE001 - a message helper must not fail the walk
                pass
        return f"{self.rd.type} to complete"


class DelTask:
    """Deleting one stored resource (cleanup phase, stack delete)."""

    __slots__ = ("w", "stack", "row", "waiting", "dependents", "state", "plugin", "deadline", "started",
                 "action")

    def __init__(self, w: Walk, stack: dict, row: ResourceRow):
        self.w, self.stack, self.row = w, stack, row
        self.waiting = 0
        self.dependents: list[DelTask] = []
        self.state = TaskState.WAIT
        self.plugin: Plugin | None = None
        self.deadline = 0.0
        self.started = 0.0
        self.action = Action.DELETE

    @property
    def path(self) -> str:
        p = self.stack["path"]
        return f"{p}.{self.row.name}" if p else self.row.name

    def begin(self) -> bool:
        row = self.row
        if self.w.plan is not None:
            self.w.plan.add("delete", self.path, "removed")
            self.state = TaskState.DONE
            self.w.finished(self)
            return False
        self.w.stack_deleting(self.stack)
        if row.action == Action.DELETE and row.status == Status.IN_PROGRESS:
            return True  # resumed: delete is idempotent
        row.action, row.status, row.status_reason = Action.DELETE, Status.IN_PROGRESS, "state changed"
        self.w.writer.touch_row(row)
        self.w.event_for(self.stack, row, Action.DELETE, Status.IN_PROGRESS, "state changed")
        return True

    def act(self) -> None:
        w, row = self.w, self.row
        self.started = time.monotonic()
        if row.deletion_policy == "Retain" or row.nested_id or row.status == Status.INIT:
            self.finish("retained" if row.deletion_policy == "Retain" else "state changed")
            return
        cls = registry.get(row.type) or Plugin
        limit = cls.timeout if cls.timeout is not None else w.timeout
        self.deadline = min(self.started + limit, w.deadline) if limit else w.deadline
        ref = StackRef(self.stack["id"], self.stack["name"], self.stack["root_id"], self.stack["path"])
        self.plugin = cls(name=row.name, uuid=row.uuid, stack=ref, properties=row.properties or {},
                          data=row.data or {}, physical_id=row.physical_id,
                          services=w.services, metadata=row.rsrc_metadata)
        self.plugin.action = Action.DELETE
        w.call(self, self.plugin.delete, Action.DELETE)

    def poll(self) -> None:
        self.w.call(self, lambda: self.plugin.check_complete(Action.DELETE), Action.DELETE, poll=True)

    def step_done(self) -> None:
        self.finish("state changed")

    def finish(self, reason: str) -> None:
        w, row = self.w, self.row
        child = w.stack_rows.get(row.nested_id or "")
        if child is not None:  # its last resource is gone (or it had none)
            w.stack_deleting(child)
            w.stack_event(child, Action.DELETE, Status.COMPLETE, "Stack DELETE completed successfully")
        w.event_for(self.stack, row, Action.DELETE, Status.COMPLETE, reason)
        w.writer.drop_row(row)
        if row.nested_id:
            w.writer.drop_stack(row.nested_id)
        self.state = TaskState.DONE
        w.finished(self)

    def fail(self, message: str, tolerable: bool = False) -> None:
        if self.state in ENDED:
            return
        self.state = TaskState.FAILED
        row = self.row
        row.action, row.status, row.status_reason = Action.DELETE, Status.FAILED, message
        self.w.writer.touch_row(row)
        self.w.event_for(self.stack, row, Action.DELETE, Status.FAILED, message)
        message = f"DELETE of {self.path} failed: {message}"
        srow: dict | None = self.stack
        while srow is not None and srow["id"] in self.w.deleting and srow["status"] != Status.FAILED:
            srow.update(status=Status.FAILED, status_reason=message, updated_at=time.time())
            self.w.writer.touch_stack(srow)
            self.w.stack_event(srow, Action.DELETE, Status.FAILED, message)
            srow = self.w.stack_rows.get(srow.get("parent_id") or "")
        self.w.failed_task(self, message)

    def waiting_for(self) -> str:
        if self.plugin is not None:
            try:
                return self.plugin.waiting_for(Action.DELETE)
            except Exception:  # noqa: BLE001
                pass
        return f"{self.row.type} to be deleted"


class Walk:
    """Drives tasks: ready queue, polls by time, results of blocking calls from the pool."""

    def __init__(self, store: Any, root_row: dict, *, services: Any = None, timeout: float = 3600.0,
                 resuming: bool = False, plan: Plan | None = None, cancel: threading.Event | None = None,
                 stopping: threading.Event | None = None):
        self.store = store
        self.root_row = root_row
        self.root_id = root_row["id"]
        self.services = services
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.resuming = resuming
        self.plan = plan
        # a walk's writes hold while its operation is still the stack's (store/stacks.py generation)
        gen = root_row.get("generation")
        self.writer = Writer(store, guard=(self.root_id, int(gen)) if gen is not None and plan is None else None)
        self.cancel = cancel or threading.Event()
        self.ready: deque = deque()
        self.polls: list = []
        self.seq = itertools.count()
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.wake = threading.Event()
        self.inflight: dict[Any, None] = {}  # tasks with a blocking call in the pool
        self.failure: str | None = None
        self.stack_rows: dict[str, dict] = {}
        self.nested_names: dict[str | None, set[str]] | None = None  # parent id -> names (nested_name)
        self.rows_by_stack: dict[str, list[ResourceRow]] = {}
        self.lazy = False
        # True when the files and environments are those of the last operation: a nested
        # stack whose parameters did not change is then unchanged too and is not walked.
        self.same_files = False
        self.stacks: list[StackNode] = []
        self.pending_flush = False
        # Existing nested stacks take this action when something in them changes.
        self.nested_action = Action.ROLLBACK if root_row["action"] == Action.ROLLBACK else Action.UPDATE
        self.deleting: set[str] = set()  # nested stacks whose DELETE_IN_PROGRESS is written
        self.stopping = stopping or threading.Event()  # the service stops: leave the rest for the resume
        self.interrupted = False
        # An update's max_fail: group members whose update may fail, each then rolled back
        # to its previous properties while the group goes on; their servers' later
        # deployments in this walk are skipped (a node that failed is not changed further).
        op = root_row.get("operation") or {}
        self.max_fail = int(op.get("max_fail") or 0) if op.get("kind") == "update" and plan is None else 0
        self.tolerated: list[str] = []  # "<path>: <why>" of each member rolled back
        self.skipped_servers: set[str] = set()
        # members rolled back within an earlier max_fail that this update changes: uuid ->
        # [properties, metadata] they had; a stack rollback restores those (op "restore")
        self.behind: dict[str, list] = {}
        self.restore: dict[str, list] = op.get("restore") or {} if root_row["action"] == Action.ROLLBACK else {}
        self.resource_count = 0  # resources of the new definition this walk has added
        # texts of hidden values: masked in every reason, event and log line the walk writes
        # (those an earlier operation recorded included), and recorded for reads (`secrets`)
        given = root_row.get("parameters") or {}
        self.secrets: frozenset[str] = frozenset(root_row.get("secrets") or ()) | secret_texts(
            [given[n] for n in op.get("hidden") or [] if n in given])
        self.mask = Mask(self.secrets)
        if self.secrets:
            self.writer.clean = self.clean

    def clean(self, text: str) -> str:
        """A reason as it may be stored and shown: hidden values masked, cut to the limit."""
        if self.secrets:
            text = self.mask.text(text)
        return cut(text)

    def admit(self, n: int) -> None:
        """Count `n` more resources of the new definition; ResourceFailure past the limit."""
        if self.resource_count + n > LIMITS.resources:
            raise ResourceFailure(exceeded("resources", "the number of resources of the stack tree",
                                           self.resource_count + n))
        self.resource_count += n

    def tolerates(self, task: ResTask, message: str) -> bool:
        """Whether `task`'s failure is one of max_fail: an update in place of a leaf member
        of a group, while the walk is otherwise fine. Counts it and notes its server."""
        if (len(self.tolerated) >= self.max_fail or self.failure is not None or self.cancel.is_set()
                or task.phase != Phase.UPDATE or task.child is not None or not is_group_member(task)):
            return False
        self.tolerated.append(self.clean(f"{task.path}: {message}"))
        server = task.props.get("server")
        if isinstance(server, str) and server:
            self.skipped_servers.add(server)
        log.info("max_fail: %s failed (%d of %d), rolling it back", task.path, len(self.tolerated), self.max_fail)
        return True

    def skips(self, task: ResTask) -> bool:
        """A group member deploying to a server that failed earlier in this walk; or, in a
        stack rollback, a member rolled back within max_fail: it has its previous
        properties already (the previous definition may be the one it failed on)."""
        row = task.row
        if self.nested_action == Action.ROLLBACK:
            return row is not None and row.action == Action.ROLLBACK and row.status == Status.COMPLETE \
                and row.uuid not in self.restore and is_group_member(task)
        return bool(self.skipped_servers) and task.props.get("server") in self.skipped_servers \
            and is_group_member(task)

    # -- loading ------------------------------------------------------------------------
    def load_rows(self, stack_rows: list[dict], res_rows: list[ResourceRow] | None) -> None:
        """Stack rows, and resource rows (None: each stack's rows are read when it is visited,
        so an update that skips unchanged nested stacks never reads theirs)."""
        self.stack_rows = {s["id"]: s for s in stack_rows}
        self.nested_names = None
        self.lazy = res_rows is None
        for r in res_rows or []:
            self.rows_by_stack.setdefault(r.stack_id, []).append(r)

    def rows_for(self, stack_id: str) -> list[ResourceRow]:
        rows = self.rows_by_stack.get(stack_id)
        if rows is None:
            rows = self.rows_by_stack[stack_id] = self.read_rows(stack_id) if self.lazy else []
        return rows

    def read_rows(self, stack_id: str) -> list[ResourceRow]:
        with self.store.engine.connect() as conn:
            return [ResourceRow.from_store(r) for r in conn.execute(
                select(RES).where(RES.c.stack_id == stack_id).order_by(RES.c.id)).mappings()]

    def nested_name(self, parent: dict, resource: str, uuid: str) -> str:
        """A new nested stack's name, unique within its parent as Heat's are: `<parent>-<resource>`
        (the template's OS::stack_name) unless a nested stack of that parent holds it (the one a
        replacement replaces, until the cleanup deletes it); then, as Heat names every nested
        stack, with a suffix from the resource's uuid. Cut to the store's 255 characters as
        Heat does (the start and the unique end kept)."""
        if self.nested_names is None:  # built once per walk, then kept up to date here
            self.nested_names = {}
            for s in self.stack_rows.values():
                self.nested_names.setdefault(s.get("parent_id"), set()).add(s["name"])
        taken = self.nested_names.setdefault(parent["id"], set())
        base = f"{parent['name']}-{resource}"
        tail = uuid.replace("-", "") or uuidlib.uuid4().hex
        for name in [base] + [f"{base}-{tail[i:i + 12]}" for i in range(0, len(tail) - 11, 4)]:
            name = fit_name(name)
            if name not in taken:
                taken.add(name)
                return name
        # unreachable in practice (a uuid gives 6 distinct suffixes): refuse rather than share
        raise UndercloudError(f"nested stack of {parent['name']}.{resource}: no free name "
                              f"({base!r} and its suffixes are taken within its parent)")

    def new_stack_row(self, parent: StackNode, resource: str, tmpl: Any, params: dict, uuid: str = "") -> dict:
        now = time.time()
        row = {
            "id": str(uuidlib.uuid4()), "name": self.nested_name(parent.row, resource, uuid),
            "root_id": parent.row["root_id"], "parent_id": parent.row["id"], "parent_resource": resource,
            "path": parent.child_path(resource), "action": Action.CREATE, "status": Status.IN_PROGRESS,
            "status_reason": "", "bundle": None, "parameters": params, "prev_bundle": None,
            "prev_parameters": None, "operation": None, "outputs": None,
            "description": getattr(tmpl, "description", "") or "", "created_at": now, "updated_at": now,
        }
        self.stack_rows[row["id"]] = row
        if self.plan is None:
            self.writer.insert_stack(row)
        return row

    def event(self, stack: StackNode, row: ResourceRow, action: str, status: str, reason: str) -> None:
        self.event_for(stack.row, row, action, status, reason)

    def event_for(self, stack: dict, row: ResourceRow, action: str, status: str, reason: str) -> None:
        if self.plan is None:
            self.writer.event(self.root_id, stack, row.name, row.type, row.physical_id,
                              action, status, reason)

    def stack_event(self, srow: dict, action: str, status: str, reason: str) -> None:
        """An event of a nested stack itself (the root's are the service's), as Heat names it."""
        if self.plan is None:
            self.writer.event(self.root_id, srow, srow["name"], "OS::Heat::Stack", srow["id"], action, status, reason)

    def changed(self, stack: StackNode) -> None:
        """Something in `stack` changes: on the first change of this operation a nested stack
        goes IN_PROGRESS (its parent resource first), so untouched ones write nothing."""
        stack.changed = True
        if stack.announced or stack.parent_task is None or self.plan is not None:
            return
        stack.announced = True
        parent = stack.parent_task
        if parent.phase == Phase.NESTED_QUIET:
            parent.phase = Phase.NONE
            parent.transition(parent.row, Action.UPDATE, Status.IN_PROGRESS, "nested stack changed")
        row = stack.row
        row["status"], row["status_reason"] = Status.IN_PROGRESS, f"Stack {row['action']} started"
        row["updated_at"] = time.time()
        self.writer.touch_stack(row)
        self.stack_event(row, row["action"], Status.IN_PROGRESS, row["status_reason"])

    def stack_deleting(self, srow: dict) -> None:
        """A nested stack's first resource is being deleted: the stack is DELETE_IN_PROGRESS."""
        if srow.get("parent_id") is None or srow["id"] in self.deleting or self.plan is not None:
            return
        self.deleting.add(srow["id"])
        if srow["action"] == Action.DELETE and srow["status"] == Status.IN_PROGRESS:
            return  # resumed: written before the restart
        srow.update(action=Action.DELETE, status=Status.IN_PROGRESS, status_reason="Stack DELETE started",
                    updated_at=time.time())
        self.writer.touch_stack(srow)
        self.stack_event(srow, Action.DELETE, Status.IN_PROGRESS, "Stack DELETE started")

    def peer_finder(self, stack: StackNode):
        def find(reference_id: str) -> Plugin | None:
            # by the index, not a scan: deployments look their configs up, thousands in a stack
            names = (stack.refs.get(reference_id), reference_id) if isinstance(reference_id, str) else stack.current
            for name in names:
                row = stack.current.get(name) if name is not None else None
                if row is None:
                    continue
                if row.ref == reference_id or row.physical_id == reference_id or name == reference_id:
                    task = stack.tasks.get(name)
                    if task is not None and task.plugin is not None:
                        return task.plugin
                    cls = registry.get(row.type) or Plugin
                    return cls(name=name, uuid=row.uuid, stack=stack.ref, properties=row.properties or {},
                               data=row.data or {}, physical_id=row.physical_id)
            return None
        return find

    # -- the forward phase --------------------------------------------------------------
    def add_stack(self, stack: StackNode) -> None:
        """Add a stack's resources to the walk (at the start, or when a nested one begins)."""
        tmpl = stack.tmpl
        if stack.parent_task is None and self.plan is None:
            try:
                self.admit(len(tmpl.resources))
            except ResourceFailure as exc:
                self.failure = self.failure or str(exc)
                return
        self.stacks.append(stack)
        if tmpl.secrets and not tmpl.secrets <= self.secrets:
            self.secrets = self.secrets | tmpl.secrets
            self.mask = Mask(self.secrets)
            self.writer.clean = self.clean
            if self.plan is None:  # a nested stack's hidden values (a parent's properties): reads mask them too
                self.root_row["secrets"] = sorted(self.secrets)
                self.writer.touch_stack(self.root_row)
        deps = tmpl.dependencies()
        names = list(tmpl.resources)
        for name in names:
            rd = tmpl.resources[name]
            needs = {d for d in deps.get(name, ()) if d in tmpl.resources}
            stack.tasks[name] = ResTask(self, stack, name, rd, needs)
        for task in stack.tasks.values():
            for d in task.needs:
                stack.tasks[d].dependents.append(task)
            task.waiting = len(task.needs)
        stack.remaining = len(stack.tasks)
        if self.plan is None and stack.parent_task is not None and not stack.announced:
            if self.resuming and stack.row["status"] == Status.IN_PROGRESS:
                stack.announced = True  # its IN_PROGRESS event was written before the restart
            else:
                # A nested stack row is touched only when something in it changes (see changed).
                stack.row["action"] = self.nested_action
        if not stack.tasks:
            self.stack_done(stack)
            return
        for task in stack.tasks.values():
            if task.waiting == 0:
                self.ready.append(task)

    def stack_done(self, stack: StackNode) -> None:
        if self.plan is None and not stack.failed:
            outputs = {}
            resolver = Resolver(stack)
            for name, od in stack.tmpl.outputs.items():
                description = getattr(od, "description", "") or ""
                try:
                    value = stack.tmpl.resolve(od.value, resolver)
                    error = oversize(value, "the output's value")
                except Exception as exc:
                    value, error = None, describe(exc, f"output {name} of {stack.row['path'] or 'the root stack'}")
                if error:
                    outputs[name] = {"value": None, "error": self.clean(error), "description": description}
                else:
                    outputs[name] = {"value": value, "description": description}
            if outputs != stack.row.get("outputs") and stack.row.get("outputs") is not None:
                self.changed(stack)
            stack.row["outputs"] = outputs
            if stack.parent_task is not None:
                if stack.changed or stack.row["status"] != Status.COMPLETE:
                    self.changed(stack)
                    reason = f"Stack {stack.row['action']} completed successfully"
                    stack.row["status"], stack.row["status_reason"] = Status.COMPLETE, reason
                    stack.row["updated_at"] = time.time()
                    self.writer.touch_stack(stack.row)
                    self.stack_event(stack.row, stack.row["action"], Status.COMPLETE, reason)
        if stack.parent_task is not None:
            stack.parent_task.child_done()

    # -- scheduling -----------------------------------------------------------------------
    def finished(self, task: Any) -> None:
        for d in task.dependents:
            d.waiting -= 1
            if d.waiting == 0 and self.failure is None:
                self.ready.append(d)
        stack = getattr(task, "stack", None)
        if isinstance(stack, StackNode):
            stack.remaining -= 1
            if stack.remaining == 0:
                self.stack_done(stack)

    def failed_task(self, task: Any, message: str) -> None:
        if self.failure is None:
            self.failure = message
        stack = getattr(task, "stack", None)
        while isinstance(stack, StackNode):
            if not stack.failed:
                stack.failed = True
                # The root's row stays IN_PROGRESS until the walk is over: then it ends FAILED,
                # or goes straight to its rollback (a client polling it must not stop before).
                if stack.parent_task is not None:
                    self.changed(stack)  # IN_PROGRESS first, if nothing in it had started
                    stack.row["status"], stack.row["status_reason"] = Status.FAILED, message
                    self.writer.touch_stack(stack.row)
                    self.stack_event(stack.row, stack.row["action"], Status.FAILED, message)
            parent = stack.parent_task
            if parent is not None and parent.state not in ENDED and self.plan is None:
                # its parent resource fails with it (and that one's stack, up to the root)
                parent.fail(f"nested stack {stack.row['name']} failed: {message}")
                return
            stack = parent.stack if parent is not None else None

    def call(self, task: Any, fn, action: str, poll: bool = False) -> None:
        """Run a plugin call inline, or in the pool for blocking plugins; then route the result."""
        plugin = task.plugin
        if plugin is not None and (plugin.poll_blocks(action) if poll else plugin.blocking):
            self.inflight[task] = None

            def run():
                try:
                    result = fn()
                    self.inbox.put(CallDone(task, poll, result))
                except BaseException as exc:  # noqa: BLE001 - reported as the resource's failure
                    self.inbox.put(CallDone(task, poll, None, exc))
                self.wake.set()

            POOL.submit(run)
            return
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001
            self.result(task, poll, None, exc)
            return
        self.result(task, poll, result, None)

    def result(self, task: Any, poll: bool, result: Any, exc: BaseException | None) -> None:
        if task.state in ENDED:
            return
        if exc is not None:
            message = describe(exc, f"resource {task.path}")
            log.info("resource %s failed: %s", task.path, self.clean(message))
            task.fail(message)
            return
        if poll and not result:
            if time.monotonic() > task.deadline:
                took = time.monotonic() - task.started
                task.fail(f"timed out after {took:.0f} s waiting for {task.waiting_for()}")
                return
            self.schedule_poll(task)
            return
        if not poll:
            # Action started: poll at once (most plugins finish immediately).
            task.poll()
            return
        task.step_done()

    def schedule_poll(self, task: Any) -> None:
        interval = getattr(task.plugin, "poll_interval", 0.5) if task.plugin else 0.5
        task.state = TaskState.POLLING
        heapq.heappush(self.polls, (time.monotonic() + interval, next(self.seq), task))

    def drive(self) -> None:
        """Run until nothing is ready, running or polling. A write refused because another
        worker took the operation over (`Fenced`) ends it at once, as a stop, and is raised."""
        try:
            self._drive()
        except Fenced:
            self.interrupted = True
            raise

    def _drive(self) -> None:
        while not self.stopped():
            self.take_cancel()
            if self.start_ready():
                continue
            progressed = self.collect()
            if self.failure is not None and self.polls:
                self.cancel_running(f"cancelled: {self.failure}")
            if progressed or self.ready and self.failure is None:
                self.maybe_flush()
                continue
            if not self.polls and not self.inflight:
                break
            self.maybe_flush()
            self.sleep_until_due()
        if self.plan is None:
            if self.failure is not None and not self.interrupted:
                self.close_unfinished()
            self.writer.flush()

    def stopped(self) -> bool:
        """The service stops: what is left is resumed at its next start (a plan just ends)."""
        if self.stopping.is_set() and self.plan is None:
            self.interrupted = True
            return True
        return False

    def take_cancel(self) -> None:
        if self.cancel.is_set() and self.failure is None:
            self.failure = "cancelled by request"
            self.cancel_running("cancelled by request")

    def start_ready(self) -> bool:
        """Decide every ready task, write ahead, then act: True when any was started."""
        batch = []
        while self.ready and self.failure is None and not self.cancel.is_set():
            task = self.ready.popleft()
            task.state = TaskState.RUN
            if task.begin():
                batch.append(task)
        if not batch:
            return False
        if self.plan is None:
            self.writer.flush()  # a plugin always finds its row stored
        for task in batch:
            if task.state == TaskState.RUN:
                task.act()
        return True

    def collect(self) -> bool:
        """Results of blocking calls, polls that are due, calls that overran: True when any came."""
        got = self.take_inbox()
        now = time.monotonic()
        got = self.run_due_polls(now) or got
        return self.drop_overrun(now) or got

    def take_inbox(self) -> bool:
        got = False
        while True:
            try:
                message = self.inbox.get_nowait()
            except queue.Empty:
                return got
            got = True
            if isinstance(message, Signal):
                self.apply_signal(message)
            else:
                self.inflight.pop(message.task, None)
                self.result(message.task, message.poll, message.result, message.exc)

    def run_due_polls(self, now: float) -> bool:
        got = False
        while self.polls and self.polls[0][0] <= now:
            _, _, task = heapq.heappop(self.polls)
            if task.state == TaskState.POLLING:
                task.state = TaskState.RUN
                task.poll()
                got = True
        return got

    def drop_overrun(self, now: float) -> bool:
        """A blocking call that overran its deadline (or a failed walk) is not waited for:
        the task fails now, the call's late result is dropped. True when one failed."""
        got = False
        for task in list(self.inflight):
            if task.state in ENDED:
                del self.inflight[task]
            elif self.failure is not None or now > task.deadline:
                del self.inflight[task]
                # not tolerable: its call still runs, a rollback must not race it
                task.fail(f"cancelled: {self.failure}" if self.failure else
                          f"timed out after {now - task.started:.0f} s waiting for {task.waiting_for()}",
                          tolerable=False)
                got = True
        return got

    def sleep_until_due(self) -> None:
        """Until the next poll is due, a blocking call returns or the next flush (at most)."""
        timeout = (self.polls[0][0] - time.monotonic()) if self.polls else 0.5
        self.wake.wait(max(0.0, min(timeout, FLUSH_EVERY)))
        self.wake.clear()

    def close_unfinished(self) -> None:
        """After a failure, nested stacks left part-way (what they waited for never started)
        end FAILED with their parent resources, not IN_PROGRESS. Untouched ones stay as they are."""
        for st in reversed(self.stacks):  # deepest first
            if st.parent_task is not None and st.announced and st.remaining and not st.failed:
                task = next(t for t in st.tasks.values() if t.state not in ENDED)
                self.failed_task(task, f"cancelled: {self.failure}")

    def apply_signal(self, signal: Signal) -> None:
        """A signal for a resource of this walk: the live plugin takes it (its data changes)."""
        stack_id, name, payload, errors = signal.stack_id, signal.name, signal.payload, signal.errors
        try:
            node = next((s for s in self.stacks if s.row["id"] == stack_id), None)
            row = node.current.get(name) if node else None
            if row is None:
                errors.append(LookupError(f"{name} is not part of the running operation"))
                return
            task = node.tasks.get(name)
            plugin = task.plugin if task is not None and task.plugin is not None else None
            if plugin is None:
                cls = registry.get(row.type) or Plugin
                plugin = cls(name=name, uuid=row.uuid, stack=node.ref, properties=row.properties or {},
                             data=row.data, physical_id=row.physical_id)
            plugin.signal(payload)
            row.data = plugin.data
            self.writer.touch_row(row)
            self.event(node, row, Action.SIGNAL, Status.COMPLETE, "Signal received")
        except Exception as exc:  # noqa: BLE001 - reported to the sender
            errors.append(exc)
        finally:
            signal.done.set()

    def cancel_running(self, reason: str) -> None:
        polls, self.polls = self.polls, []
        for _, _, task in polls:
            if task.state == TaskState.POLLING:
                task.fail(reason)

    def maybe_flush(self) -> None:
        if self.plan is None and time.monotonic() - self.writer.last_flush > FLUSH_EVERY:
            self.writer.flush()

    # -- the cleanup phase ----------------------------------------------------------------
    def cleanup_rows(self, visited: list[StackNode]) -> list[tuple[dict, ResourceRow]]:
        """(stack row, resource row) pairs the new definition no longer has."""
        out: list[tuple[dict, ResourceRow]] = []
        for st in visited:
            if st.failed:
                continue
            for name, row in st.current.items():
                if name not in st.tmpl.resources:
                    out.append((st.row, row))
            out.extend((st.row, r) for r in st.replaced)
        # whole subtrees below removed/replaced nested resources
        todo = [r.nested_id for _, r in out if r.nested_id]
        while todo:
            sid = todo.pop()
            srow = self.stack_rows.get(sid)
            if srow is None:
                continue
            for r in self.rows_for(sid):
                if self.writer is not None and r.uuid in self.writer.gone_rows:
                    continue
                out.append((srow, r))
                if r.nested_id:
                    todo.append(r.nested_id)
        return out

    def delete_tasks(self, pairs: list[tuple[dict, ResourceRow]]) -> list[DelTask]:
        tasks = [DelTask(self, s, r) for s, r in pairs]
        by_name: dict[tuple[str, str], list[DelTask]] = {}
        by_stack: dict[str, list[DelTask]] = {}
        for t in tasks:
            by_name.setdefault((t.row.stack_id, t.row.name), []).append(t)
            by_stack.setdefault(t.row.stack_id, []).append(t)
        blockers: dict[int, list[DelTask]] = {}  # id(task) -> the tasks that required it
        for t in tasks:
            # t must wait for: rows that required it, and every row of its nested stack
            for req in t.row.requires or []:
                for target in by_name.get((t.row.stack_id, req), []):
                    if target is not t:
                        t.dependents.append(target)
                        target.waiting += 1
                        blockers.setdefault(id(target), []).append(t)
            for child in by_stack.get(t.row.nested_id or "", []):
                child.dependents.append(t)
                t.waiting += 1
        # As Heat (a nested stack is deleted by its parent resource's delete): the rows of a
        # nested stack wait until the rows that required its parent resource are deleted, e.g.
        # the subnets of TripleO's Networks until the role groups' ports on them are gone. One
        # gate per nested stack, after the parent's blockers and the gate of the parent's stack.
        owner = {t.row.nested_id: t for t in tasks if t.row.nested_id}
        gates: dict[str, _Gate | None] = {}

        def gate(sid: str) -> _Gate | None:
            if sid not in gates:
                gates[sid] = None
                parent = owner.get(sid)
                if parent is not None:
                    g = _Gate(self)
                    for b in blockers.get(id(parent), []) + [x for x in [gate(parent.row.stack_id)] if x]:
                        b.dependents.append(g)
                        g.waiting += 1
                    gates[sid] = g
            return gates[sid]

        for sid, children in by_stack.items():
            g = gate(sid)
            if g is not None:
                for child in children:
                    g.dependents.append(child)
                    child.waiting += 1
        for t in [*tasks, *(g for g in gates.values() if g is not None)]:
            if t.waiting == 0:
                self.ready.append(t)
        return tasks


class _Gate:
    """A point of the delete graph (no resource): done as soon as what it waits for is."""

    __slots__ = ("w", "waiting", "dependents", "state")

    def __init__(self, w: Walk):
        self.w, self.waiting, self.dependents, self.state = w, 0, [], TaskState.WAIT

    def begin(self) -> bool:
        self.state = TaskState.DONE
        self.w.finished(self)
        return False


def new_root_row(name: str, bundle: dict, parameters: dict, description: str, action: str,
                 operation: dict) -> dict:
    now = time.time()
    sid = str(uuidlib.uuid4())
    return {
        "id": sid, "name": name, "root_id": sid, "parent_id": None, "parent_resource": None, "path": "",
        "action": action, "status": Status.IN_PROGRESS, "status_reason": "", "bundle": bundle,
        "parameters": parameters, "prev_bundle": None, "prev_parameters": None, "operation": operation,
        "outputs": None, "description": description, "created_at": now, "updated_at": now,
    }


__all__ = ["Walk", "Signal", "CallDone", "Action", "Status", "TaskState", "StackNode", "ResTask", "DelTask", "Plan",
           "Resolver", "new_root_row"]
