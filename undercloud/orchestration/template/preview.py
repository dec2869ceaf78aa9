"""Preview: every resource of a stack tree, its type and properties resolved as far as they
can be without creating anything (runtime values stay as the snippet that computes them)."""

from __future__ import annotations

from collections.abc import Mapping

from undercloud.orchestration.limits import LIMITS, TooLarge, exceeded, value_size
from undercloud.orchestration.template.bundle import show
from undercloud.orchestration.template.evaluation import PlaceholderResolver
from undercloud.orchestration.template.functions import Unknown, render
from undercloud.orchestration.template.source import TemplateError, line_of, problem
from undercloud.orchestration.template.stack import StackTemplate

GROUP = "OS::Heat::ResourceGroup"


def preview(tmpl: StackTemplate, prefix: str = "") -> list[dict]:
    """Rows {name, type, properties[, template]} for the tree, nested ones with dotted names."""
    rows: list[dict] = []
    resolver = PlaceholderResolver()
    for name, rd in tmpl.resources.items():
        props = tmpl.resolve(rd.properties, resolver, mask_hidden=True) or {}
        try:
            value_size(props)
        except TooLarge as exc:
            path = ("resources", name, "properties")
            raise TemplateError([problem(tmpl.file, line_of(tmpl.doc, path), ".".join(path), exceeded(
                "value_chars", "the length of the properties in characters", exc.args[0]))]) from None
        row = {"name": prefix + name, "type": rd.type, "properties": render(props)}
        if rd.template_file:
            row["template"] = show(rd.template_file)
        rows.append(row)
        if rd.template_file:
            child = tmpl.nested(name, props if isinstance(props, dict) else {})
            rows += preview(child, f"{prefix}{name}.")
        elif rd.type == GROUP and isinstance(props, Mapping):
            group = _group_child(tmpl, name, props)
            if group is not None:
                rows += preview(group, f"{prefix}{name}.")
    return rows


def _group_child(tmpl: StackTemplate, name: str, props: Mapping) -> StackTemplate | None:
    """The members of a ResourceGroup when their count is known, as the engine builds them
    (resources/group.py) for a group with no members yet."""
    from undercloud.orchestration.resources import group

    count, rdef = props.get("count", 1), props.get("resource_def")
    if isinstance(count, Unknown) or not isinstance(rdef, Mapping) or not isinstance(rdef.get("type"), str):
        return None
    try:
        count = int(count)
    except (TypeError, ValueError, OverflowError):
        return None
    if not 0 <= count <= LIMITS.group_count:  # load refused those counts already
        return None
    gone = {str(x) for policy in props.get("removal_policies") or [] if isinstance(policy, Mapping)
            for x in policy.get("resource_list") or []}
    names = group.member_names(count, [], gone)
    var = props.get("index_var") if isinstance(props.get("index_var"), str) else "%index%"
    return tmpl.child_from_dict(group.member_template(group.member_resources(rdef, var, names)), {}, name)
