"""HOT intrinsic functions: one small class per function, as Heat's hot/functions.py does.

A snippet is parsed once (`parse`) into a tree where each `{fn: args}` whose name the
template version allows is a `Function`; `check` refuses wrong argument shapes at parse
time, `result` computes the value, `deps` names the resources it needs. Values that cannot
be known yet (a resource attribute during validation or preview, a parameter nobody gave)
are `Unknown`: a function that meets one returns an `Unknown` holding its own rendered
snippet, so preview shows what is left to resolve.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import string
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib import parse as urlparse

from undercloud.orchestration.limits import LIMITS, TooLarge, exceeded, value_size
from undercloud.orchestration.template.source import FnError, kind

if TYPE_CHECKING:
    from undercloud.orchestration.template.stack import Evaluation, StackTemplate


class Unknown:
    """A value not known yet; `snippet` is what would compute it (for previews). A function's
    own Unknown renders its snippet when first asked: validation mostly asks only whether a
    value is known."""

    __slots__ = ("_snippet", "_call")

    def __init__(self, snippet: Any = None, call: tuple[str, Any] | None = None):
        self._snippet, self._call = snippet, call  # call: (function name, its evaluated arguments)

    @property
    def snippet(self) -> Any:
        if self._call is not None:
            name, args = self._call
            self._snippet, self._call = {name: render(args)}, None
        return self._snippet

    def __repr__(self) -> str:
        return f"Unknown({self.snippet!r})"


class _HasUnknown(Exception):
    pass


# The exact classes of YAML scalars: a set lookup where isinstance (with a union, or an ABC)
# costs more; a tree has 100,000s of them. Subclasses still take the isinstance paths.
SCALARS = frozenset((str, int, float, bool, type(None)))


def render(value: Any) -> Any:
    """Plain data for output: Unknowns become the snippet that would compute them."""
    c = value.__class__
    if c in SCALARS:
        return value
    if isinstance(value, Unknown):
        return render(value.snippet)
    if isinstance(value, Function):
        return {value.fn: render(value.args)}
    if isinstance(value, dict) or isinstance(value, Mapping):
        return {k: render(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [render(v) for v in value]
    return value


def has_unknown(value: Any) -> bool:
    # called on every value a function computes: scalars (most values) answer at once
    c = value.__class__
    if c in SCALARS:
        return False
    if isinstance(value, Unknown):
        return True
    if isinstance(value, list | tuple):
        for v in value:
            if has_unknown(v):
                return True
        return False
    if isinstance(value, dict) or isinstance(value, Mapping):
        for v in value.values():
            if has_unknown(v):
                return True
        return False
    return False


def _is_list(v: Any) -> bool:
    return isinstance(v, list) or (isinstance(v, Sequence) and not isinstance(v, str))  # list first: no abc


def _dumps(v: Any) -> str:
    return json.dumps(v, sort_keys=True)


def brief(v: Any, n: int = 200) -> str:
    """A value quoted in a message, cut to `n` characters (a last '…' shows the cut)."""
    text = repr(v) if not isinstance(v, str) or len(v) <= n else repr(v[:n])
    return text if len(text) <= n else text[: n - 1] + "…"


def json_text(v: Any) -> str:
    try:
        return json.dumps(v, sort_keys=True)
    except (TypeError, ValueError):
        return str(v)


class Function:
    """One `{fn: args}` call. Subclasses override `check`, `result` and maybe `deps`."""

    __slots__ = ("t", "fn", "args", "path")
    macro = False  # a macro receives raw args and parses them itself (e.g. `if`)

    def __init__(self, t: StackTemplate, fn: str, args: Any, path: tuple):
        self.t, self.fn, self.args, self.path = t, fn, args, path
        self.check()
        sink = t.dep_sink  # the resources a snippet needs are noted while it is parsed
        if sink is not None:
            dep = self.own_dep()
            if dep is not None:
                sink.add(dep)
        if not self.keeps_template():
            self.t = None  # a parsed tree outlives the template that parsed it (StackTemplate.parse_all)

    def keeps_template(self) -> bool:
        """Whether this call needs its template after parsing (most need only the evaluation's)."""
        return False

    def own_dep(self) -> str | None:
        """The resource this call itself names (get_resource, get_attr), if known now."""
        return None

    def check(self) -> None:
        """Refuse argument shapes that are wrong whatever the values (raise FnError)."""

    def result(self, ev: Evaluation) -> Any:
        raise NotImplementedError

    def value(self, ev: Evaluation) -> Any:
        """Evaluate; a function whose arguments are not known yet is itself Unknown."""
        try:
            return self.result(ev)
        except _HasUnknown as exc:
            # known() already evaluated the whole args (the usual case): not evaluated again
            done = exc.args[1] if exc.args and exc.args[0] is self.args else ev.eval(self.args)
            return Unknown(call=(self.fn, done))
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            # arguments of a shape no check foresaw: still one line naming the function
            raise self.err(f'"{self.fn}": {exc}') from None

    def deps(self) -> Iterator[str]:
        return iter_deps(self.args)

    def err(self, message: str) -> FnError:
        return FnError(message, self.path)

    def too_large(self, n: int) -> FnError:
        return self.err(f'"{self.fn}": ' + exceeded("value_chars", "the length of its result in characters", n))

    def checked_size(self, value: Any) -> None:
        """Refuse a value over the value limit (measured only up to the limit)."""
        try:
            value_size(value)
        except TooLarge as exc:
            raise self.too_large(exc.args[0]) from None

    def joined(self, delim: str, items: list[str]) -> str:
        """delim.join(items), refused before it is built when it would be over the limit."""
        n = sum(map(len, items)) + len(delim) * max(0, len(items) - 1)
        if n > LIMITS.value_chars:
            raise self.too_large(n)
        return delim.join(items)


def known(ev: Evaluation, snippet: Any) -> Any:
    """Evaluate `snippet` fully; raise _HasUnknown if anything in it is not known yet."""
    v = ev.eval(snippet)
    if has_unknown(v):
        if ev.unknown_as_none:
            return _as_none(v)
        raise _HasUnknown(snippet, v)
    return v


def _as_none(value: Any) -> Any:
    if isinstance(value, Unknown):
        return None
    if isinstance(value, Mapping):
        return {k: _as_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_as_none(v) for v in value]
    return value


def iter_deps(snippet: Any) -> Iterator[str]:
    if isinstance(snippet, str | int | float | bool) or snippet is None:
        return
    if isinstance(snippet, Function):
        yield from snippet.deps()
    elif isinstance(snippet, dict):
        for v in snippet.values():
            yield from iter_deps(v)
    elif isinstance(snippet, list):
        for v in snippet:
            yield from iter_deps(v)


def _literal(v: Any) -> bool:
    return not isinstance(v, Function)


# --------------------------------------------------------------------------- parameters

class GetParam(Function):
    __slots__ = ()

    def check(self) -> None:
        a = self.args
        if not a:
            raise self.err(f'Function "{self.fn}" must have arguments')
        if isinstance(a, str):
            name = a
        elif isinstance(a, list):
            name = a[0]
        elif isinstance(a, Function):
            return
        else:
            raise self.err(f'Argument to "{self.fn}" must be string or list')
        if isinstance(name, str):
            self.t.check_param(name, self.path)
        elif _literal(name):
            raise self.err(f'Parameter name in "{self.fn}" must be string')

    def result(self, ev: Evaluation) -> Any:
        a = known(ev, self.args)
        if isinstance(a, str):
            name, path = a, []
        elif isinstance(a, list) and a:
            name, path = a[0], a[1:]
        else:
            raise self.err(f'Argument to "{self.fn}" must be string or list')
        if not isinstance(name, str):
            raise self.err(f'Parameter name in "{self.fn}" must be string')
        value = ev.param(name, self.path)
        if isinstance(value, Unknown):
            return Unknown({self.fn: render(a)})
        for key in path:  # any path that misses (or cannot be walked) yields "", as in Heat
            if isinstance(value, Unknown):  # a part not known yet (a json value holding a get_attr):
                # unknown; taken as null (conditions at validation), a path through it gives ""
                return "" if ev.unknown_as_none else Unknown({self.fn: render(a)})
            if not isinstance(value, Mapping | list | tuple | str) or not isinstance(key, int | str):
                return ""
            if not isinstance(value, Mapping) and isinstance(key, str):
                try:
                    key = int(key)
                except ValueError:
                    return ""
            try:
                value = value[key]
            except (KeyError, IndexError, TypeError):
                return ""
        return value


class Ref(GetParam):
    """CFN `Ref` (2013-05-23 only): a parameter, else a resource."""

    __slots__ = ("resource",)

    def check(self) -> None:
        # a literal name that is not a parameter names a resource
        self.resource = self.args if isinstance(self.args, str) and not self.t.is_param(self.args) else None
        if self.resource is not None:
            self.t.check_resource(self.args, self.path)
        elif not isinstance(self.args, str | Function):
            raise self.err(f'Argument to "{self.fn}" must be a string')

    def result(self, ev: Evaluation) -> Any:
        name = known(ev, self.args)
        if ev.t.is_param(name):
            return super().result(ev)
        return ev.get_resource(name, self.path)

    def deps(self) -> Iterator[str]:
        if self.resource is not None:
            yield self.resource

    def own_dep(self) -> str | None:
        return self.resource


# ---------------------------------------------------------------------------- resources

class GetResource(Function):
    __slots__ = ()

    def check(self) -> None:
        if isinstance(self.args, str):
            self.t.check_resource(self.args, self.path)
        elif _literal(self.args):
            raise self.err(f'Argument to "{self.fn}" must be a string')
        else:
            self.t.note_value_read()  # own_dep computes the name from this template's values

    def result(self, ev: Evaluation) -> Any:
        name = known(ev, self.args)
        if not isinstance(name, str):
            raise self.err(f'Argument to "{self.fn}" must be a string')
        return ev.get_resource(name, self.path)

    def deps(self) -> Iterator[str]:
        yield from iter_deps(self.args)
        name = self.own_dep()
        if name is not None:
            yield name

    def own_dep(self) -> str | None:
        if isinstance(self.args, str):
            return self.args
        name = self.t.static_value(self.args)
        return name if isinstance(name, str) else None

    def keeps_template(self) -> bool:
        return not isinstance(self.args, str)  # own_dep computes the name


class GetAttThenSelect(Function):
    """get_attr of 2013-05-23: [resource, attribute, path...], the path selects in the value."""

    __slots__ = ()
    allow_all = False

    def check(self) -> None:
        a = self.args
        if isinstance(a, Function):
            return
        if not isinstance(a, list):
            raise self.err(f'Argument to "{self.fn}" must be a list')
        if len(a) < (1 if self.allow_all else 2):
            if self.allow_all:
                raise self.err(f'Arguments to "{self.fn}" can be of the next forms: '
                               "[resource_name] or [resource_name, attribute, (path), ...]")
            raise self.err(f'Arguments to "{self.fn}" must be of the form '
                           "[resource_name, attribute, (path), ...]")
        if isinstance(a[0], str):
            self.t.check_resource(a[0], self.path)
        elif _literal(a[0]):
            raise self.err(f'Resource name in "{self.fn}" must be a string')
        else:
            self.t.note_value_read()  # own_dep computes the name from this template's values

    def result(self, ev: Evaluation) -> Any:
        a = known(ev, self.args)
        if not isinstance(a, list) or not a:
            raise self.err(f'Argument to "{self.fn}" must be a list')
        attr = a[1] if len(a) > 1 else None
        return ev.get_attr(a[0], attr, list(a[2:]), self.path)

    def deps(self) -> Iterator[str]:
        yield from iter_deps(self.args)
        name = self.own_dep()
        if name is not None:
            yield name

    def own_dep(self) -> str | None:
        if isinstance(self.args, list) and self.args:
            name = self.args[0]
            if not isinstance(name, str):  # a literal name is its own static value
                name = self.t.static_value(name)
            return name if isinstance(name, str) else None
        return None

    def keeps_template(self) -> bool:
        return not (isinstance(self.args, list) and self.args and isinstance(self.args[0], str))


class GetAtt(GetAttThenSelect):
    __slots__ = ()


class GetAttAllAttributes(GetAtt):
    """get_attr from 2015-10-15: [resource] alone gives all attributes as a map."""

    __slots__ = ()
    allow_all = True


class ResourceFacade(Function):
    __slots__ = ()
    ATTRS = ("metadata", "deletion_policy", "update_policy")

    def check(self) -> None:
        if self.args not in self.ATTRS:
            raise self.err(f'Incorrect arguments to "{self.fn}" should be one of: {", ".join(self.ATTRS)}')

    def result(self, ev: Evaluation) -> Any:
        return ev.facade(self.args)


class GetFile(Function):
    __slots__ = ("content",)

    def check(self) -> None:
        if not isinstance(self.args, str):
            raise self.err(f'Argument to "{self.fn}" must be a string')
        self.content = self.t.get_file(self.args, self.path)

    def result(self, ev: Evaluation) -> Any:
        return self.content


# ------------------------------------------------------------------------------ strings

class Join(Function):
    """list_join up to 2015-04-30: [delimiter, list]."""

    __slots__ = ()

    def check(self) -> None:
        example = f'"{self.fn}" : [ " ", [ "str1", "str2"]]'
        if not isinstance(self.args, list):
            raise self.err(f'Incorrect arguments to "{self.fn}" should be: {example}')
        if len(self.args) != 2:
            raise self.err(f'Incorrect arguments to "{self.fn}" should be: {example}')

    def result(self, ev: Evaluation) -> Any:
        delim, strings = (known(ev, x) for x in self.args)
        if strings is None:
            strings = []
        if not _is_list(strings):
            raise self.err(f'"{self.fn}" must operate on a list')
        if not isinstance(delim, str):
            raise self.err(f'"{self.fn}" delimiter must be a string')
        out = []
        for s in strings:
            if s is None:
                s = ""
            if not isinstance(s, str):
                raise self.err(f"Items to join must be strings not {brief(s)}")
            out.append(s)
        return self.joined(delim, out)


class JoinMultiple(Function):
    """list_join from 2015-10-15: [delimiter, list, list...]; maps and lists join as JSON."""

    __slots__ = ()

    def check(self) -> None:
        example = f'"{self.fn}" : [ " ", [ "str1", "str2"] ...]'
        if not isinstance(self.args, list) or len(self.args) < 2:
            raise self.err(f'Incorrect arguments to "{self.fn}" should be: {example}')

    def result(self, ev: Evaluation) -> Any:
        args = known(ev, self.args)
        delim, lists = args[0], args[1:]
        strings: list = []
        for jl in lists:
            if jl:
                if not _is_list(jl):
                    raise self.err(f'"{self.fn}" must operate on a list')
                strings += jl
        if not isinstance(delim, str):
            raise self.err(f'"{self.fn}" delimiter must be a string')
        out = []
        for s in strings:
            if s is None:
                out.append("")
            elif isinstance(s, str):
                out.append(s)
            elif isinstance(s, Mapping | list | tuple):
                self.checked_size(s)
                out.append(_dumps(s))
            else:
                raise self.err(f"Items to join must be string, map or list not {brief(s)}")
        return self.joined(delim, out)


class Replace(Function):
    """str_replace: longer keys first; substituted text is never scanned again."""

    __slots__ = ()
    strict = False
    allow_empty = True

    def check(self) -> None:
        if not isinstance(self.args, Mapping):
            raise self.err(f'Arguments to "{self.fn}" must be a map')
        if "params" not in self.args or "template" not in self.args:
            raise self.err(f'"{self.fn}" syntax should be {self.fn}: {{template: ..., params: {{var: value}}}}')
        if not isinstance(self.args["params"], Mapping | Function):
            raise self.err(f'"{self.fn}" parameters must be a mapping')

    def replacement(self, value: Any, key: str) -> str:
        if value is None:
            return ""
        if not isinstance(value, str | int | float | bool):
            raise self.err(f'"{self.fn}" params must be strings or numbers, param {key} is not valid')
        return str(value)

    def result(self, ev: Evaluation) -> Any:
        template = known(ev, self.args["template"])
        mapping = known(ev, self.args["params"])
        if not isinstance(template, str):
            raise self.err(f'"{self.fn}" template must be a string')
        if not isinstance(mapping, Mapping):
            raise self.err(f'"{self.fn}" params must be a map')
        for k in mapping:
            if not isinstance(k, str):
                raise self.err(f'"{self.fn}" param placeholders must be strings')
        keys = sorted(sorted(mapping), key=len, reverse=True)
        unused = set(mapping)

        def replace(strings: list[str], keys: list[str]) -> list[str]:
            if not keys:
                return strings
            key, rest = keys[0], keys[1:]
            value = self.replacement(mapping[key], key)
            out = []
            for s in strings:
                parts = s.split(key)
                if len(parts) > 1:
                    unused.discard(key)
                    parts = replace(parts, rest)
                    n = sum(map(len, parts)) + len(value) * (len(parts) - 1)
                    if n > LIMITS.value_chars:  # refused before it is built
                        raise self.too_large(n)
                    out.append(value.join(parts))
                else:
                    out.append(replace(parts, rest)[0])
            return out

        text = replace([template], keys)[0]
        if self.strict and unused:
            missing = ",".join(sorted(sorted(unused), key=len, reverse=True))
            raise self.err(f"The following params were not found in the template: {missing}")
        return text


class ReplaceJson(Replace):
    """str_replace from 2015-10-15: list and map values are substituted as JSON."""

    __slots__ = ()

    def replacement(self, value: Any, key: str) -> str:
        empty = FnError(f"{self.fn} has an undefined or empty value for param {key}, "
                        "must be a defined non-empty value", self.path)
        if value is None:
            if self.allow_empty:
                return ""
            raise empty
        if not isinstance(value, str | int | float | bool):
            if isinstance(value, Mapping | list | tuple):
                if not self.allow_empty and not value:
                    raise empty
                self.checked_size(value)
                return _dumps(value)
            raise self.err(f'"{self.fn}" params must be strings, numbers, list or map.')
        text = str(value)
        if not self.allow_empty and not text:
            raise empty
        return text


class ReplaceJsonStrict(ReplaceJson):
    __slots__ = ()
    strict = True


class ReplaceJsonVeryStrict(ReplaceJsonStrict):
    __slots__ = ()
    allow_empty = False


class StrSplit(Function):
    __slots__ = ()

    def _example(self) -> str:
        return f'Incorrect arguments to "{self.fn}" should be: "{self.fn}" : [ ",", "apples,pears", <index>]'

    def check(self) -> None:
        if isinstance(self.args, str | Mapping) or not isinstance(self.args, list | Function):
            raise self.err(self._example())

    def result(self, ev: Evaluation) -> Any:
        args = list(known(ev, self.args))
        if len(args) < 2:
            raise self.err(self._example())
        delim, text, rest = args[0], args[1], args[2:]
        if text is None:
            return None
        if not isinstance(text, str) or not isinstance(delim, str):
            raise self.err(self._example())
        parts = text.split(delim)
        if not rest:
            return parts
        try:
            index = int(rest[0])
        except (ValueError, TypeError):
            raise self.err(f'Incorrect index to "{self.fn}" should be: "{self.fn}" : '
                           '[ ",", "apples,pears", <index>]') from None
        try:
            return parts[index]
        except IndexError:
            raise self.err(f'Incorrect index to "{self.fn}" should be between 0 and '
                           f"{len(parts) - 1}") from None


class Digest(Function):
    __slots__ = ()

    def check(self) -> None:
        if isinstance(self.args, list) and all(isinstance(a, str) for a in self.args):
            self._validate(self.args)

    def _validate(self, args: Any) -> None:
        if not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
            raise self.err(f'Argument to function "{self.fn}" must be a list of strings')
        if len(args) != 2:
            raise self.err(f'Function "{self.fn}" usage: ["<algorithm>", "<value>"]')
        if args[0].lower() not in hashlib.algorithms_available:
            raise self.err(f"Algorithm must be one of {sorted(hashlib.algorithms_available)}")

    def result(self, ev: Evaluation) -> Any:
        args = known(ev, self.args)
        self._validate(args)
        h = hashlib.new(args[0])
        h.update(args[1].encode("latin-1"))
        return h.hexdigest()


class MakeURL(Function):
    __slots__ = ()
    KEYS = ("scheme", "username", "password", "host", "port", "path", "query", "fragment")

    def check(self) -> None:
        if isinstance(self.args, Function):
            return
        if not isinstance(self.args, Mapping):
            raise self.err(f'The arguments to "{self.fn}" must be a map')
        bad = sorted(set(self.args) - set(self.KEYS))
        if bad:
            raise self.err(f'Invalid arguments to "{self.fn}": {", ".join(map(str, bad))}')
        self._check(self.args)

    def _check(self, args: Mapping) -> None:
        for key in self.KEYS:
            if key not in args or isinstance(args[key], Function):
                continue
            v = args[key]
            if key == "query":
                if not isinstance(v, Mapping):
                    raise self.err(f'The "query" argument to "{self.fn}" must be a map')
            elif key == "port":
                try:
                    port = int(v)
                except (ValueError, TypeError):
                    raise self.err(f'Invalid URL port "{v}" for {self.fn}') from None
                if not 0 < port <= 65535:
                    raise self.err(f"Invalid URL port {port}, must be in range 1-65535")
            elif not isinstance(v, str):
                raise self.err(f'The "{key}" argument to "{self.fn}" must be a string')

    def result(self, ev: Evaluation) -> Any:
        args = known(ev, self.args)
        if not isinstance(args, Mapping):
            raise self.err(f'The arguments to "{self.fn}" must be a map')
        self._check(args)
        scheme = args.get("scheme", "")
        if ":" in scheme:
            raise self.err("URL \"scheme\" should not contain ':'")
        netloc = ""
        user = urlparse.quote(args.get("username", ""), safe="")
        password = urlparse.quote(args.get("password", ""), safe="")
        if user or password:
            netloc += user + (":" + password if password else "") + "@"
        host = args.get("host", "")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        host = urlparse.quote(host, safe=":")
        netloc += f"[{host}]" if ":" in host else host
        port = args.get("port", "")
        if port:
            netloc += f":{port}"
        path = urlparse.quote(args.get("path", ""))
        query = urlparse.urlencode(args.get("query", {})).replace("%2F", "/")
        fragment = urlparse.quote(args.get("fragment", ""))
        return urlparse.urlunsplit((scheme, netloc, path, query, fragment))


# -------------------------------------------------------------------------- collections

class Repeat(Function):
    """repeat of 2015-04-30: for_each values must be lists; all combinations."""

    __slots__ = ()
    maps_ok = False

    def check(self) -> None:
        if not isinstance(self.args, Mapping):
            raise self.err(f'Arguments to "{self.fn}" must be a map')
        if "for_each" not in self.args or "template" not in self.args:
            raise self.err('"repeat" syntax should be repeat: {template: "This is %var%", '
                           "for_each: {%var%: [a, b, c]}}")
        fe = self.args["for_each"]
        if not isinstance(fe, Function | Mapping):
            raise self.err(f'The "for_each" argument to "{self.fn}" must contain a map')
        self.check_extra()

    def check_extra(self) -> None:
        pass

    def nested_loop(self) -> bool:
        return True

    def _valid(self, v: Any) -> None:
        ok = (list, tuple, Mapping) if self.maps_ok else (list, tuple)
        if not isinstance(v, ok):
            kinds = "lists or maps" if self.maps_ok else "lists"
            raise self.err(f'The values of the "for_each" argument to "{self.fn}" must be {kinds}')

    @staticmethod
    def _replace(keys: Sequence, values: Sequence, tmpl: Any) -> Any:
        if isinstance(tmpl, str):
            for k, v in zip(keys, values):
                tmpl = tmpl.replace(k, v)
            return tmpl
        if isinstance(tmpl, list | tuple):
            return [Repeat._replace(keys, values, x) for x in tmpl]
        if isinstance(tmpl, Mapping):
            return {Repeat._replace(keys, values, k): Repeat._replace(keys, values, v)
                    for k, v in tmpl.items()}
        return tmpl

    def result(self, ev: Evaluation) -> Any:
        for_each = known(ev, self.args["for_each"])
        if not isinstance(for_each, Mapping):
            raise self.err(f'The "for_each" argument to "{self.fn}" must contain a map')
        if not for_each:
            return []
        keys, lists = zip(*for_each.items())
        values, lens = [], []
        for v in lists:
            if v is None:
                values.append([])
            else:
                self._valid(v)
                values.append(list(v))
                lens.append(len(v))
        nested = self.nested_loop()
        if not nested and len(set(lens)) > 1:
            raise self.err(f"For {self.fn}, the length of for_each values should be equal if no nested loop.")
        template = known(ev, self.args["template"])
        # refused before any copy is made: copies times the template's size
        copies = math.prod(map(len, values)) if nested else min(map(len, values))
        if copies:
            try:
                each = value_size(template, LIMITS.value_chars // copies + 1)
            except TooLarge:
                raise self.too_large(copies * (LIMITS.value_chars // copies + 1)) from None
            for k, v in zip(keys, values):  # what the substitutions add to each copy
                try:
                    longest = max(map(len, v))
                except TypeError:  # not strings: refused below
                    continue
                if isinstance(k, str) and k and longest > len(k):
                    each += sum(t.count(k) for t in _strings(template)) * (longest - len(k))
            if copies * each > LIMITS.value_chars:
                raise self.too_large(copies * each)
        combos = itertools.product(*values) if nested else zip(*values)
        for k in keys:
            if not isinstance(k, str):
                raise self.err(f'The "for_each" keys of "{self.fn}" must be strings')
        out = []
        for combo in combos:
            for x in combo:
                if not isinstance(x, str):  # Heat fails here too (str.replace needs text)
                    raise self.err(f'"{self.fn}": for_each values must be strings, not {kind(x)} ({brief(x)})')
            out.append(self._replace(keys, combo, template))
        return out


def _strings(value: Any) -> Iterator[str]:
    """Every string in a value, keys of maps included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


class RepeatWithMap(Repeat):
    """repeat from 2016-10-14: for_each values may be maps (their keys are used)."""

    __slots__ = ()
    maps_ok = True


class RepeatWithNestedLoop(RepeatWithMap):
    """repeat from 2017-09-01: `permutations: false` pairs the lists instead."""

    __slots__ = ()

    def check_extra(self) -> None:
        p = self.args.get("permutations", True)
        if not isinstance(p, bool | Function):
            raise self.err(f'"permutations" should be boolean type for {self.fn} function.')

    def nested_loop(self) -> bool:
        return self.args.get("permutations", True) is not False


class MapMerge(Function):
    __slots__ = ()

    def check(self) -> None:
        if not isinstance(self.args, list | Function):
            raise self.err(f'Incorrect arguments to "{self.fn}" should be: '
                           f'"{self.fn}" : [ {{ "key1": "val1" }}, {{ "key2": "val2" }} ]')

    def result(self, ev: Evaluation) -> Any:
        args = known(ev, self.args)
        if not _is_list(args):
            raise self.err(f'Incorrect arguments to "{self.fn}" should be: '
                           f'"{self.fn}" : [ {{ "key1": "val1" }}, {{ "key2": "val2" }} ]')
        out: dict = {}
        for m in args:
            if m is None:
                continue
            if not isinstance(m, Mapping):
                raise self.err(f"Incorrect arguments: Items to merge must be maps. {brief(m)} "
                               f"is type {type(m)} instead of a dict")
            out.update(m)
        return out


class MapReplace(Function):
    __slots__ = ()

    def _bad(self) -> FnError:
        return self.err(f'Incorrect arguments to "{self.fn}" should be: "{self.fn}" : [ {{ "key1": "val1" }}, '
                        '{"keys": {"key1": "key2"}, "values": {"val1": "val2"}}]')

    def check(self) -> None:
        if isinstance(self.args, Function):
            return
        if not isinstance(self.args, list) or len(self.args) != 2:
            raise self._bad()
        repl = self.args[1]
        if isinstance(repl, Mapping) and set(repl) - {"keys", "values"}:
            raise self._bad()

    def result(self, ev: Evaluation) -> Any:
        args = known(ev, self.args)
        if not isinstance(args, list) or len(args) != 2:
            raise self._bad()

        def as_map(m: Any) -> Mapping:
            if m is None:
                return {}
            if not isinstance(m, Mapping):
                raise self.err(f'Incorrect arguments: to "{self.fn}", arguments must be a list of maps.')
            return m

        in_map, repl = as_map(args[0]), as_map(args[1])
        if set(repl) - {"keys", "values"}:
            raise self._bad()
        keys, values = as_map(repl.get("keys", {})), as_map(repl.get("values", {}))
        out: dict = {}
        for k, v in in_map.items():
            key = keys.get(k)
            if key is None:
                key = k
            elif key in in_map and key != k:
                raise self.err(f"key replacement {key} collides with a key in the input map")
            elif key in out:
                raise self.err(f"key replacement {key} collides with a key in the output map")
            try:
                out[key] = values.get(v, v)
            except TypeError:  # unhashable value: left as is
                out[key] = v
        return out


class ListConcat(Function):
    __slots__ = ()
    unique = False

    def check(self) -> None:
        if not isinstance(self.args, list | Function):
            raise self.err(f'Incorrect arguments to "{self.fn}" should be: '
                           f'"{self.fn}" : [ [ <value 1>, <value 2> ], [ <value 3>, <value 4> ] ]')

    def result(self, ev: Evaluation) -> Any:
        args = known(ev, self.args)
        if not _is_list(args):
            raise self.err(f'Incorrect arguments to "{self.fn}" should be: '
                           f'"{self.fn}" : [ [ <value 1>, <value 2> ], [ <value 3>, <value 4> ] ]')
        out: list = []
        for m in args:
            if m is None:
                continue
            if not _is_list(m):
                raise self.err("Incorrect arguments: Items to concat must be lists. "
                               f"{brief(args)} contains an item that is not a list: {brief(m)}")
            out.extend(m)
        self.checked_size(out)
        if not self.unique:
            return out
        uniq: list = []
        for x in out:
            if x not in uniq:
                uniq.append(x)
        return uniq


class ListConcatUnique(ListConcat):
    __slots__ = ()
    unique = True


class Filter(Function):
    __slots__ = ()

    def check(self) -> None:
        if isinstance(self.args, Function):
            return
        if not isinstance(self.args, list):
            raise self.err(f'Argument to "{self.fn}" must be a list')
        if len(self.args) != 2:
            raise self.err(f'"{self.fn}" expected 2 arguments of the form [values, sequence] but got '
                           f"{len(self.args)} arguments instead")

    def result(self, ev: Evaluation) -> Any:
        values, sequence = known(ev, self.args)
        if not sequence:
            return sequence
        if not isinstance(sequence, list):
            raise self.err(f'"{self.fn}" only works with lists')
        if not values:
            return sequence
        if not isinstance(values, list):
            raise self.err(f'"{self.fn}" filters a list of values')
        return [x for x in sequence if x not in values]


class Contains(Function):
    __slots__ = ()

    def check(self) -> None:
        if not self.args or not isinstance(self.args, list):
            raise self.err(f'Incorrect arguments to "{self.fn}" should be: '
                           f'"{self.fn}" : [ "value1", [ "value1", "value2"]]')
        if len(self.args) != 2:
            raise self.err(f'Arguments to "{self.fn}" must be of the form: [value1, [value1, value2]]')

    def result(self, ev: Evaluation) -> Any:
        value, seq = known(ev, self.args)
        if not isinstance(seq, Sequence):
            raise self.err(f'Second argument to "{self.fn}" should be a sequence.')
        return value in seq


class _PlainFormatter(string.Formatter):
    """str.format that fills fields by position or name only: no attribute or item lookups
    (yaql 3 dropped its `format` for those: OSSA-2024-001) and no width over 9999."""

    def get_field(self, field_name, args, kwargs):
        if "." in field_name or "[" in field_name:
            raise ValueError(f"format field {{{field_name}}}: only a position or a name is allowed")
        return super().get_field(field_name, args, kwargs)

    def format_field(self, value, format_spec):
        if re.search(r"\d{5}", format_spec):
            raise ValueError(f"format spec {format_spec!r}: width or precision over 9999")
        return super().format_field(value, format_spec)


def _yaql_format():
    """yaql's `"...".format(args)` as the yaql of Heat's own releases up to 2024 had it, which
    TripleO's templates use (e.g. `"{0}".format($.data)`), made safe (see _PlainFormatter)."""
    from yaql.language import specs, yaqltypes

    @specs.parameter("format__", yaqltypes.String())
    @specs.name("format")
    @specs.extension_method
    def format_(format__, *args, **kwargs):
        return _PlainFormatter().format(format__, *args, **kwargs)

    return format_


_YAQL_PARSED: dict[str, Any] = {}  # expression -> statement: templates repeat the same ones


class Yaql(Function):
    __slots__ = ()
    _engine: Any = None

    @classmethod
    def engine(cls) -> Any:
        if cls._engine is None:
            import yaql  # imported on first use: it is slow to import
            from yaql.standard_library import regex

            from undercloud.orchestration.template.patterns import GuardedRe

            regex.re = GuardedRe()  # no pattern that backtracks without bound (it would hold every thread)
            parser = yaql.YaqlFactory().create({"yaql.limitIterators": 200, "yaql.memoryQuota": 10000})
            context = yaql.create_context()
            context.register_function(_yaql_format())
            cls._engine = (parser, context)
        return cls._engine

    def check(self) -> None:
        a = self.args
        if not isinstance(a, Mapping):
            raise self.err(f'Arguments to "{self.fn}" must be a map.')
        if "expression" not in a or set(a) - {"expression", "data"}:
            raise self.err(f'"{self.fn}" syntax should be {self.fn}: {{expression: $.data.var1.sum(), '
                           "data: {var1: [3, 2, 1]}}")
        if _literal(a["expression"]):
            self._parse(a["expression"])

    def _parse(self, expression: Any) -> Any:
        if not isinstance(expression, str):
            raise self.err(f'The "expression" argument to {self.fn} must contain a string.')
        from yaql.language import exceptions

        statement = _YAQL_PARSED.get(expression)
        if statement is None:
            try:
                statement = self.engine()[0](expression)
            except exceptions.YaqlException as exc:
                raise self.err(f"Bad expression {exc}.") from None
            if len(_YAQL_PARSED) < 4096:
                _YAQL_PARSED[expression] = statement
        return statement

    def result(self, ev: Evaluation) -> Any:
        statement = self._parse(known(ev, self.args["expression"]))
        data = known(ev, self.args.get("data", {}))
        context = self.engine()[1].create_child_context()
        try:
            result = statement.evaluate({"data": data}, context)
        except Exception as exc:  # yaql raises many kinds; all are the expression's fault
            raise self.err(f"{self.fn} evaluation failed: {exc}") from None
        self.checked_size(result)
        return result


# --------------------------------------------------------------------------- conditions

class Equals(Function):
    __slots__ = ()

    def check(self) -> None:
        if not self.args or not isinstance(self.args, list) or len(self.args) != 2:
            raise self.err(f'Arguments to "{self.fn}" must be of the form: [value_1, value_2]')

    def result(self, ev: Evaluation) -> Any:
        a, b = known(ev, self.args)
        return a == b


class ConditionBoolean(Function):
    __slots__ = ()

    def check(self) -> None:
        if not isinstance(self.args, list):
            raise self.err(f'Arguments to "{self.fn}" must be a list of conditions')
        if len(self.args) < 2:
            raise self.err(f'The minimum number of condition arguments to "{self.fn}" is 2.')
        for i, a in enumerate(self.args):
            self.t.check_condition_ref(a, self.path + (i,))

    def _cond(self, ev: Evaluation, v: Any) -> bool:
        v = known(ev, v)
        return ev.condition(v, self.path)


class Not(ConditionBoolean):
    __slots__ = ()

    def check(self) -> None:
        if self.args is None:
            raise self.err(f'Argument to "{self.fn}" must be a condition')
        self.t.check_condition_ref(self.args, self.path)

    def result(self, ev: Evaluation) -> Any:
        return not self._cond(ev, self.args)


class And(ConditionBoolean):
    __slots__ = ()

    def result(self, ev: Evaluation) -> Any:
        return all(self._cond(ev, a) for a in self.args)


class Or(ConditionBoolean):
    __slots__ = ()

    def result(self, ev: Evaluation) -> Any:
        return any(self._cond(ev, a) for a in self.args)


class If(Function):
    """`if: [condition, value_if_true, value_if_false]`: chosen at parse time, like Heat."""

    __slots__ = ("chosen",)
    macro = True
    nullable = False

    def check(self) -> None:
        a = self.args
        n = (2, 3) if self.nullable else (3,)
        if not isinstance(a, list) or len(a) not in n:
            raise self.err(f'Arguments to "{self.fn}" must be of the form: '
                           "[condition_name, value_if_true, value_if_false]")
        enabled = self.t.eval_condition(a[0], self.path + (0,))
        if enabled:
            self.chosen = self.t.parse(a[1], self.path + (1,))
        elif len(a) == 3:
            self.chosen = self.t.parse(a[2], self.path + (2,))
        else:
            self.chosen = REMOVED

    def result(self, ev: Evaluation) -> Any:
        return ev.eval(self.chosen)

    def value(self, ev: Evaluation) -> Any:
        return ev.eval(self.chosen)

    def deps(self) -> Iterator[str]:
        return iter_deps(self.chosen)


class IfNullable(If):
    """`if` from 2021-04-16: with two arguments a false condition removes the item."""

    __slots__ = ()
    nullable = True


REMOVED = Ellipsis  # what a 2-argument `if` gives when false: its map key / list item goes away


class Removed(Function):
    __slots__ = ()

    def check(self) -> None:
        raise self.err(f"The template version is invalid: The function {self.fn} is not supported "
                       "in this version of HOT.")


class Invalid(Function):
    """A function that exists but is not allowed where it is used (e.g. in conditions)."""

    __slots__ = ()

    def check(self) -> None:
        raise self.err(f'The function "{self.fn}" is invalid in this context')


# ---------------------------------------------------------------- CFN-style (2013-05-23)

class Select(Function):
    __slots__ = ()

    def check(self) -> None:
        if not isinstance(self.args, list) or len(self.args) != 2:
            raise self.err(f'Arguments to "{self.fn}" must be of the form [index, collection]')

    def result(self, ev: Evaluation) -> Any:
        index, coll = known(ev, self.args)
        try:
            if isinstance(coll, Mapping):
                return coll.get(index, "")
            if isinstance(coll, str):
                coll = json.loads(coll)
            return coll[int(index)] if coll is not None else ""
        except (IndexError, ValueError, TypeError, KeyError):
            return ""


class CfnJoin(Function):
    __slots__ = ()

    def check(self) -> None:
        if not isinstance(self.args, list) or len(self.args) != 2:
            raise self.err(f'Arguments to "{self.fn}" must be of the form [delimiter, list]')

    def result(self, ev: Evaluation) -> Any:
        delim, items = known(ev, self.args)
        if not isinstance(delim, str) or not _is_list(items):
            raise self.err(f'Arguments to "{self.fn}" must be of the form [delimiter, list]')
        return self.joined(delim, ["" if s is None else str(s) for s in items])


class CfnSplit(Function):
    __slots__ = ()

    def check(self) -> None:
        if not isinstance(self.args, list) or len(self.args) != 2:
            raise self.err(f'Arguments to "{self.fn}" must be of the form [delimiter, string]')

    def result(self, ev: Evaluation) -> Any:
        delim, text = known(ev, self.args)
        if not isinstance(delim, str) or not isinstance(text, str):
            raise self.err(f'Arguments to "{self.fn}" must be of the form [delimiter, string]')
        return text.split(delim)


class CfnReplace(Function):
    __slots__ = ()

    def check(self) -> None:
        if not isinstance(self.args, list) or len(self.args) != 2:
            raise self.err(f'Arguments to "{self.fn}" must be of the form [{{placeholder: value}}, template]')

    def result(self, ev: Evaluation) -> Any:
        mapping, text = known(ev, self.args)
        if not isinstance(mapping, Mapping) or not isinstance(text, str):
            raise self.err(f'Arguments to "{self.fn}" must be of the form [{{placeholder: value}}, template]')
        for k in sorted(mapping, key=lambda k: len(str(k)), reverse=True):
            key, value = str(k), "" if mapping[k] is None else str(mapping[k])
            if key and len(value) > len(key):
                n = len(text) + text.count(key) * (len(value) - len(key))
                if n > LIMITS.value_chars:
                    raise self.too_large(n)
            text = text.replace(key, value)
        return text


class Base64(Function):
    __slots__ = ()

    def result(self, ev: Evaluation) -> Any:
        v = known(ev, self.args)
        if not isinstance(v, str):
            raise self.err(f'Argument to "{self.fn}" must be a string')
        return v


class GetAZs(Function):
    __slots__ = ()

    def result(self, ev: Evaluation) -> Any:
        return ["nova"]


class MemberListToMap(Function):
    __slots__ = ()

    def check(self) -> None:
        if not isinstance(self.args, list) or len(self.args) != 3:
            raise self.err(f'Arguments to "{self.fn}" must be of the form [key_name, value_name, list]')

    def result(self, ev: Evaluation) -> Any:
        kname, vname, items = known(ev, self.args)
        out, valid = {}, {}
        for item in items or []:
            k, _, v = str(item).partition("=")
            valid[k] = v
        for key in {k.rsplit(".", 1)[0] for k in valid}:
            if valid.get(f"{key}.{kname}") is not None:
                out[valid[f"{key}.{kname}"]] = valid.get(f"{key}.{vname}")
        return out


class CfnResourceFacade(ResourceFacade):
    __slots__ = ()
    ATTRS = ("Metadata", "DeletionPolicy", "UpdatePolicy")

    def result(self, ev: Evaluation) -> Any:
        return ev.facade({"Metadata": "metadata", "DeletionPolicy": "deletion_policy",
                          "UpdatePolicy": "update_policy"}[self.args])

