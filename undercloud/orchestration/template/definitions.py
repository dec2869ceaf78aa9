"""A template's sections read into definitions: its parameters (with the values given,
checked), its resources (type looked up in the registry, snippets parsed) and its outputs.

The functions fill the StackTemplate they are given; StackTemplate calls them in order as it is built.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from undercloud.orchestration.template import functions as fn
from undercloud.orchestration.template.bundle import ref_key, show
from undercloud.orchestration.template.environment import FileRef
from undercloud.orchestration.template.parameters import PSEUDO, parse_schema, secret_texts
from undercloud.orchestration.template.source import FnError, kind, line_of

if TYPE_CHECKING:
    from undercloud.orchestration.template.stack import StackTemplate


@functools.cache
def registry() -> Any:
    """The plugins' registry, imported when first asked: the language itself needs no plugins
    (asked for each resource: no import statement per call)."""
    from undercloud.orchestration.resources import registry

    return registry


def known_types() -> frozenset[str]:
    """The resource types the engine implements (its plugins' registry)."""
    return registry().known_types()


def plugin_class(rtype: str) -> type | None:
    """The plugin class of a resource type (None for a type the engine lacks): its class
    hooks validate and preview the type's resources."""
    return registry().get(rtype)


@dataclass
class ResourceDefinition:
    name: str
    type: str
    template_file: str | None = None
    properties: Any = field(default_factory=dict)
    metadata: Any = field(default_factory=dict)
    depends_on: list[str] = field(default_factory=list)
    update_policy: Any = field(default_factory=dict)
    deletion_policy: str = "Delete"
    external_id: Any = None
    condition: Any = None
    description: str = ""
    declared_type: str = ""     # as written in the template, before the registry
    registry_key: str | None = None  # the registry entry that mapped it, if any
    file: str = ""
    line: int = 0


@dataclass
class OutputDefinition:
    name: str
    description: str = ""
    value: Any = None
    condition: Any = None
    line: int = 0


def build_parameters(t: StackTemplate, given: Mapping, given_where: Any) -> None:
    section = t.section("parameters")
    for name, schema in section.items():
        try:
            t.parameters[name] = parse_schema(str(name), schema, t.version, ("parameters", name))
        except FnError as e:
            t.add(e.path, e.message)
    check_parameter_groups(t)
    defaults = t.environment.parameter_defaults
    for name in given:
        if name not in t.parameters:
            if t.top:
                _given_problem(t, given_where, name, f"The Parameter ({name}) was not defined in template.")
            else:
                _given_problem(t, given_where, name, f"Unknown Property {name}")
    for name, p in t.parameters.items():
        raw = given.get(name)
        if raw is None and name in defaults:
            p.default = defaults[name] if defaults[name] is not None else p.default
        p.user_value = raw
        src = raw if raw is not None else p.default
        if src is None:
            if t.partial and t.top:
                t.set_param_value(name, fn.Unknown({"get_param": name}))
                t.check_values = False  # validated without it: values are not all known
            else:
                msg = (f"The Parameter ({name}) was not provided." if t.top
                       else f"Property {name} not assigned")
                _given_problem(t, given_where, name, msg, ("parameters", name))
                t.set_param_value(name, fn.Unknown({"get_param": name}))
            continue
        try:
            value = p.validate(src)
            t.set_param_value(name, value)
            p.value = value
        except ValueError as exc:
            msg = str(exc)
            if raw is None:
                t.add(("parameters", name, "default"), msg)
            else:
                _given_problem(t, given_where, name, msg, ("parameters", name))
            t.set_param_value(name, fn.Unknown({"get_param": name}))
    values = t.param_values
    hidden = [values[n] for n, p in t.parameters.items()
              if p.hidden and not isinstance(values.get(n), fn.Unknown | None)]
    if hidden:
        t.secrets = t.secrets | secret_texts(hidden)
    pseudo = {"OS::stack_name": t.stack_name, "OS::stack_id": t.stack_id,
              "OS::project_id": t.project_id, "OS::region": "regionOne"}
    for name in PSEUDO:
        t.set_param_value(name, pseudo[name])


def _given_problem(t: StackTemplate, given_where: Any, name: str, message: str, fallback: tuple = ("parameters",)) -> None:
    """A problem with a value given from outside: at the parent's property when nested."""
    if t.secrets:
        message = t.scrub(message)
    if callable(given_where):
        t.problems.append(given_where(name, message))
    else:
        t.add(fallback, message)


def check_parameter_groups(t: StackTemplate) -> None:
    groups = t.doc.get("parameter_groups")
    if groups is None:
        return
    if not isinstance(groups, list):
        t.add(("parameter_groups",), "parameter_groups must be a list")
        return
    seen: set[str] = set()
    for i, g in enumerate(groups):
        p = ("parameter_groups", i)
        if not isinstance(g, Mapping):
            t.add(p, "each parameter group must be a map")
            continue
        names = g.get("parameters")
        if not isinstance(names, list):
            t.add(p, "Parameters must be provided for each Parameter Group.")
            continue
        for j, n in enumerate(names):
            if not isinstance(n, str) or n not in t.parameters:
                t.add(p + ("parameters", j),
                  f"The Parameter name ({n}) does not reference an existing parameter.")
                continue
            if n in seen:
                t.add(p + ("parameters", j), f"The {n} parameter must be assigned to one parameter group only.")
            seen.add(n)


def build_resources(t: StackTemplate) -> None:
    section = t.section("resources")
    t.all_resources = set(section)
    v = t.version
    enabled: dict[str, Mapping] = {}
    for name, body in section.items():
        p = ("resources", name)
        if not isinstance(body, Mapping):
            t.add(p, f"Resources must contain Resource. Found a [{kind(body)}] instead")
            continue
        bad = [k for k in body if k not in v.resource_keys]
        if bad:
            hint = ""
            if any(k in ("condition", "external_id") for k in bad):
                hint = " (condition and external_id need heat_template_version 2016-10-14 or later)"
            t.add(p + (bad[0],), f"Invalid keyword(s) inside a resource definition: {', '.join(map(str, bad))}{hint}")
        if "type" not in body:
            t.add(p, f'Resource {name} is missing "type"')
            continue
        if not isinstance(body["type"], str):
            t.add(p + ("type",), f"Resource {name} type type must be string")
            continue
        cond = body.get("condition")
        if cond is not None and v.has_conditions:
            try:
                if not t.conditions.holds(cond, p + ("condition",)):
                    continue
            except FnError as e:
                t.add(e.path, e.message)
                continue
        enabled[name] = body
    for name, body in enabled.items():
        rd = resource_definition(t, name, body)
        if rd is not None:
            t.resources[name] = rd
    t.tree_size += len(t.resources)


def resource_definition(t: StackTemplate, name: str, body: Mapping) -> ResourceDefinition | None:
    p = ("resources", name)
    rtype = body["type"]
    rd = ResourceDefinition(name=name, type=rtype, declared_type=rtype, file=t.file,
                            line=line_of(t.doc, p))
    ok = True
    needs: set[str] = set()
    try:
        target, used = t.environment.registry.lookup(rtype, name, known_types())
        rd.registry_key = used
        if isinstance(target, FileRef):
            rd.template_file = ref_key(t.key, target.key) if target.raw else target.key
            if rd.template_file not in t.bundle.files:
                t.add(p + ("type",), f"{show(rd.template_file)}: file not found")
                ok = False
        else:
            rd.type = target
    except ValueError as exc:
        t.add(p + ("type",), str(exc))
        ok = False
    for key, kinds, what in (("properties", (Mapping,), "object"), ("metadata", (Mapping,), "object"),
                             ("update_policy", (Mapping,), "object")):
        if key not in body or body[key] is None:
            continue
        try:
            tree = t.parse_section(body[key], p + (key,), needs=needs if key != "update_policy" else None)
        except FnError as e:
            t.add(e.path, e.message)
            ok = False
            continue
        if not isinstance(tree, kinds + (fn.Function,)):
            t.add(p + (key,), f"Resource {name} {key} type must be {what}")
            ok = False
            continue
        t.keep_tree(body[key], tree)
        setattr(rd, key, body[key])
    deps = body.get("depends_on")
    if isinstance(deps, str):
        deps = [deps]
    if deps is not None:
        if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
            t.add(p + ("depends_on",), f"Resource {name} depends_on must be a list of strings")
            ok = False
        else:
            for i, d in enumerate(deps):
                if d not in t.resources and d not in t.all_resources:
                    t.add(p + ("depends_on", i) if isinstance(body["depends_on"], list) else p + ("depends_on",),
                             f'The specified reference "{d}" (in {name}) is incorrect.')
                    ok = False
            rd.depends_on = list(deps)
    if "deletion_policy" in body:
        dp = body["deletion_policy"]
        try:
            dp = t.static_value(t.parse(dp, p + ("deletion_policy",)))
        except FnError as e:
            t.add(e.path, e.message)
            dp = None
        if dp not in t.version.deletion_policies:
            t.add(p + ("deletion_policy",), f'Invalid deletion policy "{dp}"')
            ok = False
        else:
            rd.deletion_policy = str(dp).capitalize()
    if "external_id" in body:
        try:
            rd.external_id = t.static_value(t.parse(body["external_id"], p + ("external_id",)))
        except FnError as e:
            t.add(e.path, e.message)
    t.set_resource_deps(name, needs)
    rd.condition = body.get("condition")
    desc = body.get("description")
    if desc is not None and not isinstance(desc, str):
        t.add(p + ("description",), f"Resource {name} description type must be string")
    rd.description = desc or ""
    return rd if ok else None


def build_outputs(t: StackTemplate) -> None:
    for name, body in t.section("outputs").items():
        p = ("outputs", name)
        if not isinstance(body, Mapping):
            t.add(p, f'"outputs" must contain a map of output maps. Found a [{kind(body)}] instead')
            continue
        # Other keys are ignored, as Heat 27 does (TripleO has an output with `firewall_rules`
        # beside its value).
        if "value" not in body:
            t.add(p, "Each output must contain a value key.")
            continue
        cond = body.get("condition") if t.version.has_conditions else None  # before: ignored, as Heat
        if cond is not None:
            try:
                if not t.conditions.holds(cond, p + ("condition",)):
                    # Heat still lists an output whose condition is false, as null.
                    t.outputs[name] = OutputDefinition(name, str(body.get("description") or ""),
                                                       None, cond, line_of(t.doc, p))
                    continue
            except FnError as e:
                t.add(e.path, e.message)
                continue
        # A parameter the template lacks fails the output when it is shown, not the
        # template (as Heat: the output is then null with its error).
        try:
            tree = t.parse_section(body["value"], p + ("value",), check_params=False)
        except FnError as e:
            t.add(e.path, e.message)
            continue
        t.keep_tree(body["value"], tree)
        t.outputs[name] = OutputDefinition(name, str(body.get("description") or ""), body["value"],
                                           cond, line_of(t.doc, p))
