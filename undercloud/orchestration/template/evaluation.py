"""Resolution: one pass over a parsed snippet (`Evaluation`) with the resolver that
supplies runtime values (the engine's, or placeholders for validation and preview)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from undercloud.orchestration.template import functions as fn
from undercloud.orchestration.template.source import FnError, dotted

if TYPE_CHECKING:
    from undercloud.orchestration.template.stack import StackTemplate


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


class NullResolver:
    """For values computed from parameters alone (conditions, names of dependencies)."""

    def get_resource(self, name: str) -> Any:
        return fn.Unknown({"get_resource": name})

    def get_attr(self, name: str, attr: str | None, path: list) -> Any:
        return fn.Unknown({"get_attr": [name, attr, *path]})


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


class Evaluation:
    """One resolution pass: a template, and the resolver for runtime values."""

    __slots__ = ("t", "resolver", "mask_hidden", "unknown_as_none")

    def __init__(self, t: StackTemplate, resolver: Any, mask_hidden: bool = False, unknown_as_none: bool = False):
        self.t, self.resolver, self.mask_hidden = t, resolver, mask_hidden
        # a condition previewed: what is not known yet counts as null, as Heat's preview has it
        self.unknown_as_none = unknown_as_none

    def eval(self, x: Any) -> Any:
        if x.__class__ in fn.SCALARS:  # a subclass of a scalar falls through to the end
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
        values = self.t.param_values
        if name not in values:
            raise FnError(f"The Parameter ({name}) was not provided.", path)
        if self.mask_hidden and name in self.t.parameters and self.t.parameters[name].hidden:
            return fn.Unknown({"get_param": name})
        return values[name]

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
        return self.t.conditions.as_condition(v, path)

    def facade(self, attr: str) -> Any:
        return self.t.facade.get(attr)
