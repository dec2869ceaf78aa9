"""StackTemplate: one template + its environment, validated, ready to resolve.

`load` builds the top StackTemplate and validates the whole tree (template resources are
built as children with their properties resolved as far as they can be). Problems are
collected, not raised one by one, so a user sees every mistake at once.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from undercloud.orchestration.limits import BY_NAME, LIMITS, exceeded
from undercloud.orchestration.template import functions as fn
from undercloud.orchestration.template.bundle import Bundle, ref_key, show
from undercloud.orchestration.template.environment import (
    SECTIONS as ENV_SECTIONS,
)
from undercloud.orchestration.template.environment import (
    Environment,
    FileRef,
    check_env,
    merge,
)
from undercloud.orchestration.template.parameters import (
    PSEUDO,
    Parameter,
    mask_texts,
    parse_schema,
    secret_texts,
)
from undercloud.orchestration.template.source import (
    TOO_DEEP,
    FnError,
    TemplateError,
    dotted,
    kind,
    line_of,
    problem,
)
from undercloud.orchestration.template.versions import ALL_VERSIONS, VERSIONS, Version, condition_table

MAX_NESTING_DEPTH = LIMITS.nested_depth  # the default; the limit in force is LIMITS.nested_depth
_REPORTED = "(reported)"  # an FnError whose problems were already added one by one

def known_types() -> frozenset[str]:
    """The resource types the engine implements (its plugins' registry)."""
    from undercloud.orchestration.resources import registry  # the language itself needs no plugins

    return registry.known_types()


def _properties_schema(rtype: str) -> Mapping | None:
    """The plugin's properties schema (name -> {type, required, ...}) if it declares one."""
    from undercloud.orchestration.resources import registry

    return registry.properties_schema(rtype)


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


class Resolver(Protocol):
    """What the engine supplies at runtime to resolve get_resource / get_attr."""

    def get_resource(self, name: str) -> Any: ...

    def get_attr(self, name: str, attr: str | None, path: list) -> Any: ...


class PlaceholderResolver:
    """For validation and preview: every runtime value is Unknown (rendered as its snippet)."""

    def get_resource(self, name: str) -> Any:
        return fn.Unknown({"get_resource": name})

    def get_attr(self, name: str, attr: str | None, path: list) -> Any:
        return fn.Unknown({"get_attr": [name] + ([attr] if attr is not None else []) + list(path)})


def select_path(value: Any, path: list) -> Any:
    """Walk `path` into an attribute value as Heat does (a miss gives None)."""
    for key in path:
        if isinstance(value, list | tuple) and isinstance(key, str):
            try:
                key = int(key)
            except ValueError:
                return None
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            return None
    return value


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


_PARENT_RES_DEFAULT = {"metadata": {}, "deletion_policy": "Delete", "update_policy": {}}


class StackTemplate:
    """A validated template with its environment and parameter values."""

    def __init__(self, bundle: Bundle, key: str, doc: Any, env: Environment, params: Mapping,
                 *, stack_name: str = "", stack_id: str = "", project_id: str = "",
                 depth: int = 0, chain: tuple[str, ...] = (), partial: bool = False,
                 facade: Mapping | None = None, top: bool = True, given_where: Any = None,
                 secrets: frozenset[str] = frozenset(), check_values: bool | None = None):
        self.bundle, self.key, self.doc, self.environment = bundle, key, doc, env
        # Property values are computed at validation (see _validate_properties) for the tree
        # a stack is created or updated from, as Heat does; by `template validate` and preview
        # (partial) only when every parameter has a value; not again for each nested stack the
        # engine builds while it runs.
        self.check_values = top if check_values is None else check_values
        self.stack_name, self.stack_id, self.project_id = stack_name, stack_id, project_id
        self.depth, self.chain, self.partial, self.top = depth, chain + (key,), partial, top
        self.facade = dict(facade or _PARENT_RES_DEFAULT)
        self.problems: list[str] = []
        self.version: Version = VERSIONS["2013-05-23"]
        self.description = ""
        self.parameters: dict[str, Parameter] = {}
        self.resources: dict[str, ResourceDefinition] = {}
        self.all_resources: set[str] = set()
        self.outputs: dict[str, OutputDefinition] = {}
        self._values: dict[str, Any] = {}
        self._cond_defs: dict[str, Any] = {}
        self._cond_parsed: dict[str, Any] = {}
        self._cond_values: dict[str, bool] = {}
        self._cond_busy: list[str] = []
        self._check_params = True
        self._trees: dict[int, tuple[Any, Any]] = {}
        self._deps: dict[str, set[str]] | None = None
        self._collecting = False
        self._collected = 0
        self._dep_sink: set[str] | None = None
        self._rdeps: dict[str, set[str]] = {}
        # texts of hidden values (this template's and those its parent passed down): masked in messages
        self.secrets: frozenset[str] = secrets
        # resources of the tree below, as far as validation knows (group counts known from parameters)
        self.tree_size = 0
        self._build(params, given_where)

    # ------------------------------------------------------------------ problems
    @functools.cached_property
    def file(self) -> str:
        return show(self.key)

    def add(self, path: tuple, message: str) -> None:
        if message is _REPORTED:
            return
        if self.secrets:
            message = self.scrub(message)
        self.problems.append(problem(self.file, line_of(self.doc, path), dotted(path), message))

    def raise_problems(self) -> None:
        if self.problems:
            seen: dict[str, None] = dict.fromkeys(self.problems)
            raise TemplateError(list(seen))

    # ------------------------------------------------------------------ building
    def _build(self, params: Mapping, given_where: Any) -> None:
        doc = self.doc
        if doc is None or doc == "":
            self.add((), "the template is empty")
            return
        if not isinstance(doc, Mapping):
            self.add((), "the template is not a YAML mapping")
            return
        if "heat_template_version" not in doc:
            if "AWSTemplateFormatVersion" in doc or "HeatTemplateFormatVersion" in doc:
                self.add((), "CloudFormation-style templates are not supported; use HOT (heat_template_version)")
            elif set(doc) <= set(ENV_SECTIONS):
                self.add((), "Template format version not found: this looks like an environment file "
                             "(give it with -e)")
            else:
                self.add((), "Template format version not found: heat_template_version is missing")
            return
        v = doc["heat_template_version"]
        if isinstance(v, str | int | float) and str(v) in VERSIONS:
            self.version = VERSIONS[str(v)]
        else:
            known = ", ".join([x.name for x in ALL_VERSIONS] + [x.alias for x in ALL_VERSIONS if x.alias])
            self.add(("heat_template_version",),
                     f'The template version is invalid: "heat_template_version: {v}". '
                     f'"heat_template_version" should be one of: {known}')
            return
        for section in doc:
            if section not in self.version.sections:
                extra = ""
                if section == "conditions":
                    extra = " (conditions need heat_template_version 2016-10-14 or later)"
                self.add((section,), f'"{section}" is not a valid template section{extra}')
        desc = doc.get("description")
        self.description = desc if isinstance(desc, str) else ("" if desc is None else str(desc))
        self._build_parameters(params, given_where)
        self._build_conditions()
        self._build_resources()
        self._build_outputs()
        self._check_cycles()

    def _section(self, name: str) -> Mapping:
        s = self.doc.get(name)
        if s is None:
            return {}
        if not isinstance(s, Mapping):
            self.add((name,), f'"{name}" must be a map, not {kind(s)}')
            return {}
        return s

    def _build_parameters(self, given: Mapping, given_where: Any) -> None:
        section = self._section("parameters")
        for name, schema in section.items():
            try:
                self.parameters[name] = parse_schema(str(name), schema, self.version, ("parameters", name))
            except FnError as e:
                self.add(e.path, e.message)
        self._check_groups()
        defaults = self.environment.parameter_defaults
        for name in given:
            if name not in self.parameters:
                if self.top:
                    self._given_problem(given_where, name, f"The Parameter ({name}) was not defined in template.")
                else:
                    self._given_problem(given_where, name, f"Unknown Property {name}")
        for name, p in self.parameters.items():
            raw = given.get(name)
            if raw is None and name in defaults:
                p.default = defaults[name] if defaults[name] is not None else p.default
            p.user_value = raw
            src = raw if raw is not None else p.default
            if src is None:
                if self.partial and self.top:
                    self._values[name] = fn.Unknown({"get_param": name})
                    self.check_values = False  # validated without it: values are not all known
                else:
                    msg = (f"The Parameter ({name}) was not provided." if self.top
                           else f"Property {name} not assigned")
                    self._given_problem(given_where, name, msg, ("parameters", name))
                    self._values[name] = fn.Unknown({"get_param": name})
                continue
            try:
                self._values[name] = p.validate(src)
                p.value = self._values[name]
            except ValueError as exc:
                msg = str(exc)
                if raw is None:
                    self.add(("parameters", name, "default"), msg)
                else:
                    self._given_problem(given_where, name, msg, ("parameters", name))
                self._values[name] = fn.Unknown({"get_param": name})
        hidden = [self._values[n] for n, p in self.parameters.items()
                  if p.hidden and not isinstance(self._values.get(n), fn.Unknown | None)]
        if hidden:
            self.secrets = self.secrets | secret_texts(hidden)
        pseudo = {"OS::stack_name": self.stack_name, "OS::stack_id": self.stack_id,
                  "OS::project_id": self.project_id, "OS::region": "regionOne"}
        for name in PSEUDO:
            self._values[name] = pseudo[name]

    def _given_problem(self, given_where: Any, name: str, message: str, fallback: tuple = ("parameters",)) -> None:
        """A problem with a value given from outside: at the parent's property when nested."""
        if self.secrets:
            message = self.scrub(message)
        if callable(given_where):
            self.problems.append(given_where(name, message))
        else:
            self.add(fallback, message)

    def _check_groups(self) -> None:
        groups = self.doc.get("parameter_groups")
        if groups is None:
            return
        if not isinstance(groups, list):
            self.add(("parameter_groups",), "parameter_groups must be a list")
            return
        seen: set[str] = set()
        for i, g in enumerate(groups):
            p = ("parameter_groups", i)
            if not isinstance(g, Mapping):
                self.add(p, "each parameter group must be a map")
                continue
            names = g.get("parameters")
            if not isinstance(names, list):
                self.add(p, "Parameters must be provided for each Parameter Group.")
                continue
            for j, n in enumerate(names):
                if not isinstance(n, str) or n not in self.parameters:
                    self.add(p + ("parameters", j),
                             f"The Parameter name ({n}) does not reference an existing parameter.")
                    continue
                if n in seen:
                    self.add(p + ("parameters", j), f"The {n} parameter must be assigned to one parameter group only.")
                seen.add(n)

    def _build_conditions(self) -> None:
        if not self.version.has_conditions:
            return
        self._cond_defs = dict(self._section("conditions"))
        # Each definition is checked now, but evaluated only where something uses it (as
        # Heat: an unused condition may name a parameter the template does not have).
        for name in self._cond_defs:
            try:
                self._condition_tree(name, params=False)
            except FnError as e:
                self.add(e.path, e.message)

    def _build_resources(self) -> None:
        section = self._section("resources")
        self.all_resources = set(section)
        v = self.version
        enabled: dict[str, Mapping] = {}
        for name, body in section.items():
            p = ("resources", name)
            if not isinstance(body, Mapping):
                self.add(p, f"Resources must contain Resource. Found a [{kind(body)}] instead")
                continue
            bad = [k for k in body if k not in v.resource_keys]
            if bad:
                hint = ""
                if any(k in ("condition", "external_id") for k in bad):
                    hint = " (condition and external_id need heat_template_version 2016-10-14 or later)"
                self.add(p + (bad[0],), f"Invalid keyword(s) inside a resource definition: {', '.join(map(str, bad))}{hint}")
            if "type" not in body:
                self.add(p, f'Resource {name} is missing "type"')
                continue
            if not isinstance(body["type"], str):
                self.add(p + ("type",), f"Resource {name} type type must be string")
                continue
            cond = body.get("condition")
            if cond is not None and v.has_conditions:
                try:
                    if not self.resource_condition(cond, p + ("condition",)):
                        continue
                except FnError as e:
                    self.add(e.path, e.message)
                    continue
            enabled[name] = body
        for name, body in enabled.items():
            rd = self._resource(name, body)
            if rd is not None:
                self.resources[name] = rd
        self.tree_size += len(self.resources)
        for rd in self.resources.values():
            if rd.template_file:
                self._validate_child(rd)
            elif rd.type == "OS::Heat::ResourceGroup":
                self._validate_group(rd)
            elif rd.type == "OS::Heat::ResourceChain":
                self._validate_chain(rd)
            else:
                self._validate_properties(rd)

    def _resource(self, name: str, body: Mapping) -> ResourceDefinition | None:
        p = ("resources", name)
        rtype = body["type"]
        rd = ResourceDefinition(name=name, type=rtype, declared_type=rtype, file=self.file,
                                line=line_of(self.doc, p))
        ok = True
        needs: set[str] = set()
        try:
            target, used = self.environment.registry.lookup(rtype, name, known_types())
            rd.registry_key = used
            if isinstance(target, FileRef):
                rd.template_file = ref_key(self.key, target.key) if target.raw else target.key
                if rd.template_file not in self.bundle.files:
                    self.add(p + ("type",), f"{show(rd.template_file)}: file not found")
                    ok = False
            else:
                rd.type = target
        except ValueError as exc:
            self.add(p + ("type",), str(exc))
            ok = False
        for key, kinds, what in (("properties", (Mapping,), "object"), ("metadata", (Mapping,), "object"),
                                 ("update_policy", (Mapping,), "object")):
            if key not in body or body[key] is None:
                continue
            self._dep_sink = needs if key != "update_policy" else None
            try:
                tree = self.parse_all(body[key], p + (key,))
            except FnError as e:
                self.add(e.path, e.message)
                ok = False
                continue
            finally:
                self._dep_sink = None
            if not isinstance(tree, kinds + (fn.Function,)):
                self.add(p + (key,), f"Resource {name} {key} type must be {what}")
                ok = False
                continue
            self._trees[id(body[key])] = (body[key], tree)
            setattr(rd, key, body[key])
        deps = body.get("depends_on")
        if isinstance(deps, str):
            deps = [deps]
        if deps is not None:
            if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
                self.add(p + ("depends_on",), f"Resource {name} depends_on must be a list of strings")
                ok = False
            else:
                for i, d in enumerate(deps):
                    if d not in self.resources and d not in self.all_resources:
                        self.add(p + ("depends_on", i) if isinstance(body["depends_on"], list) else p + ("depends_on",),
                                 f'The specified reference "{d}" (in {name}) is incorrect.')
                        ok = False
                rd.depends_on = list(deps)
        if "deletion_policy" in body:
            dp = body["deletion_policy"]
            try:
                dp = self.static_value(self.parse(dp, p + ("deletion_policy",)))
            except FnError as e:
                self.add(e.path, e.message)
                dp = None
            if dp not in self.version.deletion_policies:
                self.add(p + ("deletion_policy",), f'Invalid deletion policy "{dp}"')
                ok = False
            else:
                rd.deletion_policy = str(dp).capitalize()
        if "external_id" in body:
            try:
                rd.external_id = self.static_value(self.parse(body["external_id"], p + ("external_id",)))
            except FnError as e:
                self.add(e.path, e.message)
        self._rdeps[name] = needs
        rd.condition = body.get("condition")
        desc = body.get("description")
        if desc is not None and not isinstance(desc, str):
            self.add(p + ("description",), f"Resource {name} description type must be string")
        rd.description = desc or ""
        return rd if ok else None

    def _build_outputs(self) -> None:
        for name, body in self._section("outputs").items():
            p = ("outputs", name)
            if not isinstance(body, Mapping):
                self.add(p, f'"outputs" must contain a map of output maps. Found a [{kind(body)}] instead')
                continue
            # Other keys are ignored, as Heat 27 does (TripleO has an output with `firewall_rules`
            # beside its value).
            if "value" not in body:
                self.add(p, "Each output must contain a value key.")
                continue
            cond = body.get("condition") if self.version.has_conditions else None  # before: ignored, as Heat
            if cond is not None:
                try:
                    if not self.resource_condition(cond, p + ("condition",)):
                        # Heat still lists an output whose condition is false, as null.
                        self.outputs[name] = OutputDefinition(name, str(body.get("description") or ""),
                                                              None, cond, line_of(self.doc, p))
                        continue
                except FnError as e:
                    self.add(e.path, e.message)
                    continue
            # A parameter the template lacks fails the output when it is shown, not the
            # template (as Heat: the output is then null with its error).
            self._check_params = False
            try:
                tree = self.parse_all(body["value"], p + ("value",))
            except FnError as e:
                self.add(e.path, e.message)
                continue
            finally:
                self._check_params = True
            self._trees[id(body["value"])] = (body["value"], tree)
            self.outputs[name] = OutputDefinition(name, str(body.get("description") or ""), body["value"],
                                                  cond, line_of(self.doc, p))

    # ------------------------------------------------------ template resources & groups
    def _props_placeholder(self, rd: ResourceDefinition) -> dict:
        """The resource's properties with every runtime value left Unknown."""
        try:
            props = self.resolve(rd.properties, PlaceholderResolver())
        except TemplateError as exc:
            self.problems.extend(exc.problems)
            return {}
        return props if isinstance(props, dict) else {}

    def _validate_child(self, rd: ResourceDefinition) -> None:
        props = self._props_placeholder(rd)
        try:
            self.tree_size += self.nested(rd.name, props, validating=True).tree_size
        except TemplateError as exc:
            self.problems.extend(exc.problems)

    def _group_count(self, rd: ResourceDefinition, resolved: Mapping) -> int:
        """A ResourceGroup's count when parameters tell it (else 0), checked against the limit."""
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
            self.add(path, f"count must be 0 or more, not {n}")
        elif n > LIMITS.group_count:
            self.add(path, exceeded("group_count", "the count of members", n))
            return 0
        return max(n, 0)

    def _validate_chain(self, rd: ResourceDefinition) -> None:
        """ResourceChain members: each type in `resources` (when known) must be one."""
        resolved = self._props_placeholder(rd)
        self._validate_properties(rd, resolved)
        types = resolved.get("resources")
        if not isinstance(types, list):
            return
        path = ("resources", rd.name, "properties", "resources")
        self.tree_size += len(types)
        for i, mtype in enumerate(types):
            if not isinstance(mtype, str):
                continue
            try:
                target, _used = self.environment.registry.lookup(mtype, None, known_types())
            except ValueError as exc:
                self.add(path + (i,), str(exc))
                continue
            if isinstance(target, FileRef):
                key = ref_key(self.key, target.key) if target.raw else target.key
                if key not in self.bundle.files:
                    self.add(path + (i,), f"{show(key)}: file not found")

    def _validate_group(self, rd: ResourceDefinition) -> None:
        """ResourceGroup members: their type must be known (the engine builds them later)."""
        props = rd.properties if isinstance(rd.properties, Mapping) else {}
        rdef = props.get("resource_def")
        path = ("resources", rd.name, "properties", "resource_def")
        resolved = self._props_placeholder(rd)
        self._validate_properties(rd, resolved)
        count = self._group_count(rd, resolved)
        if not isinstance(rdef, Mapping):
            if "resource_def" not in props:
                self.add(("resources", rd.name, "properties"), "Property resource_def not assigned")
            return
        mtype = rdef.get("type")
        if not isinstance(mtype, str):
            return
        self.tree_size += count
        try:
            target, used = self.environment.registry.lookup(mtype, None, known_types())
        except ValueError as exc:
            self.add(path + ("type",), str(exc))
            return
        if isinstance(target, FileRef):
            key = ref_key(self.key, target.key) if target.raw else target.key
            if key not in self.bundle.files:
                self.add(path + ("type",), f"{show(key)}: file not found")
                return
            rprops = resolved.get("resource_def")
            mprops = rprops.get("properties") if isinstance(rprops, Mapping) else None
            var = resolved.get("index_var") if isinstance(resolved.get("index_var"), str) else "%index%"
            from undercloud.orchestration.resources.group import replace_index  # as the engine will

            mprops = replace_index(mprops if isinstance(mprops, Mapping) else {}, var, "0")
            try:
                self.tree_size += count * self._child(key, used, "0", mprops, path, None, True).tree_size
            except TemplateError as exc:
                self.problems.extend(exc.problems)

    def _validate_properties(self, rd: ResourceDefinition, resolved: Mapping | None = None) -> None:
        """As Heat at validation: names against the plugin's schema, then the values known
        now (parameters, literals: a function failing on them is a problem here) against
        their types. `resolved`: the properties with runtime values Unknown, if made already."""
        schema = _properties_schema(rd.type)
        if not schema or not isinstance(rd.properties, Mapping) or rd.external_id is not None:
            return  # an external resource is adopted as it is: Heat checks no properties
        p = ("resources", rd.name, "properties")
        for k in rd.properties:
            if k not in schema:
                self.add(p + (k,), f"Unknown Property {k}")
        for k, s in schema.items():
            if isinstance(s, Mapping) and s.get("required") and k not in rd.properties and s.get("default") is None:
                self.add(p, f"Property {k} not assigned")
        if resolved is None:
            if not self.check_values:
                return  # a nested stack the engine builds while it runs: a bad value fails its resource
            resolved = self._props_placeholder(rd)
        for k, v in resolved.items():
            if k not in schema:
                continue
            why = property_type_problem(schema[k].get("type", "any"), v)
            allowed = schema[k].get("allowed")
            if not why and allowed is not None and isinstance(v, str | int | float) and v not in allowed:
                why = f'"{v}" is not an allowed value {json.dumps(allowed)}'
            if why:
                self.add(p + (k,), why)

    def nested(self, resource_name: str, properties: Mapping, *, validating: bool = False,
               metadata: Any = None) -> StackTemplate:
        """The child StackTemplate of a template resource; its parameters are `properties`."""
        rd = self.resources.get(resource_name)
        if rd is None or not rd.template_file:
            raise TemplateError([problem(self.file, 0, f"resources.{resource_name}",
                                         "not a template resource of this stack")])
        facade = {"metadata": metadata if metadata is not None else self._safe_resolve(rd.metadata),
                  "deletion_policy": rd.deletion_policy,
                  "update_policy": self._safe_resolve(rd.update_policy)}
        return self._child(rd.template_file, rd.registry_key, resource_name, properties,
                           ("resources", resource_name), facade, validating)

    def _child(self, key: str, registry_key: str | None, resource_name: str, properties: Mapping,
               p: tuple, facade: Mapping | None, validating: bool) -> StackTemplate:
        """Build the nested stack of template file `key`; problems with the given values are
        reported at `p` (the resource definition in this template)."""
        if self.depth + 1 > LIMITS.nested_depth:
            chain = " -> ".join(show(k) for k in self.chain + (key,))
            raise TemplateError([problem(self.file, line_of(self.doc, p + ("type",)), dotted(p + ("type",)),
                                         f"Recursion depth exceeds {LIMITS.nested_depth}: template resources "
                                         f"nest too deep ({chain}; set {BY_NAME['nested_depth'].env} "
                                         "to change the limit)")])
        remove = (registry_key, FileRef(key)) if registry_key else None
        env = self.environment.child(resource_name, remove)

        def given_where(name: str, message: str) -> str:
            path = p + ("properties", name) if name in (properties or {}) else p + ("properties",)
            return problem(self.file, line_of(self.doc, path), dotted(path), message)

        doc = self.bundle.parsed(key)
        child = StackTemplate(self.bundle, key, doc, env, dict(properties or {}),
                              stack_name=f"{self.stack_name}-{resource_name}", stack_id="",
                              project_id=self.project_id, depth=self.depth + 1, chain=self.chain,
                              partial=self.partial or validating, facade=facade, top=False,
                              given_where=given_where, secrets=self.secrets,
                              check_values=self.check_values and validating)
        child.raise_problems()
        return child

    def _safe_resolve(self, snippet: Any) -> Any:
        try:
            return fn.render(self.resolve(snippet, PlaceholderResolver()))
        except TemplateError:
            return {}

    def child_from_dict(self, template: Mapping, parameters: Mapping, name: str) -> StackTemplate:
        """An in-memory child template (ResourceGroup members), sharing environment and files."""
        doc = dict(template)
        doc.setdefault("heat_template_version", self.version.name)
        if self.depth + 1 > LIMITS.nested_depth:
            raise TemplateError([problem(self.file, 0, f"resources.{name}",
                                         f"Recursion depth exceeds {LIMITS.nested_depth} (set "
                                         f"{BY_NAME['nested_depth'].env} to change the limit)")])
        child = StackTemplate(self.bundle, self.key, doc, self.environment.child(name, None),
                              dict(parameters or {}), stack_name=f"{self.stack_name}-{name}",
                              project_id=self.project_id, depth=self.depth + 1, chain=self.chain,
                              partial=self.partial, top=False, given_where=None, secrets=self.secrets)
        child.raise_problems()
        return child

    # ------------------------------------------------------------------- dependencies
    def dependencies(self) -> dict[str, set[str]]:
        if self._deps is None:
            deps: dict[str, set[str]] = {}
            for name, rd in self.resources.items():
                d = set(rd.depends_on)
                if name in self._rdeps:  # noted while parsing
                    d.update(self._rdeps[name])
                else:
                    for key in ("properties", "metadata"):
                        d.update(fn.iter_deps(self._tree(getattr(rd, key))))
                deps[name] = {x for x in d if x in self.resources and x != name}
            self._deps = deps
        return {k: set(v) for k, v in self._deps.items()}

    def _check_cycles(self) -> None:
        deps = self.dependencies()
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
                    self.add(("resources", cycle[0]), f"Circular Dependency Found: {' -> '.join(cycle)}")
                    return

    # ---------------------------------------------------------------------- parsing
    def parse(self, snippet: Any, path: tuple, table: Mapping | None = None) -> Any:
        """Raw YAML -> tree of Functions (only where the version allows them)."""
        if isinstance(snippet, str | int | float | bool) or snippet is None:
            return snippet
        table = self.version.functions if table is None else table
        if isinstance(snippet, dict):
            if len(snippet) == 1:
                (k, v), = snippet.items()
                cls = table.get(k) if isinstance(k, str) else None
                if cls is not None:
                    p = path + (k,)
                    if cls.macro:
                        return cls(self, k, v, p).chosen
                    return cls(self, k, self.parse(v, p, table), p)
                if isinstance(k, str) and k in fn.all_function_names() and k not in self.version.functions:
                    raise FnError(self._not_in_version(k), path + (k,))
            out = {}
            changed = False
            for k, v in snippet.items():
                if v is None or isinstance(v, str | int | float):
                    out[k] = v
                    continue
                try:
                    pv = self.parse(v, path + (k,), table)
                except FnError as e:
                    if not self._collecting:
                        raise
                    self.add(e.path, e.message)
                    self._collected += 1
                    pv = v
                if pv is fn.REMOVED:
                    changed = True
                    continue
                changed = changed or pv is not v
                out[k] = pv
            return out if changed else snippet
        if isinstance(snippet, list):
            items = []
            for i, v in enumerate(snippet):
                if v is None or isinstance(v, str | int | float):
                    items.append(v)
                    continue
                try:
                    items.append(self.parse(v, path + (i,), table))
                except FnError as e:
                    if not self._collecting:
                        raise
                    self.add(e.path, e.message)
                    self._collected += 1
                    items.append(v)
            if any(a is not b for a, b in zip(items, snippet)):
                return [x for x in items if x is not fn.REMOVED]
            return snippet
        return snippet

    def parse_all(self, snippet: Any, path: tuple) -> Any:
        """parse, but report every problem in the snippet (FnError(_REPORTED) if there were any)."""
        before = self._collected
        self._collecting = True
        try:
            tree = self.parse(snippet, path)
        finally:
            self._collecting = False
        if self._collected != before:
            raise FnError(_REPORTED, path)
        return tree

    def _not_in_version(self, name: str) -> str:
        first = next((v.name for v in ALL_VERSIONS if name in v.functions and v.functions[name] is not fn.Removed), None)
        since = f" (it needs heat_template_version {first} or later)" if first else ""
        return f'"{name}" is not a function of heat_template_version {self.version.name}{since}'

    def _tree(self, snippet: Any) -> Any:
        hit = self._trees.get(id(snippet))
        if hit is not None and hit[0] is snippet:
            return hit[1]
        tree = self.parse(snippet, ())
        if isinstance(snippet, Mapping | list):
            self._trees[id(snippet)] = (snippet, tree)
        return tree

    # ----- hooks the functions call while parsing
    def is_param(self, name: Any) -> bool:
        return isinstance(name, str) and (name in self.parameters or name in PSEUDO)

    def check_param(self, name: str, path: tuple) -> None:
        if not self.is_param(name) and self._check_params:
            raise FnError(f"The Parameter ({name}) was not defined in template.", path)

    def check_resource(self, name: str, path: tuple) -> None:
        if name not in self.all_resources:
            where = dotted(path[:3]) if len(path) >= 2 else dotted(path)
            raise FnError(f'The specified reference "{name}" (in {where}) is incorrect.', path)
        if self.version.has_conditions and self._disabled(name):
            raise FnError(f'The specified reference "{name}" is a resource whose condition is false', path)

    def _disabled(self, name: str) -> bool:
        body = self._section("resources").get(name)
        if not isinstance(body, Mapping) or body.get("condition") is None:
            return False
        try:
            return not self.resource_condition(body["condition"], ("resources", name, "condition"))
        except FnError:
            return False

    def static_value(self, tree: Any) -> Any:
        """A value computable from parameters alone, else None (used for dependency names)."""
        if not isinstance(tree, fn.Function):
            return tree
        try:
            v = Evaluation(self, _NullResolver()).eval(tree)
        except FnError:
            return None
        return None if fn.has_unknown(v) else v

    def get_file(self, name: str, path: tuple) -> str:
        key = ref_key(self.key, name)
        text = self.bundle.files.get(key)
        if text is None:
            raise FnError(f'No content found in the "files" section for get_file path: {name}', path)
        return text

    def check_condition_ref(self, arg: Any, path: tuple) -> None:
        if isinstance(arg, str) and arg not in self._cond_defs:
            raise FnError(f'Invalid condition "{arg}"', path)

    def eval_condition(self, snippet: Any, path: tuple) -> bool:
        """The `if` condition: a name, a boolean or (newer versions) a condition function."""
        return self.resource_condition(snippet, path)

    def resource_condition(self, snippet: Any, path: tuple) -> bool:
        if isinstance(snippet, bool):
            return snippet
        if isinstance(snippet, str):
            if snippet not in self._cond_defs:
                raise FnError(f'Invalid condition "{snippet}"', path)
            return self.condition_value(snippet, ("conditions", snippet))
        tree = self.parse(snippet, path, condition_table(self.version))
        return self._as_condition(self._decide(tree), path)

    def condition_value(self, name: str, path: tuple) -> bool:
        if name in self._cond_values:
            return self._cond_values[name]
        if name in self._cond_busy:
            raise FnError(f'Circular definition for condition "{name}"', path)
        self._cond_busy.append(name)
        try:
            value = self._decide(self._condition_tree(name))
            result = self._as_condition(value, ("conditions", name))
        finally:
            self._cond_busy.pop()
        self._cond_values[name] = result
        return result

    def _condition_tree(self, name: str, params: bool = True) -> Any:
        """A condition's definition parsed; `params=False`: the parameters it names may be
        missing (they are checked when it is used)."""
        raw = self._cond_defs[name]
        if not isinstance(raw, bool | Mapping):
            raise FnError(f'The definition of condition "{name}" is invalid: {raw}', ("conditions", name))
        self._check_params = params
        try:
            tree = self.parse(raw, ("conditions", name), condition_table(self.version))
        finally:
            self._check_params = True
        if not isinstance(tree, bool | fn.Function):
            raise FnError(f'The definition of condition "{name}" is invalid: {fn.render(raw)}', ("conditions", name))
        return tree

    def _decide(self, tree: Any) -> Any:
        """A condition's value; one that depends on what is not known yet (validate,
        preview: a parameter a parent stack passes from an attribute) takes that as null."""
        value = Evaluation(self, _NullResolver()).eval(tree)
        if isinstance(value, fn.Unknown):
            try:
                value = Evaluation(self, _NullResolver(), unknown_as_none=True).eval(tree)
            except (FnError, TemplateError, TypeError, ValueError):
                pass  # a function that refuses a null: left unknown (false)
        return value

    def _as_condition(self, value: Any, path: tuple) -> bool:
        if isinstance(value, fn.Unknown):
            return False  # depends on a parameter nobody gave (validation only)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value in self._cond_defs:
            return self.condition_value(value, ("conditions", value))
        raise FnError(f'Invalid condition "{value}"', path)

    # -------------------------------------------------------------------- resolving
    def resolve(self, snippet: Any, resolver: Resolver, *, mask_hidden: bool = False) -> Any:
        """Resolve a snippet (properties, metadata, an output value) with runtime values.

        `mask_hidden=True` (previews) leaves hidden parameters unresolved, so their values
        cannot show in what is printed."""
        try:
            tree = self._tree(snippet)
            value = Evaluation(self, resolver, mask_hidden).eval(tree)
        except FnError as e:
            message = self.scrub(e.message)
            raise TemplateError([problem(self.file, line_of(self.doc, e.path), dotted(e.path), message)]) from None
        except RecursionError:
            raise TemplateError([problem(self.file, 0, "", TOO_DEEP)]) from None
        return None if value is fn.REMOVED else value

    def scrub(self, message: str) -> str:
        """Mask hidden values in a message (they may reach events and logs): this template's
        hidden parameters and the hidden values its parents passed down to it."""
        return mask_texts(message, self.secrets) if self.secrets else message

    def param_value(self, name: str) -> Any:
        """A parameter's value in its type (Unknown when validate/preview had none)."""
        return self._values.get(name)


class _NullResolver:
    def get_resource(self, name: str) -> Any:
        return fn.Unknown({"get_resource": name})

    def get_attr(self, name: str, attr: str | None, path: list) -> Any:
        return fn.Unknown({"get_attr": [name, attr, *path]})


class Evaluation:
    """One resolution pass: a template, and the resolver for runtime values."""

    __slots__ = ("t", "resolver", "mask_hidden", "unknown_as_none")

    def __init__(self, t: StackTemplate, resolver: Any, mask_hidden: bool = False, unknown_as_none: bool = False):
        self.t, self.resolver, self.mask_hidden = t, resolver, mask_hidden
        # a condition previewed: what is not known yet counts as null, as Heat's preview has it
        self.unknown_as_none = unknown_as_none

    def eval(self, x: Any) -> Any:
        if isinstance(x, str | int | float | bool) or x is None:
            return x
        if isinstance(x, fn.Function):
            return x.value(self)
        if isinstance(x, dict):
            out = {}
            for k, v in x.items():
                r = self.eval(v)
                if r is not fn.REMOVED:
                    out[k] = r
            return out
        if isinstance(x, list):
            return [r for r in (self.eval(v) for v in x) if r is not fn.REMOVED]
        return x


    def param(self, name: str, path: tuple) -> Any:
        if name not in self.t._values:
            raise FnError(f"The Parameter ({name}) was not provided.", path)
        if self.mask_hidden and name in self.t.parameters and self.t.parameters[name].hidden:
            return fn.Unknown({"get_param": name})
        return self.t._values[name]

    def _check(self, name: Any, path: tuple) -> bool:
        """True for a resource of the template; False for one whose definition was refused
        (its problem is reported already: a reference to it is not another one)."""
        if isinstance(name, str) and name in self.t.resources:
            return True
        if isinstance(name, str) and name in self.t.all_resources and self.t.problems:
            return False
        raise FnError(f'The specified reference "{name}" (in {dotted(path[:3])}) is incorrect.', path)

    def get_resource(self, name: Any, path: tuple) -> Any:
        if not self._check(name, path):
            return fn.Unknown({"get_resource": name})
        return self.resolver.get_resource(name)

    def get_attr(self, name: Any, attr: Any, sub: list, path: tuple) -> Any:
        if not self._check(name, path):
            return fn.Unknown({"get_attr": [name, attr, *sub]})
        return self.resolver.get_attr(name, attr, sub)

    def condition(self, v: Any, path: tuple) -> bool:
        return self.t._as_condition(v, path)

    def facade(self, attr: str) -> Any:
        return self.t.facade.get(attr)


# ------------------------------------------------------------------------------- load

def load(bundle: Bundle, parameters: Mapping | None = None, *, stack_name: str = "stack",
         stack_id: str = "", project_id: str = "", partial: bool = False) -> StackTemplate:
    """Validate the bundle's template and environments; the top StackTemplate or TemplateError.

    `partial=True` (validate / preview) lets parameters without a value stay unknown
    instead of being an error.
    """
    doc = bundle.parsed(bundle.template)
    env = load_environment(bundle, parameters)
    given = dict(env.parameters)
    env_where = _env_param_where(bundle, parameters or {})
    try:
        t = StackTemplate(bundle, bundle.template, doc, env, given, stack_name=stack_name,
                          stack_id=stack_id, project_id=project_id, partial=partial, given_where=env_where)
    except RecursionError:
        raise TemplateError([problem(show(bundle.template), 0, "", TOO_DEEP)]) from None
    t.raise_problems()
    check_tree_size(t)
    return t


def check_tree_size(t: StackTemplate) -> None:
    """The stack tree as far as its template tells (group counts from parameters) must fit
    the resources limit: refused before anything is made."""
    if t.tree_size > LIMITS.resources:
        raise TemplateError([problem(t.file, line_of(t.doc, ("resources",)), "resources", exceeded(
            "resources", "the number of resources of the stack tree (nested stacks and group members "
            "counted)", t.tree_size))])


def load_environment(bundle: Bundle, parameters: Mapping | None = None) -> Environment:
    """Check and merge the bundle's environment files (in order) over `parameters`."""
    problems: list[str] = []
    envs: list[tuple[str, dict]] = []
    for key in bundle.environments:
        try:
            raw = bundle.parsed(key)
        except TemplateError as exc:
            problems.extend(exc.problems)
            continue
        try:
            envs.append((key, check_env(raw, lambda name, path, key=key: ref_key(key, name))))
        except FnError as e:
            problems.append(problem(show(key), line_of(raw, e.path), dotted(e.path), e.message))
    if problems:
        raise TemplateError(problems)
    # As Heat's server does: the environment files merge over the explicit parameters.
    env, merge_problems = merge(envs, _all_param_types(bundle), dict(parameters or {}))
    for key, path, message in merge_problems:
        problems.append(problem(show(key), line_of(bundle.parsed(key), path), dotted(path), message))
    if problems:
        raise TemplateError(problems)
    return env


def _env_param_where(bundle: Bundle, explicit: Mapping) -> Any:
    """Problems with a given parameter point at the environment line that gave it."""

    def where(name: str, message: str) -> str:
        for key in reversed(bundle.environments):
            doc = bundle.parsed(key)
            if isinstance(doc, Mapping) and isinstance(doc.get("parameters"), Mapping) and name in doc["parameters"]:
                return problem(show(key), line_of(doc, ("parameters", name)), f"parameters.{name}", message)
        if name in explicit:
            return problem("--parameter", 0, name, message)
        tdoc = bundle.parsed(bundle.template)
        return problem(show(bundle.template), line_of(tdoc, ("parameters", name)), f"parameters.{name}", message)

    return where


def _all_param_types(bundle: Bundle) -> dict[str, str]:
    """Every parameter of every template in the bundle -> its type (for merge strategies)."""
    out: dict[str, str] = {}
    for key in bundle.files:
        if key in bundle.environments:
            continue
        try:
            doc = bundle.parsed(key)
        except TemplateError:
            continue
        if isinstance(doc, Mapping) and "heat_template_version" in doc and isinstance(doc.get("parameters"), Mapping):
            for name, schema in doc["parameters"].items():
                if isinstance(schema, Mapping) and isinstance(schema.get("type"), str):
                    out.setdefault(name, schema["type"])
    return out
