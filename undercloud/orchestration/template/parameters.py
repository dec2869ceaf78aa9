"""Template parameters: schema, type coercion and constraints, with Heat's messages."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from undercloud.masking import MASK, mask_text
from undercloud.orchestration.limits import LIMITS, TooLarge, exceeded, value_size
from undercloud.orchestration.template.functions import Unknown, has_unknown, json_text
from undercloud.orchestration.template.patterns import pattern_matches
from undercloud.orchestration.template.source import FnError

TYPES = ("string", "number", "comma_delimited_list", "json", "boolean")
PSEUDO = ("OS::stack_name", "OS::stack_id", "OS::project_id", "OS::region")

_TRUE = ("1", "t", "true", "on", "y", "yes")
_FALSE = ("0", "f", "false", "off", "n", "no")

# which constraints apply to which parameter types (Heat's valid_types)
_CONSTRAINT_TYPES = {
    "length": ("string", "comma_delimited_list", "json"),
    "range": ("number",),
    "modulo": ("number",),
    "allowed_values": ("string", "number", "comma_delimited_list", "boolean"),
    "allowed_pattern": ("string",),
    "custom_constraint": TYPES,
}


def str_to_num(value: Any) -> int | float:
    """Heat's Schema.str_to_num: int if it parses as one, else float, else ValueError."""
    if isinstance(value, bool):
        raise ValueError(f'Value "{value}" is invalid for data type "number".')
    if isinstance(value, int | float):
        return value
    try:
        return int(value)
    except (ValueError, TypeError):
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"could not convert string to float: {value!r}") from None
        except TypeError:
            raise ValueError(f'Value "{value}" is invalid for data type "number".') from None


def to_bool(value: Any) -> bool:
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"Unrecognized value '{value}', acceptable values are: "
                     "'0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'")


@dataclass
class Constraint:
    kind: str
    arg: Any
    description: str | None = None

    def _num(self, key: str) -> Any:
        return self.arg.get(key) if isinstance(self.arg, Mapping) else None

    def check(self, value: Any, ptype: str) -> None:
        """Raise ValueError with Heat's message when `value` breaks the constraint."""
        k = self.kind
        if k == "custom_constraint":
            return  # custom constraints name cloud lookups (nova.flavor...); nothing to ask here
        ok, msg = True, ""
        if k in ("range", "length"):
            lo, hi = self._num("min"), self._num("max")
            n = str_to_num(value) if k == "range" else len(value)
            ok = (lo is None or n >= lo) and (hi is None or n <= hi)
            if k == "range":
                msg = f"{value} is out of range (min: {lo}, max: {hi})"
            else:
                msg = f"length ({n}) is out of range (min: {lo}, max: {hi})"
        elif k == "modulo":
            step, offset = self._num("step"), self._num("offset")
            ok = str_to_num(value) % step == offset
            msg = f"{value} is not a multiple of {step} with an offset of {offset}"
        elif k == "allowed_values":
            allowed = tuple(self.arg)
            if isinstance(value, list):
                ok = all(v in allowed for v in value)
            elif ptype == "number":
                ok = str_to_num(value) in tuple(_maybe_num(a) for a in allowed)
            elif ptype == "boolean":
                ok = to_bool(value) in tuple(_maybe_bool(a) for a in allowed)
            else:
                ok = str(value) in tuple(str(a) for a in allowed)
            msg = (f"{json.dumps(value)} is not an allowed value "
                   f"[{', '.join(json.dumps(a) for a in allowed)}]")
        elif k == "allowed_pattern":
            ok = pattern_matches(self.arg, str(value))
            msg = f'"{value}" does not match pattern "{self.arg}"'
        if not ok:
            raise ValueError(self.description or msg)


def _maybe_num(v: Any) -> Any:
    try:
        return str_to_num(v)
    except ValueError:
        return v


def _maybe_bool(v: Any) -> Any:
    try:
        return to_bool(v)
    except ValueError:
        return v


