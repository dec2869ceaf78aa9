"""Environments: parameters, parameter_defaults and the resource registry, merged as Heat's server does.

Several `-e` files merge in order (heat/common/environment_util.py): `parameters` and
`parameter_defaults` through the merge strategies (`overwrite` by default, `merge`,
`deep_merge`); `resource_registry` key by key (a later `resources:` block replaces an
earlier one whole, as in Heat). A registry value ending in `.yaml`/`.template` names a
template file (relative to the environment file); any other value names a type; `null`
removes an earlier mapping or a built-in type (`Prefix::*: null` removes all under it).
"""

from __future__ import annotations

import copy
import fnmatch
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from undercloud.orchestration.template.source import FnError, kind

SECTIONS = ("parameters", "parameter_defaults", "resource_registry", "encrypted_param_names",
            "event_sinks", "parameter_merge_strategies")
STRATEGIES = ("overwrite", "merge", "deep_merge")
TEMPLATE_SUFFIXES = (".yaml", ".template")
_REGISTRY_META = ("hooks", "restricted_actions", "base_url")


def is_template_ref(value: Any) -> bool:
    return isinstance(value, str) and value.endswith(TEMPLATE_SUFFIXES)


@dataclass(frozen=True)
class FileRef:
    """A template file: `key` in the bundle; `raw` when it is a name as written in a template
    (`type: x.yaml`), still to be read relative to that template."""

    key: str
    raw: bool = False

    def __str__(self) -> str:
        return self.key


@dataclass
class Registry:
    """type -> type | FileRef | None (None: removed), plus per-resource overrides."""

    types: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    _globs: list[str] | None = field(default=None, repr=False, compare=False)  # keys ending in *
    _found: dict = field(default_factory=dict, repr=False, compare=False)  # (type, builtin) -> lookup

    def child(self, resource_name: str, remove: tuple[str, Any] | None) -> Registry:
        """The registry a nested stack sees (Heat's get_child_environment)."""
        types = dict(self.types)
        if remove is not None and types.get(remove[0]) == remove[1]:
            del types[remove[0]]
        resources: dict = {}
        for pattern, entry in self.resources.items():
            if isinstance(entry, Mapping) and fnmatch.fnmatchcase(resource_name, pattern):
                resources.update({k: v for k, v in entry.items() if isinstance(v, Mapping)})
        exact = self.resources.get(resource_name)
        if isinstance(exact, Mapping):
            resources.update({k: v for k, v in exact.items() if isinstance(v, Mapping)})
        return Registry(types, resources)

    def lookup(self, rtype: str, resource_name: str | None, builtin: frozenset[str]) -> tuple[Any, str | None]:
        """Resolve `rtype` through the mappings: (built-in type | FileRef, registry key of the
        entry that named the file, or None).

        As in Heat, the candidates are tried in order (this resource's own entry first, then
        the exact and wildcard entries sorted by name) and the first that leads to a known
        type wins. ValueError when nothing does, or when mappings loop.
        """
        # Without per-resource entries the answer depends on the type alone: asked once per
        # type (a template holds many resources of a few types; the registry is not changed
        # once in use, as for _globs).
        key = None if self.resources else (rtype, builtin)
        found = self._found.get(key) if key else None
        if found is None:
            try:
                found = self._find(rtype, resource_name, builtin, (rtype,))
            except _NotFound:
                raise ValueError(f"{rtype} is not a supported resource type") from None
            if key:
                self._found[key] = found
        return found

    def _candidates(self, rtype: str, resource_name: str | None) -> list[tuple[str, Any, bool]]:
        out: list[tuple[str, Any, bool]] = []
        own = self.resources.get(resource_name) if resource_name else None
        # per-resource entries match the exact name (Heat); wildcards only choose the entries
        # a nested stack inherits (see child)
        if isinstance(own, Mapping) and isinstance(own.get(rtype), str | FileRef):
            out.append(("", own[rtype], False))
        types = self.types
        if self._globs is None:  # a registry holds hundreds of types (THT: 350), asked per resource
            self._globs = [k for k in types if k.endswith("*")]
        keys = {k for k in self._globs if rtype.startswith(k[:-1]) and types[k] != rtype}
        if rtype in types:
            keys.add(rtype)
        for key in sorted(keys):
            out.append((key, types[key], key.endswith("*")))
        return out

    def _find(self, rtype: str, resource_name: str | None, builtin: frozenset[str],
              chain: tuple[str, ...]) -> tuple[Any, str | None]:
        for key, target, glob in self._candidates(rtype, resource_name):
            if isinstance(target, FileRef):
                return target, key or None
            mapped = target[:-1] + rtype[len(key) - 1:] if glob and target.endswith("*") else target
            if mapped == rtype:
                break  # maps to itself: the built-in type
            if mapped in chain:
                raise ValueError(f"resource_registry mappings loop: {' -> '.join(chain + (mapped,))}")
            try:
                return self._find(mapped, resource_name, builtin, chain + (mapped,))
            except _NotFound:
                continue
        if rtype in builtin:
            return rtype, None
        if is_template_ref(rtype):
            return FileRef(rtype, raw=True), None
        raise _NotFound(rtype)


