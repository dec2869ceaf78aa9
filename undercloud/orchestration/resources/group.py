"""OS::Heat::ResourceGroup: `count` copies of one resource definition, as a nested stack."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from undercloud.orchestration.limits import LIMITS, exceeded
from undercloud.orchestration.resources import registry
from undercloud.orchestration.resources.base import NestedStackPlugin, Plugin, Prop, ResourceFailure
from undercloud.orchestration.template import functions as fn
from undercloud.orchestration.template.bundle import ref_key, show
from undercloud.orchestration.template.environment import FileRef
from undercloud.orchestration.template.source import TemplateError
from undercloud.orchestration.template.validation import placeholder_properties, validate_properties

if TYPE_CHECKING:
    from undercloud.orchestration.template.definitions import ResourceDefinition
    from undercloud.orchestration.template.stack import StackTemplate


def replace_index(value: Any, var: str, index: str) -> Any:
    """index_var replaced by the member's name as Heat's ResourceGroup does it: in strings,
    deep through maps and lists, map keys left as written (asked of real Heat)."""
    if isinstance(value, str):
        return value.replace(var, index)
    if isinstance(value, list):
        return [replace_index(v, var, index) for v in value]
    if isinstance(value, Mapping):
        return {k: replace_index(v, var, index) for k, v in value.items()}
    return value


def member_names(count: int, existing: list[str], gone: set[str]) -> list[str]:
    """The members after an action: the existing ones not removed, the highest indices
    dropped first when shrinking (Heat's order), then the lowest free indices; a removed
    name is never used again. (Sets: this runs for groups of thousands.)"""
    keep = [n for n in existing if n not in gone]
    keep.sort(key=_order)
    members = keep[:count]
    taken = set(members)
    i = 0
    while len(members) < count:
        name = str(i)
        if name not in taken and name not in gone:
            members.append(name)
            taken.add(name)
        i += 1
    members.sort(key=_order)
    return members


def member_resources(definition: Mapping, var: str, names: list[str]) -> dict[str, dict]:
    """The members' resource definitions: resource_def with index_var replaced in its
    properties (not its metadata: Heat leaves that as written)."""
    resources: dict[str, dict] = {}
    for name in names:
        res: dict[str, Any] = {"type": definition.get("type")}
        if definition.get("properties") is not None:
            res["properties"] = replace_index(definition["properties"], var, name)
        if definition.get("metadata") is not None:
            res["metadata"] = definition["metadata"]
        resources[name] = res
    return resources


def member_template(resources: dict[str, dict]) -> dict:
    """The nested stack a group's members make up."""
    return {"heat_template_version": "2015-04-30", "resources": resources}


def in_batches(resources: dict[str, dict], batch: int) -> dict[str, dict]:
    """At most `batch` members at once: each waits for the one `batch` places before it (one
    edge per member; whole batches waiting for whole batches were O(n²))."""
    names = list(resources)
    if batch:
        for i, name in enumerate(names[batch:], start=batch):
            resources[name] = {**resources[name], "depends_on": [names[i - batch]]}
    return resources


def _count_at_load(t: StackTemplate, rd: ResourceDefinition, resolved: Mapping) -> int:
    """A group's count when parameters tell it (else 0), checked against the limit."""
    count = resolved.get("count", 1)
    if count is None:
        return 1
    if fn.has_unknown(count):
        return 0
    path = ("resources", rd.name, "properties", "count")
    try:
        if isinstance(count, bool | Mapping | list):
            raise TypeError
        n = int(count)
    except (TypeError, ValueError, OverflowError):  # a value not an integer: its schema said so
        return 0
    if n < 0:
        t.add(path, f"count must be 0 or more, not {n}")
    elif n > LIMITS.group_count:
        t.add(path, exceeded("group_count", "the count of members", n))
        return 0
    return max(n, 0)


def _member_type(t: StackTemplate, mtype: str, at: tuple) -> tuple[str | None, str | None] | None:
    """What the registry makes of a member's type: (its template file or None, the registry
    key used); None when the type is unknown or its file missing (the problem added at `at`)."""
    try:
        target, used = t.environment.registry.lookup(mtype, None, registry.known_types())
    except ValueError as exc:
        t.add(at, str(exc))
        return None
    if not isinstance(target, FileRef):
        return None, used
    key = ref_key(t.key, target.key) if target.raw else target.key
    if key not in t.bundle.files:
        t.add(at, f"{show(key)}: file not found")
        return None
    return key, used


def _order(name: str) -> tuple:
    return (0, int(name)) if name.isdigit() else (1, name)


class ResourceGroup(NestedStackPlugin):
    type_name = "OS::Heat::ResourceGroup"
    properties_schema = {
        "count": Prop("integer", default=1, update_allowed=True, description="How many members."),
        "index_var": Prop("string", default="%index%",
                          description="Replaced by the member's index in resource_def."),
        "resource_def": Prop("map", required=True, update_allowed=True,
                             description="{type, properties, metadata} of each member.",
                             schema={"type": Prop("string", required=True),
                                     "properties": Prop("map"), "metadata": Prop("map")}),
        "removal_policies": Prop("list", default=[], update_allowed=True,
                                 description="[{resource_list: [names or ids]}]: members to remove first; "
                                             "their names are never reused."),
        "removal_policies_mode": Prop("string", default="append", update_allowed=True,
                                      allowed=("append", "update"),
                                      description="append to or replace the stored removal list."),
    }
    attributes_schema = {
        "refs": "The members' reference ids, in index order.",
        "refs_map": "{member name: reference id}.",
        "removed_rsrc_list": "Names removed through removal_policies.",
        "attributes": "{member name: attribute}: get_attr [group, attributes, ATTR].",
        "resource.N": "Member N's reference id; resource.N.ATTR its attribute ATTR.",
        "ATTR": "Any other name: the list of every member's attribute ATTR.",
    }

    def count(self) -> int:
        """The count property, checked: 0 or more and within the group limit."""
        raw = self.properties.get("count")
        try:
            count = int(raw or 0)
        except (TypeError, ValueError, OverflowError):
            raise ResourceFailure(f"count must be an integer, not {str(raw)[:100]!r}") from None
        if count < 0:
            raise ResourceFailure(f"count must be 0 or more, not {count}")
        if count > LIMITS.group_count:
            raise ResourceFailure(exceeded("group_count", "the count of members", count))
        return count

    def member_names(self, existing: list[str]) -> list[str]:
        """Which members exist after this action: removal policies first, names never reused.
        (Sets, not lists: this runs for every member of groups of thousands.)"""
        p = self.properties
        removed = [] if p.get("removal_policies_mode") == "update" else list(self.data.get("removed", []))
        gone = set(removed)
        # An entry may be a member's reference id: map it back to the member's name.
        by_ref = {}
        for n, ref in (self.data.get("refs_map") or {}).items():
            if isinstance(ref, str):
                by_ref.setdefault(ref, n)
        for policy in p.get("removal_policies") or []:
            for item in (policy or {}).get("resource_list") or []:
                name = by_ref.get(str(item), str(item))
                if name not in gone:
                    gone.add(name)
                    removed.append(name)
        self.data["removed"] = removed
        return member_names(self.count(), existing, gone)

    def _batch_size(self, policy_key: str) -> int:
        policy = (self.update_policy or {}).get(policy_key) or {}
        size = policy.get("max_batch_size") if isinstance(policy, dict) else None
        if size is None:
            return 0
        try:
            n = int(size)
        except (TypeError, ValueError, OverflowError):
            n = 0
        if n < 1 or isinstance(size, bool):
            raise ResourceFailure(f"update_policy.{policy_key}.max_batch_size must be a whole number of 1 "
                                  f"or more, not {str(size)[:100]!r}")
        return n

    def batch(self) -> int:
        """At most this many members at once (0: all): update_policy's batch_create when
        creating, rolling_update when updating, as Heat's ResourceGroup."""
        return self._batch_size("batch_create" if self.action == "CREATE" else "rolling_update")

    def nested_template(self, parent_template: Any) -> Any:
        p = self.properties
        names = self.member_names(list(self.nested.members) if self.nested else [])
        resources = member_resources(p.get("resource_def") or {}, p.get("index_var") or "%index%", names)
        return parent_template.child_from_dict(member_template(in_batches(resources, self.batch())), {}, self.name)

    def attributes(self) -> dict:
        members = self.nested.members if self.nested else {}
        # Computed at completion, before the cleanup phase deletes the members a shrink
        # removes: only the members of the current definition count.
        current = set(self.member_names(list(members)))
        members = {n: m for n, m in members.items() if n in current}
        order = list(members)
        order.sort(key=_order)
        refs_map = {n: members[n][0] for n in order}
        self.data["refs_map"] = refs_map
        return {
            "refs": [refs_map[n] for n in order],
            "refs_map": refs_map,
            "removed_rsrc_list": list(self.data.get("removed", [])),
            "members": {n: members[n][1] for n in order},
            "order": order,
        }

    @classmethod
    def validate_definition(cls, t: StackTemplate, rd: ResourceDefinition) -> None:
        """Properties and members: their type must be known (the engine builds them later); a
        template member's nested stack is validated once, as member "0", and counted `count` times."""
        props = rd.properties if isinstance(rd.properties, Mapping) else {}
        rdef = props.get("resource_def")
        path = ("resources", rd.name, "properties", "resource_def")
        resolved = placeholder_properties(t, rd)
        validate_properties(t, rd, resolved)
        count = _count_at_load(t, rd, resolved)
        if not isinstance(rdef, Mapping):
            if "resource_def" not in props:
                t.add(("resources", rd.name, "properties"), "Property resource_def not assigned")
            return
        mtype = rdef.get("type")
        if not isinstance(mtype, str):
            return
        t.tree_size += count
        found = _member_type(t, mtype, path + ("type",))
        if found is None or found[0] is None:
            return
        key, used = found
        rprops = resolved.get("resource_def")
        mprops = rprops.get("properties") if isinstance(rprops, Mapping) else None
        var = resolved.get("index_var") if isinstance(resolved.get("index_var"), str) else "%index%"
        mprops = replace_index(mprops if isinstance(mprops, Mapping) else {}, var, "0")  # as the engine will
        try:
            t.tree_size += count * t.child_tree_size(key, used, "0", mprops, path, None)
        except TemplateError as exc:
            t.problems.extend(exc.problems)

    @classmethod
    def preview_child(cls, t: StackTemplate, name: str, props: Mapping) -> StackTemplate | None:
        """The members when their count is known, as `nested_template` builds them for a
        group with no members yet."""
        count, rdef = props.get("count", 1), props.get("resource_def")
        if isinstance(count, fn.Unknown) or not isinstance(rdef, Mapping) or not isinstance(rdef.get("type"), str):
            return None
        try:
            count = int(count)
        except (TypeError, ValueError, OverflowError):
            return None
        if not 0 <= count <= LIMITS.group_count:  # load refused those counts already
            return None
        gone = {str(x) for policy in props.get("removal_policies") or [] if isinstance(policy, Mapping)
                for x in policy.get("resource_list") or []}
        names = member_names(count, [], gone)
        var = props.get("index_var") if isinstance(props.get("index_var"), str) else "%index%"
        return t.child_from_dict(member_template(member_resources(rdef, var, names)), {}, name)

    @classmethod
    def resolve_attribute(cls, attrs: dict, name: str, path: list) -> Any:
        order = attrs.get("order", [])
        members = attrs.get("members", {})
        if name in ("refs", "refs_map", "removed_rsrc_list"):
            return super().resolve_attribute(attrs, name, path)
        if name == "attributes":
            if not path:
                return None
            attr, rest = path[0], path[1:]
            return {n: Plugin.resolve_attribute(members[n], attr, rest) for n in order}
        if name.startswith("resource."):
            parts = name.split(".", 2)
            member = parts[1] if len(parts) > 1 else ""
            if member not in members:
                return None
            if len(parts) == 3:  # resource.N.ATTR[, path...]
                return Plugin.resolve_attribute(members[member], parts[2], path)
            if path:  # [group, resource.N, ATTR, path...]
                return Plugin.resolve_attribute(members[member], str(path[0]), list(path[1:]))
            return attrs["refs_map"][member]
        return [Plugin.resolve_attribute(members[n], name, path) for n in order]


class ResourceChain(ResourceGroup):
    """OS::Heat::ResourceChain: one member per type in `resources` (named "0", "1", ...), each
    given `resource_properties`; each waits for the one before it unless `concurrent`.
    Attributes as a ResourceGroup's (refs, attributes, resource.N, any member attribute)."""

    type_name = "OS::Heat::ResourceChain"
    properties_schema = {
        "resources": Prop("list", required=True, update_allowed=True,
                          description="The members' types (names or registry aliases), in order."),
        "concurrent": Prop("boolean", default=False,
                           description="Create them all at once instead of one after the other."),
        "resource_properties": Prop("map", update_allowed=True, description="The properties of every member."),
    }

    @classmethod
    def validate_definition(cls, t: StackTemplate, rd: ResourceDefinition) -> None:
        """Properties and members: each type in `resources` (when known) must be one."""
        resolved = placeholder_properties(t, rd)
        validate_properties(t, rd, resolved)
        types = resolved.get("resources")
        if not isinstance(types, list):
            return
        path = ("resources", rd.name, "properties", "resources")
        if len(types) > LIMITS.group_count:  # refused before any member's type is looked up
            t.add(path, exceeded("group_count", "the count of members", len(types)))
            return
        t.tree_size += len(types)
        for i, mtype in enumerate(types):
            if isinstance(mtype, str):
                _member_type(t, mtype, path + (i,))

    @classmethod
    def preview_child(cls, t: StackTemplate, name: str, props: Mapping) -> StackTemplate | None:
        return None  # shown without members, as Heat's preview does

    def types(self) -> list[str]:
        types = self.properties.get("resources") or []
        if not isinstance(types, list) or not all(isinstance(t, str) and t for t in types):
            raise ResourceFailure(f"resources must be a list of resource types, not {str(types)[:100]!r}")
        if len(types) > LIMITS.group_count:
            raise ResourceFailure(exceeded("group_count", "the count of members", len(types)))
        return types

    def member_names(self, existing: list[str]) -> list[str]:
        return [str(i) for i in range(len(self.types()))]

    def nested_template(self, parent_template: Any) -> Any:
        props = self.properties.get("resource_properties")
        concurrent = str(self.properties.get("concurrent")).lower() in ("true", "1", "yes", "on")
        resources: dict[str, dict] = {}
        for i, rtype in enumerate(self.types()):
            res: dict[str, Any] = {"type": rtype}
            if props is not None:
                res["properties"] = props
            if i and not concurrent:
                res["depends_on"] = [str(i - 1)]
            resources[str(i)] = res
        return parent_template.child_from_dict(member_template(resources), {}, self.name)
