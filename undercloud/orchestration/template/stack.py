"""StackTemplate: one template + its environment, validated, ready to resolve.

`load` builds the top StackTemplate and validates the whole tree (template resources are
built as children with their properties resolved as far as they can be). Problems are
collected, not raised one by one, so a user sees every mistake at once.

StackTemplate coordinates; the parts live beside it: `definitions.py` reads the sections
into parameters, resources and outputs, `conditions.py` the conditions, `validation.py`
checks the resources (properties, groups, chains, nested stacks), `evaluation.py` resolves.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from undercloud.masking import mask_text
from undercloud.orchestration.limits import BY_NAME, LIMITS, exceeded
from undercloud.orchestration.template import functions as fn
from undercloud.orchestration.template.bundle import Bundle, ref_key, show
from undercloud.orchestration.template.conditions import Conditions
from undercloud.orchestration.template.definitions import (
    OutputDefinition,
    ResourceDefinition,
    build_outputs,
    build_parameters,
    build_resources,
)
from undercloud.orchestration.template.environment import (
    SECTIONS as ENV_SECTIONS,
)
from undercloud.orchestration.template.environment import (
    Environment,
    FileRef,
    check_env,
    merge,
)
from undercloud.orchestration.template.evaluation import (
    Evaluation,
    NullResolver,
    PlaceholderResolver,
    Resolver,
)
from undercloud.orchestration.template.parameters import PSEUDO, Parameter
from undercloud.orchestration.template.source import (
    TOO_DEEP,
    FnError,
    TemplateError,
    dotted,
    kind,
    line_of,
    problem,
)
from undercloud.orchestration.template.validation import find_cycle, validate_resource
from undercloud.orchestration.template.versions import (
    ALL_VERSIONS,
    VERSIONS,
    Version,
    all_function_names,
    condition_table,
)

MAX_NESTING_DEPTH = LIMITS.nested_depth  # the default; the limit in force is LIMITS.nested_depth
_REPORTED = "(reported)"  # an FnError whose problems were already added one by one
# a top stack has no parent resource: resource_facade sees these defaults
_PARENT_RES_DEFAULT = {"metadata": {}, "deletion_policy": "Delete", "update_policy": {}}


class StackTemplate:
    """A validated template with its environment and parameter values."""

    def __init__(self, bundle: Bundle, key: str, doc: Any, env: Environment, params: Mapping,
                 *, stack_name: str = "", stack_id: str = "", project_id: str = "",
                 depth: int = 0, chain: tuple[str, ...] = (), partial: bool = False,
                 facade: Mapping | None = None, top: bool = True, given_where: Any = None,
                 secrets: frozenset[str] = frozenset(), check_values: bool | None = None):
        self.bundle, self.key, self.doc, self.environment = bundle, key, doc, env
        # Property values are computed at validation (see validate_properties) for the tree
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
        self.conditions = Conditions(self)
        # Filled while the sections are read, by definitions.py and conditions.py through the
        # methods under "hooks the sections call while they are read" below
        self._values: dict[str, Any] = {}  # parameter -> its value in its type (Unknown if none)
        self._trees: dict[int, tuple[Any, Any]] = {}  # id(snippet) -> (snippet, its parsed tree)
        self._rdeps: dict[str, set[str]] = {}  # resource -> the resources its snippets name
        self._dep_sink: set[str] | None = None  # where parsed functions note the resource they name
        self._check_params = True  # False while parsing what may name a missing parameter
        self._deps: dict[str, set[str]] | None = None
        self._collecting = False
        self._collected = 0
        self._value_reads = 0  # parameter values read while parsing (see parse_all)
        self._shareable: list[tuple] = []  # (memo, tree, deps) given to the bundle once built
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
        build_parameters(self, params, given_where)
        self.conditions.build()
        build_resources(self)
        for rd in self.resources.values():
            validate_resource(self, rd)
        build_outputs(self)
        cycle = find_cycle(self.dependencies())
        if cycle:
            self.add(("resources", cycle[0]), f"Circular Dependency Found: {' -> '.join(cycle)}")
        if not self.problems:
            for memo, tree, deps in self._shareable:
                self.bundle.trees[memo] = tree
                if deps:
                    self.bundle.tree_deps[memo] = deps
        self._shareable = []

    def section(self, name: str) -> Mapping:
        s = self.doc.get(name)
        if s is None:
            return {}
        if not isinstance(s, Mapping):
            self.add((name,), f'"{name}" must be a map, not {kind(s)}')
            return {}
        return s

    # ----------------------------------------------------------------- nested stacks
    def nested(self, resource_name: str, properties: Mapping, *, validating: bool = False,
               metadata: Any = None) -> StackTemplate:
        """The child StackTemplate of a template resource; its parameters are `properties`."""
        rd = self.resources.get(resource_name)
        if rd is None or not rd.template_file:
            raise TemplateError([problem(self.file, 0, f"resources.{resource_name}",
                                         "not a template resource of this stack")])
        return self.child_from_file(rd.template_file, rd.registry_key, resource_name, properties,
                                    ("resources", resource_name), self.facade_of(rd, metadata), validating)

    def facade_of(self, rd: ResourceDefinition, metadata: Any = None) -> dict:
        """What the nested stack of `rd` sees of it (resource_facade)."""
        return {"metadata": metadata if metadata is not None else self._safe_resolve(rd.metadata),
                "deletion_policy": rd.deletion_policy, "update_policy": self._safe_resolve(rd.update_policy)}

    def child_from_file(self, key: str, registry_key: str | None, resource_name: str, properties: Mapping,
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

    def child_tree_size(self, key: str, registry_key: str | None, resource_name: str, properties: Mapping,
                        p: tuple, facade: Mapping | None) -> int:
        """Validate the nested stack of template file `key` (as `child_from_file(...,
        validating=True)`); returns how many resources its tree holds. Each nested stack the
        engine builds as it runs validates its own template resources again, as Heat's does;
        the answers for the same inputs are kept in the bundle, so a tree validated at create
        is not validated again level by level. Only successes are kept."""
        memo = (key, registry_key, self.environment.lineage, self.stack_name, resource_name, self.project_id,
                self.depth, self.secrets, repr(properties), repr(facade))
        hit = self.bundle.validated.get(memo)
        if hit is not None and (hit[0] or not self.check_values):  # values checked: a superset
            return hit[1]
        size = self.child_from_file(key, registry_key, resource_name, properties, p, facade, True).tree_size
        self.bundle.validated[memo] = (self.check_values, size)
        return size

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

    # ---------------------------------------------------------------------- parsing
    def parse(self, snippet: Any, path: tuple, table: Mapping | None = None) -> Any:
        """Raw YAML -> tree of Functions (only where the version allows them)."""
        if snippet.__class__ in fn.SCALARS:  # a subclass of a scalar falls through to the end
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
                if isinstance(k, str) and k in all_function_names() and k not in self.version.functions:
                    raise FnError(self._not_in_version(k), path + (k,))
            out = {}
            changed = False
            for k, v in snippet.items():
                if v.__class__ in fn.SCALARS:
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
            changed = False
            for i, v in enumerate(snippet):
                if v.__class__ in fn.SCALARS:
                    items.append(v)
                    continue
                try:
                    pv = self.parse(v, path + (i,), table)
                except FnError as e:
                    if not self._collecting:
                        raise
                    self.add(e.path, e.message)
                    self._collected += 1
                    pv = v
                changed = changed or pv is not v
                items.append(pv)
            if changed:
                return [x for x in items if x is not fn.REMOVED]
            return snippet
        return snippet

    def parse_all(self, snippet: Any, path: tuple) -> Any:
        """parse, but report every problem in the snippet (FnError(_REPORTED) if there were any).

        A section of a file is parsed once per bundle when its parse reads no parameter value
        (conditions, names computed by functions): what else parsing consults (the file's
        parameter, resource and condition names, its version, the bundle's files) is the same
        for every stack built from the same document, so the stack the engine builds shares
        the trees of the one validated before it. The functions keep the template they were
        parsed in only for those names; evaluation takes the values from its own template."""
        memo = (self.key, path, self._check_params)
        # only the bundle's own documents (a group member's made-up one is not shared)
        own = self.bundle.parsed_as(self.key) is self.doc
        if own and memo in self.bundle.trees:
            if self._dep_sink is not None:
                self._dep_sink.update(self.bundle.tree_deps.get(memo, ()))
            return self.bundle.trees[memo]
        before, reads, outer = self._collected, self._value_reads, self._dep_sink
        self._collecting = True
        if outer is not None:
            self._dep_sink = set()
        try:
            tree = self.parse(snippet, path)
            deps = self._dep_sink
        finally:
            self._collecting = False
            if outer is not None:
                outer.update(self._dep_sink)
                self._dep_sink = outer
        if self._collected != before:
            raise FnError(_REPORTED, path)
        if own and self._value_reads == reads:
            self._shareable.append((memo, tree, tuple(deps) if deps else ()))
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

    # ----- hooks the sections call while they are read (definitions.py, conditions.py)
    @property
    def param_values(self) -> Mapping[str, Any]:
        """Each parameter (pseudo ones too) -> its value in its type (Unknown if none): read only."""
        return self._values

    def set_param_value(self, name: str, value: Any) -> None:
        """Set the value parameter `name` takes in this template."""
        self._values[name] = value

    def keep_tree(self, snippet: Any, tree: Any) -> None:
        """Keep `tree` as the parse of `snippet`, so resolve and dependencies do not parse it again."""
        self._trees[id(snippet)] = (snippet, tree)

    def set_resource_deps(self, name: str, needs: set[str]) -> None:
        """Set the resources that resource `name`'s snippets name (noted while they were parsed)."""
        self._rdeps[name] = needs

    def parse_section(self, snippet: Any, path: tuple, *, needs: set[str] | None = None,
                      check_params: bool = True) -> Any:
        """parse_all, noting in `needs` the resources named; check_params=False: a missing parameter passes."""
        self._dep_sink, self._check_params = needs, check_params
        try:
            return self.parse_all(snippet, path)
        finally:
            self._dep_sink, self._check_params = None, True

    def parse_condition(self, snippet: Any, path: tuple, *, check_params: bool = True) -> Any:
        """A condition's definition parsed with the condition functions (see parse_section)."""
        self._check_params = check_params
        try:
            return self.parse(snippet, path, condition_table(self.version))
        finally:
            self._check_params = True

    # ----- hooks the functions call while parsing
    @property
    def dep_sink(self) -> set[str] | None:
        """Where a function being parsed notes the resource it names (None: nowhere)."""
        return self._dep_sink

    def note_value_read(self) -> None:
        """Parsing read a parameter value: the tree is then this stack's own, not shared."""
        self._value_reads += 1

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
        body = self.section("resources").get(name)
        if not isinstance(body, Mapping) or body.get("condition") is None:
            return False
        try:
            return not self.conditions.holds(body["condition"], ("resources", name, "condition"))
        except FnError:
            return False

    def static_value(self, tree: Any) -> Any:
        """A value computable from parameters alone, else None (used for dependency names)."""
        if not isinstance(tree, fn.Function):
            return tree
        self._value_reads += 1
        try:
            v = Evaluation(self, NullResolver()).eval(tree)
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
        self.conditions.check_ref(arg, path)

    def eval_condition(self, snippet: Any, path: tuple) -> bool:
        """The `if` condition: a name, a boolean or (newer versions) a condition function."""
        return self.conditions.holds(snippet, path)

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
        return mask_text(message, self.secrets) if self.secrets else message


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