@dataclass
class Parameter:
    """One template parameter; `value` is the coerced value (user's, else default)."""

    name: str
    type: str
    default: Any = None
    description: str = ""
    label: str | None = None
    hidden: bool = False
    immutable: bool = False
    tags: list = field(default_factory=list)
    constraints: list[Constraint] = field(default_factory=list)
    user_value: Any = None
    value: Any = None
    line: int = 0

    @property
    def has_value(self) -> bool:
        return self.user_value is not None or self.default is not None

    def shown(self, value: Any) -> Any:
        return MASK if self.hidden else value

    def coerce(self, raw: Any) -> Any:
        """The value in the parameter's type (ValueError with Heat's message if it cannot be)."""
        if isinstance(raw, Unknown):
            return raw
        check_size(raw)
        t = self.type
        if t == "number":
            return str_to_num(raw)
        if t == "boolean":
            return to_bool(raw)
        if t == "comma_delimited_list":
            if isinstance(raw, list | tuple):
                return [str(x) for x in raw]
            if not isinstance(raw, str):
                raise ValueError(f"Value must be a comma-delimited list string: {raw}")
            return [] if raw == "" else raw.split(",")
        if t == "json":
            if has_unknown(raw):  # parts known only at runtime (validate, preview): checked then
                return raw
            try:
                text = raw if isinstance(raw, str) else json.dumps(raw)
                return json.loads(text) if text else raw
            except (ValueError, TypeError) as exc:
                raise ValueError(f"Value must be valid JSON: {exc}") from None
        if isinstance(raw, Mapping | list):
            raise ValueError(f'Value "{raw}" is invalid for data type "string".')
        if isinstance(raw, bool):
            return "true" if raw else "false"
        return str(raw)

    def validate(self, raw: Any) -> Any:
        """Coerce and check constraints; ValueError `Parameter 'x' is invalid: ...`."""
        try:
            v = self.coerce(raw)
            if not isinstance(v, Unknown):
                for c in self.constraints:
                    c.check(v if self.type != "string" else str(v), self.type)
            return v
        except ValueError as exc:
            raise ValueError(f"Parameter '{self.name}' is invalid: {self.mask(str(exc), raw)}") from None

    def mask(self, message: str, raw: Any = None) -> str:
        """A hidden parameter's value never shows, not even inside an error message."""
        if not self.hidden:
            return message
        values = [v for v in (raw, self.default) if v is not None]
        if mask_text(message, secret_texts(values)) != message:
            return "the value does not satisfy the parameter's type or constraints"
        return message

    def to_dict(self) -> dict:
        return {
            "name": self.name, "type": self.type, "default": self.shown(self.default),
            "description": self.description, "label": self.label or self.name,
            "hidden": self.hidden, "immutable": self.immutable, "tags": self.tags,
        }


def check_size(value: Any) -> None:
    """ValueError for a value over the value limit (measured only up to the limit)."""
    if isinstance(value, str):
        n = len(value)
        if n <= LIMITS.value_chars:
            return
    elif isinstance(value, int | float | bool) or value is None:
        return
    else:
        try:
            value_size(value)
            return
        except TooLarge as exc:
            n = exc.args[0]
    raise ValueError(exceeded("value_chars", "the length of the value in characters", n))


def secret_texts(values: list) -> frozenset[str]:
    """The texts a hidden value could show as in a message: as text, repr and JSON, every
    string inside it (a password in a hidden json parameter), and those strings escaped."""
    out: set[str] = set()
    for v in values:
        if isinstance(v, Unknown) or v is None:
            continue
        try:
            value_size(v)
        except TooLarge:
            continue  # no message holds it whole; its strings are past the limit too
        forms = {str(v), repr(v), json_text(v)}
        todo = [v]
        while todo:
            x = todo.pop()
            if isinstance(x, str):
                if x is v or len(x) >= 6:  # strings inside: not the short words a map holds
                    forms.update((x, repr(x)[1:-1], json.dumps(x)[1:-1]))
            elif isinstance(x, Mapping):
                todo.extend(x.values())  # keys name things; values are the secrets
            elif isinstance(x, list | tuple):
                todo.extend(x)
        out.update(t for t in forms if len(t) >= 3)
    return frozenset(out)


