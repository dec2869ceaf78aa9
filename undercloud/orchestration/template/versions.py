"""Each HOT version as a table: the functions, sections and keys it allows (Heat's hot/template.py)."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field

from undercloud.orchestration.template import functions as f


@dataclass(frozen=True)
class Version:
    name: str
    alias: str
    functions: dict[str, type[f.Function]]
    condition_functions: dict[str, type[f.Function]] = field(default_factory=dict)
    sections: tuple[str, ...] = ("heat_template_version", "description", "parameter_groups",
                                 "parameters", "resources", "outputs")
    resource_keys: tuple[str, ...] = ("type", "properties", "metadata", "depends_on",
                                      "deletion_policy", "update_policy", "description")
    deletion_policies: tuple[str, ...] = ("Delete", "Retain", "Snapshot")
    # "schema" is accepted (and ignored) by Heat's HOT parameter schema too
    param_keys: tuple[str, ...] = ("type", "description", "default", "schema", "constraints", "hidden",
                                   "label", "immutable")
    constraints: tuple[str, ...] = ("length", "range", "allowed_values", "allowed_pattern",
                                    "custom_constraint")

    @property
    def has_conditions(self) -> bool:
        return "conditions" in self.sections


_REMOVED_2014 = {n: f.Removed for n in (
    "Fn::GetAZs", "Fn::Join", "Fn::Split", "Fn::Replace", "Fn::Base64", "Fn::MemberListToMap",
    "Fn::ResourceFacade", "Ref")}

V20130523 = {
    "get_param": f.GetParam, "get_resource": f.GetResource, "get_attr": f.GetAttThenSelect,
    "list_join": f.Join, "str_replace": f.Replace, "resource_facade": f.ResourceFacade,
    "get_file": f.GetFile,
    "Fn::GetAZs": f.GetAZs, "Ref": f.Ref, "Fn::Select": f.Select, "Fn::Join": f.CfnJoin,
    "Fn::Split": f.CfnSplit, "Fn::Replace": f.CfnReplace, "Fn::Base64": f.Base64,
    "Fn::MemberListToMap": f.MemberListToMap, "Fn::ResourceFacade": f.CfnResourceFacade,
}
V20141016 = {
    "get_attr": f.GetAtt, "get_file": f.GetFile, "get_param": f.GetParam,
    "get_resource": f.GetResource, "list_join": f.Join, "resource_facade": f.ResourceFacade,
    "str_replace": f.Replace, "Fn::Select": f.Select, **_REMOVED_2014,
}
V20150430 = {**V20141016, "repeat": f.Repeat, "digest": f.Digest}
V20151015 = {**V20150430, "get_attr": f.GetAttAllAttributes, "list_join": f.JoinMultiple,
             "str_replace": f.ReplaceJson, "str_split": f.StrSplit, "Fn::Select": f.Removed}
V20160408 = {**V20151015, "map_merge": f.MapMerge}
V20161014 = {**V20160408, "repeat": f.RepeatWithMap, "yaql": f.Yaql, "map_replace": f.MapReplace,
             "if": f.If}
V20170224 = {**V20161014, "filter": f.Filter, "str_replace_strict": f.ReplaceJsonStrict}
V20170901 = {**V20170224, "repeat": f.RepeatWithNestedLoop, "make_url": f.MakeURL,
             "list_concat": f.ListConcat, "str_replace_vstrict": f.ReplaceJsonVeryStrict,
             "list_concat_unique": f.ListConcatUnique, "contains": f.Contains}
V20210416 = {**V20170901, "if": f.IfNullable}

COND_2016 = {"get_param": f.GetParam, "equals": f.Equals, "not": f.Not, "and": f.And, "or": f.Or}
COND_2017 = {**COND_2016, "yaql": f.Yaql, "contains": f.Contains}

_BASE = Version("", "", {})
_COND = dict(
    sections=_BASE.sections + ("conditions",),
    resource_keys=_BASE.resource_keys + ("external_id", "condition"),
    deletion_policies=("Delete", "Retain", "Snapshot", "delete", "retain", "snapshot"),
)
_MODULO = dict(constraints=_BASE.constraints + ("modulo",))
_TAGS = dict(param_keys=_BASE.param_keys + ("tags",))

ALL_VERSIONS = [
    Version("2013-05-23", "", V20130523),
    Version("2014-10-16", "juno", V20141016),
    Version("2015-04-30", "kilo", V20150430),
    Version("2015-10-15", "liberty", V20151015),
    Version("2016-04-08", "mitaka", V20160408),
    Version("2016-10-14", "newton", V20161014, COND_2016, **_COND),
    Version("2017-02-24", "ocata", V20170224, COND_2016, **_COND, **_MODULO),
    Version("2017-09-01", "pike", V20170901, COND_2017, **_COND, **_MODULO),
    Version("2018-03-02", "queens", V20170901, COND_2017, **_COND, **_MODULO, **_TAGS),
    Version("2018-08-31", "rocky", V20170901, COND_2017, **_COND, **_MODULO, **_TAGS),
    Version("2021-04-16", "wallaby", V20210416, COND_2017, **_COND, **_MODULO, **_TAGS),
]

VERSIONS: dict[str, Version] = {}
for _v in ALL_VERSIONS:
    VERSIONS[_v.name] = _v
    if _v.alias:
        VERSIONS[_v.alias] = _v


def condition_table(v: Version) -> dict[str, type[f.Function]]:
    """Functions usable in conditions; any other function of the version is Invalid there."""
    table: dict[str, type[f.Function]] = {n: f.Invalid for n in v.functions}
    table.update(v.condition_functions)
    return table


@functools.lru_cache(maxsize=1)
def all_function_names() -> frozenset[str]:
    """Every function name of any version (to tell "not in this version" from "unknown")."""
    return frozenset(itertools.chain.from_iterable(v.functions for v in VERSIONS.values()))
