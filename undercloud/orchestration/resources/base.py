"""The resource plugin interface: one small class per resource type.

The engine drives every plugin the same way, and every call may be repeated after the
service died (resumable):

    create()                 start making the thing; make nothing twice: find what an earlier
                             (interrupted) call made, by `self.uuid` or what is in `self.data`
    check_complete(action)   poll: True when the action (CREATE/UPDATE/DELETE) is done; raise
                             ResourceFailure (or any exception) to fail the resource
    update(old_properties)   converge the thing in place to `self.properties` (only called when
                             every changed property has update_allowed); old_properties are the
                             last *completed* ones: a failed update may have applied part already
    delete()                 start removing it; deleting what is already gone is not an error
    attributes()             every attribute as a dict; the engine stores it at completion, so
                             `get_attr` and outputs never call the plugin again
    reference_id()           what `get_resource` returns (default: physical_id, else the name)

Before `create` the engine persists the resource as CREATE_IN_PROGRESS with its `uuid`, so a
plugin that names what it makes after `self.uuid` can always find it after a crash. `data` is
the plugin's own persisted state (JSON-able dict), saved at every transition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from undercloud.orchestration.template.validation import bound_problem, validate_properties

if TYPE_CHECKING:
    from collections.abc import Mapping

    from undercloud.orchestration.services import PluginServices
    from undercloud.orchestration.template.definitions import ResourceDefinition
    from undercloud.orchestration.template.stack import StackTemplate

CREATE_BEFORE_DELETE = "create_before_delete"
DELETE_BEFORE_CREATE = "delete_before_create"

# Heat's property types.
TYPES = ("string", "number", "integer", "boolean", "list", "map", "any")


# The reason of a group member an update left alone because its server failed earlier in
# that update (max_fail): the engine writes it, `overcloud update` reads it.
HELD_BACK = "not updated"


class ResourceFailure(Exception):
    """A resource operation failed; the message becomes the resource's status reason."""


@dataclass(frozen=True)
class Prop:
    """One property of a resource type (the schema the template side validates against)."""

    type: str = "any"
    required: bool = False
    default: Any = None
    update_allowed: bool = False
    description: str = ""
    schema: dict[str, Prop] | None = None  # keys of a map property
    allowed: tuple | None = None           # allowed values
    # a size-like number (a length, a count, seconds): at least `min` and at most the limit
    # of that name in orchestration/limits.py, refused at validation when known then
    min: float | None = None
    limit: str | None = None


@dataclass
class StackRef:
    """The stack a resource lives in, as a plugin sees it."""

    id: str
    name: str
    root_id: str
    path: str = ""  # dotted resource path from the root stack ("" for the root)


