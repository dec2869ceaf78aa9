"""Validation of a template's resources beyond their definitions, as Heat's validate: the
properties against their plugin's schema (what else a type needs checked, as a group's
members, is its plugin's `validate_definition`), and the nested stack of each template
resource (built with its properties resolved as far as they can be).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from undercloud.orchestration.limits import LIMITS, exceeded
from undercloud.orchestration.template import functions as fn
from undercloud.orchestration.template.definitions import ResourceDefinition, plugin_class, registry
from undercloud.orchestration.template.evaluation import PlaceholderResolver
from undercloud.orchestration.template.source import TemplateError

if TYPE_CHECKING:
    from undercloud.orchestration.template.stack import StackTemplate


def validate_resource(t: StackTemplate, rd: ResourceDefinition) -> None:
    """Check a resource of `t` beyond its definition: a template resource's nested stack,
    else as its plugin's `validate_definition` asks (a type the engine lacks has no checks)."""
    if rd.template_file:
        _validate_child(t, rd)
        return
    plugin = plugin_class(rd.type)
    if plugin is not None:
        plugin.validate_definition(t, rd)


def properties_schema(rtype: str) -> Mapping | None:
    """The plugin's properties schema (name -> {type, required, ...}) if it declares one."""
    return registry().properties_schema(rtype)


def property_type_problem(ptype: str, value: Any) -> str | None:
    """Why a known property value is not of its schema type, in Heat's words (None if it is).
    As Heat: a string may be given as a number or boolean, an integer or number as a numeric
    string (or a float or boolean), a boolean only as a boolean or "true"/"false"."""
    if value is None or isinstance(value, fn.Unknown):
        return None
    if ptype == "string":
        return f"Value must be a string; got {value!r}" if isinstance(value, Mapping | list) else None
    if ptype in ("integer", "number"):
        convert = int if ptype == "integer" else float
        try:
            convert(value)
        except ValueError:
            return f"Value '{value}' is not an integer" if ptype == "integer" else \
                f"could not convert string to float: {value!r}"
        except TypeError:
            return f"Value '{fn.brief(value)}' is not {'an integer' if ptype == 'integer' else 'a number'}"
        return None
    if ptype == "boolean":
        ok = isinstance(value, bool) or (isinstance(value, str) and value.lower() in ("true", "false"))
        return None if ok else f'"{value}" is not a valid boolean'
    if ptype == "list":
        return f'"{value!r}" is not a list' if isinstance(value, str | Mapping) or not isinstance(value, list) else None
    if ptype == "map":
        return None if isinstance(value, Mapping) else f'"{value}" is not a map'
    return None


def bound_problem(low: float | None, limit: str | None, value: Any) -> str | None:
    """Why a size-like property's value is below its minimum or over its limit (one line
    naming the limit's variable), None when within them or not a number (its type says)."""
    if limit is None or value is None or isinstance(value, bool | fn.Unknown):
        return None
    try:
        n = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if low is not None and n < low:
        return f"{fn.brief(value)} is less than the minimum of {low:g}"
    if not n <= getattr(LIMITS, limit):  # NaN too
        return exceeded(limit, "the value", int(n) if n.is_integer() and abs(n) < 1e18 else None)
    return None


def placeholder_properties(t: StackTemplate, rd: ResourceDefinition) -> dict:
    """The resource's properties with every runtime value left Unknown."""
    try:
        props = t.resolve(rd.properties, PlaceholderResolver())
    except TemplateError as exc:
        t.problems.extend(exc.problems)
        return {}
    return props if isinstance(props, dict) else {}


def _validate_child(t: StackTemplate, rd: ResourceDefinition) -> None:
    props = placeholder_properties(t, rd)
    try:
        t.tree_size += t.child_tree_size(rd.template_file, rd.registry_key, rd.name, props,
                                         ("resources", rd.name), t.facade_of(rd))
    except TemplateError as exc:
        t.problems.extend(exc.problems)


def validate_properties(t: StackTemplate, rd: ResourceDefinition, resolved: Mapping | None = None) -> None:
    """As Heat at validation: names against the plugin's schema, then the values known
    now (parameters, literals: a function failing on them is a problem here) against
    their types. `resolved`: the properties with runtime values Unknown, if made already."""
    schema = properties_schema(rd.type)
    if not schema or not isinstance(rd.properties, Mapping) or rd.external_id is not None:
        return  # an external resource is adopted as it is: Heat checks no properties
    p = ("resources", rd.name, "properties")
    for k in rd.properties:
        if k not in schema:
            t.add(p + (k,), f"Unknown Property {k}")
    for k, s in schema.items():
        if isinstance(s, Mapping) and s.get("required") and k not in rd.properties and s.get("default") is None:
            t.add(p, f"Property {k} not assigned")
    if resolved is None:
        if not t.check_values:
            return  # a nested stack the engine builds while it runs: a bad value fails its resource
        resolved = placeholder_properties(t, rd)
    for k, v in resolved.items():
        if k not in schema:
            continue
        why = property_type_problem(schema[k].get("type", "any"), v)
        allowed = schema[k].get("allowed")
        if not why and allowed is not None and isinstance(v, str | int | float) and v not in allowed:
            why = f'"{v}" is not an allowed value {json.dumps(allowed)}'
        if not why and schema[k].get("limit"):
            why = bound_problem(schema[k].get("min"), schema[k]["limit"], v)
        if not why and schema[k].get("schema") and isinstance(v, Mapping):  # a map's bounded keys
            for sk, sub in schema[k]["schema"].items():
                found = bound_problem(sub.get("min"), sub.get("limit"), v.get(sk))
                if found:
                    t.add(p + (k, sk), found)
        if why:
            t.add(p + (k,), why)


def find_cycle(deps: Mapping[str, set[str]]) -> list[str] | None:
    """A circular dependency (its names, the first one again at the end), if there is one."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(deps.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in deps:
        if n not in state:
            cycle = visit(n)
            if cycle:
                return cycle
    return None
