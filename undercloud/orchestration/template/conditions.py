"""A template's `conditions` section, and the conditions its resources, outputs and `if`s use.

Each definition is checked when the template is built, but evaluated only where something
uses it, once (as Heat: an unused condition may name a parameter the template does not have,
or be circular).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from undercloud.orchestration.template import functions as fn
from undercloud.orchestration.template.evaluation import Evaluation, NullResolver
from undercloud.orchestration.template.source import FnError, TemplateError
from undercloud.orchestration.template.versions import condition_table

if TYPE_CHECKING:
    from undercloud.orchestration.template.stack import StackTemplate


class Conditions:
    """The named conditions of one template and their values."""

    def __init__(self, t: StackTemplate):
        self.t = t
        self.defs: dict[str, Any] = {}
        self._values: dict[str, bool] = {}
        self._busy: list[str] = []  # the names being evaluated (a circular definition)

    def build(self) -> None:
        t = self.t
        if not t.version.has_conditions:
            return
        self.defs = dict(t.section("conditions"))
        for name in self.defs:
            try:
                self.tree(name, params=False)
            except FnError as e:
                t.add(e.path, e.message)

    def check_ref(self, arg: Any, path: tuple) -> None:
        if isinstance(arg, str) and arg not in self.defs:
            raise FnError(f'Invalid condition "{arg}"', path)

    def holds(self, snippet: Any, path: tuple) -> bool:
        """A resource's, output's or `if`'s condition: a name, a boolean or (newer versions)
        a condition function."""
        if isinstance(snippet, bool):
            return snippet
        self.t.note_value_read()
        if isinstance(snippet, str):
            if snippet not in self.defs:
                raise FnError(f'Invalid condition "{snippet}"', path)
            return self.value(snippet, ("conditions", snippet))
        tree = self.t.parse(snippet, path, condition_table(self.t.version))
        return self.as_condition(self.decide(tree), path)

    def value(self, name: str, path: tuple) -> bool:
        if name in self._values:
            return self._values[name]
        if name in self._busy:
            raise FnError(f'Circular definition for condition "{name}"', path)
        self._busy.append(name)
        try:
            value = self.decide(self.tree(name))
            result = self.as_condition(value, ("conditions", name))
        finally:
            self._busy.pop()
        self._values[name] = result
        return result

    def tree(self, name: str, params: bool = True) -> Any:
        """A condition's definition parsed; `params=False`: the parameters it names may be
        missing (they are checked when it is used)."""
        t = self.t
        raw = self.defs[name]
        if not isinstance(raw, bool | Mapping):
            raise FnError(f'The definition of condition "{name}" is invalid: {raw}', ("conditions", name))
        tree = t.parse_condition(raw, ("conditions", name), check_params=params)
        if not isinstance(tree, bool | fn.Function):
            raise FnError(f'The definition of condition "{name}" is invalid: {fn.render(raw)}', ("conditions", name))
        return tree

    def decide(self, tree: Any) -> Any:
        """A condition's value; one that depends on what is not known yet (validate,
        preview: a parameter a parent stack passes from an attribute) takes that as null."""
        value = Evaluation(self.t, NullResolver()).eval(tree)
        if isinstance(value, fn.Unknown):
            try:
                value = Evaluation(self.t, NullResolver(), unknown_as_none=True).eval(tree)
            except (FnError, TemplateError, TypeError, ValueError):
                pass  # a function that refuses a null: left unknown (false)
        return value

    def as_condition(self, value: Any, path: tuple) -> bool:
        if isinstance(value, fn.Unknown):
            return False  # depends on a parameter nobody gave (validation only)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value in self.defs:
            return self.value(value, ("conditions", value))
        raise FnError(f'Invalid condition "{value}"', path)
