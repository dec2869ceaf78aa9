"""Preview: every resource of a stack tree, its type and properties resolved as far as they
can be without creating anything (runtime values stay as the snippet that computes them)."""

from __future__ import annotations

from collections.abc import Mapping

from undercloud.orchestration.limits import TooLarge, exceeded, value_size
from undercloud.orchestration.template.bundle import show
from undercloud.orchestration.template.definitions import plugin_class
from undercloud.orchestration.template.evaluation import PlaceholderResolver
from undercloud.orchestration.template.functions import render
from undercloud.orchestration.template.source import TemplateError, line_of, problem
from undercloud.orchestration.template.stack import StackTemplate


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
        elif isinstance(props, Mapping) and (plugin := plugin_class(rd.type)) is not None:
            child = plugin.preview_child(tmpl, name, props)  # a group's members, say
            if child is not None:
                rows += preview(child, f"{prefix}{name}.")
    return rows