class _NotFound(Exception):
    pass


_ROOTS = itertools.count()


@dataclass
class Environment:
    parameters: dict = field(default_factory=dict)
    parameter_defaults: dict = field(default_factory=dict)
    registry: Registry = field(default_factory=Registry)
    encrypted_param_names: list = field(default_factory=list)
    event_sinks: list = field(default_factory=list)
    # Which environment this is, for memos: the top one it derives from (a number never
    # reused) and the nested stacks' names down to it. Two with the same are the same.
    lineage: tuple = field(default_factory=lambda: (next(_ROOTS),), compare=False, repr=False)

    def child(self, resource_name: str, remove: tuple[str, Any] | None) -> Environment:
        """What a nested stack sees: defaults and registry, never the parent's `parameters`."""
        return Environment({}, self.parameter_defaults, self.registry.child(resource_name, remove),
                           self.encrypted_param_names, self.event_sinks,
                           self.lineage + ((resource_name, remove),))

    def to_dict(self) -> dict:
        def target(v: Any) -> Any:
            return str(v) if isinstance(v, FileRef) else v

        return {
            "parameters": self.parameters, "parameter_defaults": self.parameter_defaults,
            "resource_registry": {**{k: target(v) for k, v in self.registry.types.items()},
                                  **({"resources": self.registry.resources} if self.registry.resources else {})},
        }


def check_env(doc: Any, resolve_file) -> dict:
    """Validate one parsed environment file; returns it with registry files as FileRef.

    `resolve_file(value)` turns a registry file name into a bundle key.
    Raises FnError with the path of the first problem.
    """
    if doc is None:
        return {}
    if not isinstance(doc, Mapping):
        raise FnError("The environment is not a valid YAML mapping data type.")
    out: dict = {}
    for section, value in doc.items():
        if section not in SECTIONS:
            hint = " (this looks like a template; give it with -t)" if section == "heat_template_version" else ""
            raise FnError(f'environment has wrong section "{section}"{hint}', (section,))
        if value is None:
            raise FnError(f'environment has empty section "{section}"', (section,))
        if section in ("encrypted_param_names", "event_sinks"):
            if not isinstance(value, list):
                raise FnError(f'"{section}" must be a list', (section,))
        elif not isinstance(value, Mapping):
            raise FnError(f'"{section}" must be a map', (section,))
        if section == "parameter_merge_strategies":
            for k, v in value.items():
                if v not in STRATEGIES:
                    raise FnError(f'Invalid merge strategy "{v}" for "{k}", expected one of '
                                  f"{', '.join(STRATEGIES)}", (section, k))
        if section == "resource_registry":
            value = _registry_section(value, resolve_file, (section,))
        out[section] = value
    return out


def _registry_section(reg: Mapping, resolve_file, path: tuple, nested: bool = False) -> dict:
    out: dict = {}
    for key, target in reg.items():
        p = path + (key,)
        if not isinstance(key, str):
            raise FnError("resource_registry keys must be strings", p)
        if key in _REGISTRY_META:
            out[key] = target
        elif key == "resources" and not nested:
            if not isinstance(target, Mapping):
                raise FnError('"resources" in resource_registry must be a map of resource names', p)
            out[key] = {name: _registry_section(entry, resolve_file, p + (name,), nested=True)
                        if isinstance(entry, Mapping) else _bad_entry(p + (name,))
                        for name, entry in target.items()}
        elif nested and isinstance(target, Mapping):
            out[key] = _registry_section(target, resolve_file, p, nested=True)
        elif target is None:
            out[key] = None
        elif not isinstance(target, str):
            raise FnError(f"resource_registry: {key} must map to a type or a template file, "
                          f"not {kind(target)}", p)
        elif is_template_ref(target):
            out[key] = FileRef(resolve_file(target, p))
        else:
            out[key] = target
    return out


def _bad_entry(p: tuple) -> Any:
    raise FnError("resource_registry resources entries must be maps", p)


