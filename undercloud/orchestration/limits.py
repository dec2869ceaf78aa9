"""Limits on the work a template or a stack can make the undercloud do (Heat has the same
kind: max_template_size, max_resources_per_stack, max_nested_stack_depth).

Every limit has a default and an environment variable; the variables are read here and
nowhere else, when this module is first imported (the service reads them at start).
Tests and benchmarks change them with `override()`. A limit that is hit is one line
naming the limit and its variable (`exceeded()`), never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from undercloud import yamldata
from undercloud.limits import Limit, LimitSet

TABLE: tuple[Limit, ...] = (
    Limit("file_bytes", "UNDERCLOUD_MAX_TEMPLATE_BYTES", 512 * 1024,
          "bytes of one file of a stack: template, environment, nested template, get_file"),
    Limit("bundle_bytes", "UNDERCLOUD_MAX_BUNDLE_BYTES", 32 * 1024 * 1024,
          "bytes of all files of a stack together"),
    *yamldata.TABLE,  # yaml_alias_nodes, data_depth: the YAML reader's (inventories read it too)
    Limit("nested_depth", "UNDERCLOUD_MAX_NESTED_DEPTH", 10,
          "levels of nested stacks (template resources, ResourceGroups)"),
    Limit("resources", "UNDERCLOUD_MAX_RESOURCES_PER_STACK", 10_000,
          "resources of a whole stack tree, nested stacks and group members included"),
    Limit("group_count", "UNDERCLOUD_MAX_GROUP_COUNT", 10_000,
          "members of one ResourceGroup (count)"),
    Limit("value_chars", "UNDERCLOUD_MAX_VALUE_CHARS", 4 * 1024 * 1024,
          "characters of one value: a function's result, a parameter, a resource's properties, "
          "an output (maps and lists counted as their JSON text)"),
    Limit("random_length", "UNDERCLOUD_MAX_RANDOM_LENGTH", 512,
          "characters of an OS::Heat::RandomString (its length; Heat's own maximum)"),
    Limit("wait_seconds", "UNDERCLOUD_MAX_WAIT_SECONDS", 43_200,
          "seconds a resource property may ask to wait (a WaitCondition's timeout, a TestResource's "
          "waits; Heat's WaitCondition maximum)"),
    Limit("pattern_ms", "UNDERCLOUD_MAX_PATTERN_MS", 2000,
          "milliseconds one match of a pattern RE2 cannot run (lookarounds, backreferences) may take, "
          "in a child process"),
    Limit("message_chars", "UNDERCLOUD_MAX_MESSAGE_CHARS", 2000,
          "characters of one problem line, event reason or status reason (cut, ending in '…')"),
    Limit("resumes", "UNDERCLOUD_MAX_RESUMES", 3,
          "restarts of the service an interrupted stack operation is resumed through"),
)
BY_NAME: dict[str, Limit] = {x.name: x for x in TABLE}


class Limits(LimitSet):
    """The limits in force, as attributes (cheap to read on hot paths)."""

    file_bytes: int
    bundle_bytes: int
    yaml_alias_nodes: int
    data_depth: int
    nested_depth: int
    resources: int
    group_count: int
    value_chars: int
    random_length: int
    wait_seconds: int
    pattern_ms: int
    message_chars: int
    resumes: int

    def __init__(self, environ: Mapping[str, str] = os.environ):
        super().__init__(TABLE, environ)


LIMITS = Limits(os.environ)
exceeded = LIMITS.exceeded  # one line: what, by how much, the limit and its variable
override = LIMITS.override  # tests and benchmarks


def cut(text: str, limit: int | None = None) -> str:
    """`text` shortened to the message limit (a last '…' shows it was cut)."""
    n = LIMITS.message_chars if limit is None else limit
    return text if len(text) <= n else text[: n - 1] + "…"


class TooLarge(Exception):
    """A value went over `value_chars` while it was measured."""


def value_size(value: Any, budget: int | None = None) -> int:
    """About the length of `value` as JSON text; TooLarge as soon as it passes `budget`
    (value_chars by default), so a huge value (or one sharing parts many times over) costs
    no more than the budget to measure."""
    budget = LIMITS.value_chars if budget is None else budget
    total = 0
    todo = [value]
    pop, push = todo.pop, todo.append
    while todo:
        v = pop()
        if isinstance(v, str):
            total += len(v) + 2
        elif isinstance(v, dict):
            total += 2 + 4 * len(v)
            if total > budget:
                raise TooLarge(total)
            for k, x in v.items():
                if isinstance(k, str):
                    total += len(k)
                push(x)
        elif isinstance(v, list | tuple):
            total += 2 + len(v)
            if total > budget:
                raise TooLarge(total)
            todo.extend(v)
        else:
            total += 5
        if total > budget:
            raise TooLarge(total)
    return total


__all__ = ["LIMITS", "TABLE", "Limit", "Limits", "TooLarge", "cut", "exceeded", "override", "value_size"]