def parse_schema(name: str, schema: Any, version: Any, path: tuple) -> Parameter:
    """A parameter definition from the template; FnError for a malformed one."""
    if not isinstance(schema, Mapping):
        raise FnError(f"Invalid parameter definition for {name}, expected a mapping", path)
    for key in schema:
        if key not in version.param_keys:
            raise FnError(f"Invalid key '{key}' for parameter ({name})", path + (key,))
    ptype = schema.get("type")
    if ptype is None:
        raise FnError(f"Missing parameter type for parameter: {name}", path)
    if ptype not in TYPES:
        raise FnError(f"Invalid type ({ptype})", path + ("type",))
    tags = schema.get("tags") or []
    if not isinstance(tags, list):
        raise FnError(f"Tags property should be a list for parameter: {name}", path + ("tags",))
    for key in ("hidden", "immutable"):
        if key in schema and not isinstance(schema[key], bool):
            try:
                to_bool(schema[key])
            except ValueError as exc:
                raise FnError(str(exc), path + (key,)) from None
    p = Parameter(
        name=name, type=ptype, default=schema.get("default"),
        description=str(schema.get("description") or ""), label=schema.get("label"),
        hidden=_flag(schema.get("hidden")), immutable=_flag(schema.get("immutable")), tags=list(tags),
        line=getattr(schema, "line", 0),
    )
    p.constraints = list(_constraints(name, schema.get("constraints"), version, ptype, path + ("constraints",)))
    if p.default is not None:
        try:
            v = p.coerce(p.default)
            for c in p.constraints:
                c.check(v if p.type != "string" else str(v), p.type)
        except ValueError as exc:
            shown = MASK if p.hidden else p.default
            raise FnError(f"Parameter '{name}' is invalid: Invalid default {shown} ({p.mask(str(exc))})",
                          path + ("default",)) from None
    return p


def _flag(v: Any) -> bool:
    return bool(v) if isinstance(v, bool) or v is None else to_bool(v)


def _constraints(name: str, defs: Any, version: Any, ptype: str, path: tuple):
    if defs is None:
        return
    if not isinstance(defs, list):
        raise FnError(f"Invalid parameter constraints for parameter {name}, expected a list", path)
    for i, d in enumerate(defs):
        p = path + (i,)
        if not isinstance(d, Mapping):
            raise FnError("Invalid parameter constraints, expected a mapping", p)
        for key in d:
            if key not in version.constraints + ("description",):
                raise FnError(f"Invalid key '{key}' for parameter constraints", p + (key,))
        kinds = [k for k in d if k != "description"]
        if not kinds:
            raise FnError("No constraint expressed", p)
        kind = kinds[0]
        arg = d[kind]
        if ptype not in _CONSTRAINT_TYPES[kind]:
            raise FnError(f"{kind} constraint invalid for {ptype}", p + (kind,))
        if kind in ("range", "length", "modulo"):
            keys = ("step", "offset") if kind == "modulo" else ("min", "max")
            if not isinstance(arg, Mapping):
                raise FnError(f"Invalid {kind} constraint, expected a mapping", p + (kind,))
            for k in arg:
                if k not in keys:
                    raise FnError(f"Invalid key '{k}' for {kind} constraint", p + (kind, k))
            for k in keys:
                if arg.get(k) is not None and (isinstance(arg[k], bool) or not isinstance(arg[k], int | float)):
                    raise FnError(f"{'/'.join(keys)} must be numeric", p + (kind, k))
            if kind == "modulo":
                if arg.get("step") is None or arg.get("offset") is None:
                    raise FnError("A modulo constraint must have a step value and an offset value "
                                  "specified.", p + (kind,))
                if arg["step"] == 0:
                    raise FnError("step cannot be 0.", p + (kind,))
            elif arg.get("min") is None and arg.get("max") is None:
                raise FnError(f"A {kind} constraint must have a min value and/or a max value "
                              "specified.", p + (kind,))
        elif kind == "allowed_values":
            if not isinstance(arg, list):
                raise FnError("AllowedValues must be a list", p + (kind,))
        elif kind == "allowed_pattern":
            if not isinstance(arg, str):
                raise FnError("AllowedPattern must be a string", p + (kind,))
            try:
                re.compile(arg)
            except re.error as exc:
                raise FnError(f"Invalid pattern {arg!r}: {exc}", p + (kind,)) from None
        desc = d.get("description")
        yield Constraint(kind, arg, str(desc) if desc is not None else None)