def _merge_map(old: Any, new: Mapping, deep: bool = False) -> Any:
    if not old:
        return copy.deepcopy(dict(new))
    for k, v in new.items():
        if v is None:
            continue
        if not deep:
            old[k] = v
        elif isinstance(v, Mapping):
            old[k] = _merge_map(old.get(k), v, True) if old.get(k) else v
        elif isinstance(v, list):
            old[k] = _merge_list(old.get(k), v) if old.get(k) else v
        elif isinstance(v, str):
            old[k] = str(old.get(k, "")) + v
        else:
            old[k] = v
    return old


def _merge_registry(old: dict, new: Mapping) -> dict:
    """Key by key, as Heat's server merges (a later `resources:` block replaces an earlier
    one whole); `null` removes the earlier mapping (`Prefix::*: null` every one under it)."""
    out = dict(old)
    for k, v in new.items():
        if v is not None:
            out[k] = v
        elif isinstance(k, str) and k.endswith("*"):
            for name in [n for n in out if isinstance(n, str) and n.startswith(k[:-1])]:
                del out[name]
        else:
            out.pop(k, None)
    return out


def _merge_list(old: Any, new: Any) -> Any:
    if not old:
        return new
    if isinstance(new, list):
        return list(old) + new if isinstance(old, list) else ",".join([str(old)] + [str(x) for x in new])
    return ",".join([",".join(old) if isinstance(old, list) else str(old), str(new)])


def merge(envs: list[tuple[str, dict]], schemata: Mapping[str, str], base_params: dict | None = None) -> tuple[Environment, list[tuple[str, tuple, str]]]:
    """Merge checked environments in order; `schemata` maps every known parameter to its type.

    Returns the Environment and problems as (env key, path, message).
    """
    merged: dict[str, Any] = {"parameters": dict(base_params or {}), "parameter_defaults": {},
                              "resource_registry": {}, "encrypted_param_names": [], "event_sinks": []}
    chosen: dict[str, str] = {}
    problems: list[tuple[str, tuple, str]] = []
    for key, env in envs:
        strategies = env.get("parameter_merge_strategies", {})
        for section, value in env.items():
            if section == "parameter_merge_strategies" or not value:
                continue
            if section in ("parameters", "parameter_defaults"):
                merged[section] = _merge_params(merged[section], value, schemata, strategies, chosen,
                                                key, section, problems)
            elif section == "resource_registry":
                merged[section] = _merge_registry(merged[section], value)
            else:
                merged[section] = list(merged[section]) + list(value)
    reg = merged["resource_registry"]
    registry = Registry({k: v for k, v in reg.items() if k not in _REGISTRY_META + ("resources",)},
                        dict(reg.get("resources") or {}))
    env = Environment(merged["parameters"], merged["parameter_defaults"], registry,
                      merged["encrypted_param_names"], merged["event_sinks"])
    return env, problems


def _strategy(strategies: Mapping, key: str, chosen: Mapping) -> str:
    if not strategies:
        return "overwrite"
    default = strategies.get("default", "overwrite")
    s = strategies.get(key, chosen.get(key, default))
    return s if s in STRATEGIES else default


def _merge_params(old: dict, new: Mapping, schemata: Mapping, strategies: Mapping, chosen: dict,
                  env_key: str, section: str, problems: list) -> dict:
    for k, v in new.items():
        if k in schemata and v is not None:
            s = _strategy(strategies, k, chosen)
            if k not in chosen:
                chosen[k] = s
            elif s != chosen[k]:
                problems.append((env_key, ("parameter_merge_strategies",),
                                 f"Conflicting merge strategy '{s}' for parameter '{k}' (an earlier file "
                                 f"used '{chosen[k]}'; every file must use the same strategy for it)."))
    if not old:
        return copy.deepcopy(dict(new))
    for k, v in new.items():
        if k not in schemata or v is None:
            if k not in schemata:
                old[k] = v  # not a parameter of any template here: kept as given
            continue
        s = chosen.get(k, "overwrite")
        if s == "overwrite":
            old[k] = v
            continue
        ptype = schemata[k]
        try:
            if ptype == "json":
                import json

                v = json.loads(v) if isinstance(v, str) else v
                old[k] = _merge_map(old.get(k, {}), v, deep=(s == "deep_merge"))
            elif ptype == "comma_delimited_list":
                old[k] = _merge_list(old.get(k), v)
            elif ptype == "string":
                old[k] = str(old.get(k, "")) + str(v)
            elif ptype == "number":
                from undercloud.orchestration.template.parameters import str_to_num

                old[k] = str_to_num(old.get(k, 0)) + str_to_num(v)
            else:
                problems.append((env_key, (section, k),
                                 f"Invalid merge strategy '{s}' for parameter '{k}'."))
        except (ValueError, TypeError, AttributeError) as exc:
            problems.append((env_key, (section, k), f"Invalid parameter in environment {exc}."))
    return old