class Plugin:
    """Base class of every resource type. Subclass, set `type_name`, override what you need."""

    type_name: ClassVar[str] = ""
    properties_schema: ClassVar[dict[str, Prop]] = {}
    attributes_schema: ClassVar[dict[str, str]] = {}  # name -> description
    # How a replacement happens when a changed property does not allow update in place.
    replace_policy: ClassVar[str] = CREATE_BEFORE_DELETE
    # True when calls may block (host commands, HTTP): the engine runs them in its worker
    # pool instead of its walker thread.
    blocking: ClassVar[bool] = False
    # False when an interrupted action cannot be continued safely: after a restart the engine
    # then fails the resource with a reason instead of calling the plugin again.
    resumable: ClassVar[bool] = True
    # Seconds an action may take (None: the stack's timeout) and how often to poll.
    timeout: ClassVar[float | None] = None
    poll_interval: ClassVar[float] = 0.5
    # True for types without a schema whose every property change is an update in place.
    update_any: ClassVar[bool] = False
    # Attributes that are secrets (tokens, generated passwords): masked in `resource show`.
    # get_attr still hands them to whatever the template passes them to.
    secret_attributes: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, *, name: str, uuid: str, stack: StackRef, properties: dict,
                 data: dict | None = None, physical_id: str | None = None,
                 services: PluginServices | None = None, metadata: Any = None,
                 update_policy: dict | None = None):
        self.name = name
        self.uuid = uuid
        self.stack = stack
        self.properties = properties
        self.data: dict = data if data is not None else {}
        self.physical_id = physical_id
        # What the plugin may use of the running undercloud (orchestration/services.py).
        self.services = services
        self.metadata = metadata
        self.update_policy = update_policy or {}
        # Set by the engine: the action under way, and for a NestedStackPlugin a NestedView of
        # its nested stack.
        self.action = "INIT"
        self.nested: Any = None

    def bounded(self, key: str) -> float:
        """A size-like property (Prop.limit) as a number, or ResourceFailure naming its limit:
        a value known only at runtime is checked here, before any work is done for it."""
        schema = type(self).properties_schema[key]
        value = self.properties.get(key)
        if value is None:
            value = schema.default
        why = bound_problem(schema.min, schema.limit, value)
        if why:
            raise ResourceFailure(f"{key}: {why}")
        return float(value)

    def find_peer(self, reference_id: str) -> Plugin | None:
        """Another resource of the same stack by its reference id (the engine provides it)."""
        return None

    # -- the actions --------------------------------------------------------------
    def create(self) -> None:
        pass

    def update(self, old_properties: dict) -> None:
        pass

    def delete(self) -> None:
        pass

    def check_complete(self, action: str) -> bool:
        return True

    def poll_blocks(self, action: str) -> bool:
        """Whether check_complete(action) may block: it runs in the pool then, else inline."""
        return self.blocking

    def attributes(self) -> dict:
        return {}

    def reference_id(self) -> str:
        return self.physical_id or self.name

    # -- optional hooks -----------------------------------------------------------
    def needs_replace(self, changed: set[str], old_properties: dict) -> bool:
        """Extra replacement rule on top of update_allowed (e.g. TestResource's update_replace)."""
        return False

    def waiting_for(self, action: str) -> str:
        """What an in-progress action waits for, named in timeout messages."""
        return f"{self.type_name} {action.lower()} to complete"

    def signal(self, payload: dict) -> None:
        """A signal sent to this resource through the API (wait handles, deployments)."""
        raise ResourceFailure(f"{self.type_name} does not accept signals")

    # -- the template side's hooks: class methods, called at load and preview, before any
    # resource exists (the template layer finds them through the registry) ----------
    @classmethod
    def validate_definition(cls, t: StackTemplate, rd: ResourceDefinition) -> None:
        """Check the resource `rd` of template `t` as Heat's validate, adding problems to `t`:
        by default its properties against `properties_schema`."""
        validate_properties(t, rd)

    @classmethod
    def preview_child(cls, t: StackTemplate, name: str, props: Mapping) -> StackTemplate | None:
        """The nested stack `stack preview` shows under resource `name` of `t`, from its
        properties resolved with runtime values Unknown; None: none shown."""
        return None

    @classmethod
    def resolve_attribute(cls, attrs: dict, name: str, path: list) -> Any:
        """Look up `get_attr: [res, name, *path]` in the stored attributes."""
        value = attrs.get(name)
        for key in path:
            if isinstance(value, dict):
                value = value.get(key)
            elif isinstance(value, list) and isinstance(key, int) and -len(value) <= key < len(value):
                value = value[key]
            elif isinstance(value, list) and isinstance(key, str) and key.isdigit() and int(key) < len(value):
                value = value[int(key)]
            else:
                return None
        return value


def with_defaults(schema: dict[str, Prop], props: dict | None) -> dict:
    """Resolved properties with the schema's defaults filled in (None counts as unset)."""
    props = dict(props or {})
    for key, p in schema.items():
        if props.get(key) is None and p.default is not None:
            props[key] = p.default
    return props


@dataclass
class NestedView:
    """What a nested-stack resource sees of its child stack when it computes attributes."""

    stack_id: str
    outputs: dict = field(default_factory=dict)
    # member name -> (reference id, stored attributes), in the child's resource order
    members: dict[str, tuple[str, dict]] = field(default_factory=dict)


class NestedStackPlugin(Plugin):
    """A resource that is a nested stack: a template resource, a group (Heat's StackResource;
    here that name is the store's resource row). The engine walks the nested stack in the same graph: it creates, updates and
    deletes it itself from `nested_template`, then calls `attributes()` with `self.nested`
    set to a NestedView (outputs, member reference ids and attributes)."""

    def nested_template(self, parent_template: Any) -> Any:
        """The nested stack's StackTemplate, made from the parent's."""
        raise NotImplementedError
