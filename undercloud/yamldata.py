"""YAML data that remembers where each node came from, read so that it cannot cost more
than its text: every mapping is a `Map` and every sequence a `Seq` (plain dict/list
subclasses that also carry the line of each key/item); aliases and merge keys are counted
against a limit as they are read, never expanded (an alias is the same object again), and
nesting is bounded. Templates (orchestration/template/source.py) and node inventories
(provisioning/instackenv.py) are read by it.

Its two limits are rows of orchestration/limits.py's table too: templates are read under
that table (its `override()` for tests), inventories under `LIMITS` here; both read the same
variables.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import yaml

from undercloud.limits import Limit, LimitSet

TABLE: tuple[Limit, ...] = (
    Limit("yaml_alias_nodes", "UNDERCLOUD_MAX_YAML_ALIAS_NODES", 100_000,
          "nodes a YAML document builds through aliases and merge keys (alias bombs)"),
    Limit("data_depth", "UNDERCLOUD_MAX_DATA_DEPTH", 100,
          "nesting levels of YAML data (maps and lists in maps and lists)"),
)
LIMITS = LimitSet(TABLE, os.environ)

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SCALAR = yaml.ScalarNode


class Map(dict):
    """A mapping from YAML: `line` is where it starts, `lines[key]` where each key is."""

    __slots__ = ("line", "lines")

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.line = 0
        self.lines: dict = {}


class Seq(list):
    """A sequence from YAML: `line` is where it starts, `lines[i]` where each item is."""

    __slots__ = ("line", "lines")

    def __init__(self, *a):
        super().__init__(*a)
        self.line = 0
        self.lines: list[int] = []


_TAGS: dict[tuple, str] = {}  # (plain scalar, implicit) -> its tag: keys and words repeat a lot


class _Loader(_Base):  # type: ignore[misc, valid-type]
    def resolve(self, kind, value, implicit):
        # libyaml asks this for every scalar; PyYAML's answer runs regexes in Python
        if kind is not _SCALAR or len(value) > 40:
            return super().resolve(kind, value, implicit)
        key = (value, implicit)
        tag = _TAGS.get(key)
        if tag is None:
            tag = super().resolve(kind, value, implicit)
            if len(_TAGS) < 50000:
                _TAGS[key] = tag
        return tag


class _PyLoader(yaml.SafeLoader):
    """PyYAML's own scanner, for text libyaml refuses but it reads (Heat falls back the same
    way: e.g. a flow mapping `{get_attr:[a, b]}` with no space after the colon)."""


def _map(loader: _Loader, node: yaml.MappingNode) -> Map:
    # only reached under other tags (!!set, !!pairs...): PyYAML's constructor, our merge keys
    _flatten(node, loader.uc_build)
    m = Map()
    m.line = node.start_mark.line + 1
    for knode, vnode in node.value:
        key = loader.construct_object(knode, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "found an unhashable key", knode.start_mark) from None
        m[key] = loader.construct_object(vnode, deep=True)
        m.lines[key] = knode.start_mark.line + 1
    return m


def _seq(loader: _Loader, node: yaml.SequenceNode) -> Seq:
    s = Seq()
    s.line = node.start_mark.line + 1
    for item in node.value:
        s.append(loader.construct_object(item, deep=True))
        s.lines.append(item.start_mark.line + 1)
    return s


def _str(loader: _Loader, node: yaml.Node) -> str:
    # Heat reads timestamps (heat_template_version: 2013-05-23) as plain strings.
    return loader.construct_scalar(node)


for _cls in (_Loader, _PyLoader):
    _cls.add_constructor("tag:yaml.org,2002:map", _map)
    _cls.add_constructor("tag:yaml.org,2002:omap", _map)
    _cls.add_constructor("tag:yaml.org,2002:seq", _seq)
    _cls.add_constructor("tag:yaml.org,2002:timestamp", _str)


_STR = "tag:yaml.org,2002:str"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_MAP = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:omap")
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"
_VALUE = "tag:yaml.org,2002:value"
_BUSY = object()
_BAD_SCALAR = (TypeError, ValueError, IndexError, KeyError, AttributeError, OverflowError)


class _Build:
    """One document's build: nodes made so far (an alias is the same node again) and how
    many nodes aliases and merge keys stand for, counted before anything is expanded."""

    __slots__ = ("memo", "sizes", "aliased", "max_aliased", "max_depth", "limits")

    def __init__(self, limits: LimitSet) -> None:
        self.memo: dict[int, Any] = {}
        self.sizes: dict[int, int] = {}  # node id -> nodes it holds with its aliases expanded
        self.aliased = 0
        self.limits = limits
        self.max_aliased = limits.yaml_alias_nodes
        self.max_depth = limits.data_depth

    def alias(self, nodes: int, mark: Any) -> None:
        self.aliased += nodes
        if self.aliased > self.max_aliased:
            raise yaml.constructor.ConstructorError(None, None, self.limits.exceeded(
                "yaml_alias_nodes", "the number of nodes built through aliases and merge keys"), mark)


def _flatten(node: yaml.MappingNode, b: _Build, depth: int = 0) -> None:
    """Merge keys (`<<: *base`, `<<: [*a, *b]`) resolved in the node, as PyYAML does (keys
    written in the mapping win, then the first mapping merged), every merged pair counted."""
    if not any(k.tag == _MERGE or k.tag == _VALUE for k, _ in node.value):
        return
    if depth > b.max_depth:
        raise yaml.constructor.ConstructorError(None, None, f"merge keys nest more than {b.max_depth} levels",
                                                node.start_mark)
    merged: list = []
    own: list = []
    for knode, vnode in node.value:
        if knode.tag == _VALUE:
            knode.tag = _STR
        if knode.tag != _MERGE:
            own.append((knode, vnode))
            continue
        if isinstance(vnode, yaml.MappingNode):
            sources = [vnode]
        elif isinstance(vnode, yaml.SequenceNode) and all(isinstance(x, yaml.MappingNode) for x in vnode.value):
            sources = list(reversed(vnode.value))  # the first listed wins: it comes last
        else:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"a merge key (<<) takes a mapping or a list of mappings, not {vnode.id}", vnode.start_mark)
        for src in sources:
            _flatten(src, b, depth + 1)
            b.alias(len(src.value), knode.start_mark)
            merged.extend(src.value)
    node.value = merged + own


_PLAIN = frozenset((_STR, _TIMESTAMP))  # Heat reads timestamps as strings


def _scalar(loader: _Loader, node: yaml.ScalarNode) -> Any:
    if node.tag in _PLAIN:
        return node.value
    try:
        return loader.construct_object(node)
    except _BAD_SCALAR as exc:  # e.g. `!!float x`, `!!float ''` (PyYAML's constructors assume the form)
        raise yaml.constructor.ConstructorError(None, None, f"{node.tag}: {exc}", node.start_mark) from None


def _key(loader: _Loader, knode: yaml.Node, b: _Build, depth: int) -> Any:
    key = _scalar(loader, knode) if knode.__class__ is _SCALAR else _build(loader, knode, b, depth)
    if key.__class__ is not str:
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "found an unhashable key", knode.start_mark) from None
    return key


def _build(loader: _Loader, node: yaml.Node, b: _Build, depth: int = 0) -> Any:
    """Node tree -> Map/Seq/scalars. A direct walk: much cheaper than PyYAML's generic
    constructor, which matters for trees of a thousand templates (scalars are made in the
    loops, without a call each). An alias gives the same object again (nothing is copied);
    the nodes it stands for count against the limit."""
    if node.__class__ is _SCALAR:
        return _scalar(loader, node)
    memo = b.memo
    nid = id(node)
    done = memo.get(nid)
    if done is not None:
        if done is _BUSY:
            raise yaml.constructor.ConstructorError(None, None, "found unconstructable recursive node",
                                                    node.start_mark)
        return done
    if depth >= b.max_depth:
        raise yaml.constructor.ConstructorError(None, None, f"data nests more than {b.max_depth} levels deep "
                                                f"(set {b.limits.variable('data_depth')} to change it)", node.start_mark)
    memo[nid] = _BUSY
    sizes = b.sizes
    size = 1
    inner = depth + 1
    if isinstance(node, yaml.MappingNode) and node.tag in _MAP:
        _flatten(node, b)
        m = Map()
        m.line = node.start_mark.line + 1
        lines = m.lines
        for knode, vnode in node.value:
            if knode.__class__ is _SCALAR and knode.tag == _STR:
                key = knode.value
            else:
                key = _key(loader, knode, b, inner)
            if vnode.__class__ is _SCALAR:
                m[key] = vnode.value if vnode.tag in _PLAIN else _scalar(loader, vnode)
                size += 2
            else:
                vid = id(vnode)
                again = vid in memo
                m[key] = _build(loader, vnode, b, inner)
                n = sizes[vid]
                if again:
                    b.alias(n, knode.start_mark)
                size += 1 + n
            lines[key] = knode.start_mark.line + 1
        out: Any = m
    elif isinstance(node, yaml.SequenceNode) and node.tag == _SEQ:
        sq = Seq()
        sq.line = node.start_mark.line + 1
        lines = sq.lines
        for item in node.value:
            if item.__class__ is _SCALAR:
                sq.append(item.value if item.tag in _PLAIN else _scalar(loader, item))
                size += 1
            else:
                iid = id(item)
                again = iid in memo
                sq.append(_build(loader, item, b, inner))
                n = sizes[iid]
                if again:
                    b.alias(n, item.start_mark)
                size += n
            lines.append(item.start_mark.line + 1)
        out = sq
    else:  # other tags (!!set, !!binary...): PyYAML's safe constructors
        try:
            out = loader.construct_document(node)
        except yaml.YAMLError:
            raise
        except _BAD_SCALAR:  # a node of the wrong kind for its tag
            raise yaml.constructor.ConstructorError(None, None, f"cannot construct {node.tag} from a {node.id}",
                                                    node.start_mark) from None
    memo[nid] = out
    sizes[nid] = size
    return out


_TYPED = frozenset(("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
                    "tag:yaml.org,2002:null"))
_PLAIN_IMPLICIT = (True, False)
_PLAIN_VALUES: dict[str, Any] = {}  # plain scalar -> its value
_COLL = (Map, Seq)
_new_map, _new_seq = dict.__new__, list.__new__
_ScalarEvent, _AliasEvent = yaml.ScalarEvent, yaml.AliasEvent
_MapStart, _MapEnd = yaml.MappingStartEvent, yaml.MappingEndEvent
_SeqStart, _SeqEnd = yaml.SequenceStartEvent, yaml.SequenceEndEvent


class _Slow(Exception):
    """Something `_Events` leaves to the node reader (tags, merge keys, errors...)."""


class _Events:
    """Map/Seq straight from libyaml's events, for plain data with anchors and aliases: no
    node objects and no Python calls per node from libyaml's composer (TripleO's overcloud:
    its YAML read in half the time). Anything else raises _Slow and the node reader (`_build`)
    reads the text again, so documents, lines, limits and errors stay the node reader's."""

    __slots__ = ("loader", "get", "b", "anchors")

    def __init__(self, loader: _Loader) -> None:
        self.loader = loader
        self.get = loader.get_event
        self.b = loader.uc_build
        self.anchors: dict[str, tuple[Any, int]] = {}  # anchor -> (object, its line)

    def document(self) -> Any:
        get = self.get
        get()  # stream start
        if get().__class__ is yaml.StreamEndEvent:
            return None
        out = self.value(get(), 0)
        get()  # document end
        if get().__class__ is not yaml.StreamEndEvent:
            raise _Slow  # several documents: the node reader's error
        return out

    def plain(self, ev: Any) -> Any:
        value = ev.value
        out = _PLAIN_VALUES.get(value, _Slow)  # keys and words repeat a lot
        if out is not _Slow:
            return out
        tag = self.loader.resolve(_SCALAR, value, _PLAIN_IMPLICIT)
        if tag in _PLAIN:
            out = value
        elif tag in _TYPED:
            out = _scalar(self.loader, yaml.ScalarNode(tag, value, ev.start_mark, ev.end_mark))
        else:
            raise _Slow  # merge key, `=`
        if len(value) <= 40 and len(_PLAIN_VALUES) < 50000:
            _PLAIN_VALUES[value] = out  # strings, numbers, booleans, null: immutable
        return out

    def value(self, ev: Any, depth: int) -> Any:
        c = ev.__class__
        if c is _AliasEvent:
            if ev.anchor not in self.anchors:
                raise _Slow  # undefined, or inside its own anchor
            return self.anchors[ev.anchor][0]
        if ev.tag is not None:
            raise _Slow
        if c is _ScalarEvent:
            out = self.plain(ev) if ev.implicit[0] else ev.value
        elif depth >= self.b.max_depth:
            raise _Slow
        else:
            get, sizes, anchors = self.get, self.b.sizes, self.anchors
            # plain scalars seen before answer from _PLAIN_VALUES without a call to plain()
            seen, plain = _PLAIN_VALUES.get, self.plain
            size, inner = 1, depth + 1
            if c is _MapStart:
                out = m = _new_map(Map)  # Map() without its Python __init__: a tree has 100,000s
                m.line = ev.start_mark.line + 1
                m.lines = lines = {}
                while True:
                    kev = get()
                    if kev.__class__ is not _ScalarEvent or kev.anchor is not None or kev.tag is not None:
                        if kev.__class__ is _MapEnd:
                            break
                        raise _Slow
                    key = kev.value
                    if kev.implicit[0]:
                        x = seen(key, _Slow)
                        key = plain(kev) if x is _Slow else x
                    vev = get()
                    if vev.__class__ is _ScalarEvent and vev.anchor is None and vev.tag is None:
                        v = vev.value
                        if vev.implicit[0]:
                            x = seen(v, _Slow)
                            v = plain(vev) if x is _Slow else x
                        m[key] = v
                        size += 2
                    else:
                        v = m[key] = self.value(vev, inner)
                        if v.__class__ in _COLL:
                            n = sizes[id(v)]
                            if vev.__class__ is _AliasEvent:
                                self.b.alias(n, kev.start_mark)
                            size += 1 + n
                        else:
                            size += 2
                    lines[key] = kev.start_mark.line + 1
            elif c is _SeqStart:
                out = sq = _new_seq(Seq)
                sq.line = ev.start_mark.line + 1
                sq.lines = lines = []
                append, line_append = sq.append, lines.append
                while True:
                    iev = get()
                    ic = iev.__class__
                    if ic is _ScalarEvent and iev.anchor is None and iev.tag is None:
                        v = iev.value
                        if iev.implicit[0]:
                            x = seen(v, _Slow)
                            v = plain(iev) if x is _Slow else x
                        append(v)
                        size += 1
                        line_append(iev.start_mark.line + 1)
                        continue
                    if ic is _SeqEnd:
                        break
                    v = self.value(iev, inner)
                    append(v)
                    if ic is _AliasEvent:  # an alias is at its anchor's line, as its node
                        line_append(anchors[iev.anchor][1])
                    else:
                        line_append(iev.start_mark.line + 1)
                    if v.__class__ in _COLL:
                        n = sizes[id(v)]
                        if ic is _AliasEvent:
                            self.b.alias(n, iev.start_mark)
                        size += n
                    else:
                        size += 1
            else:
                raise _Slow
            sizes[id(out)] = size
        if ev.anchor is not None:
            if ev.anchor in self.anchors:
                raise _Slow  # duplicate anchor
            self.anchors[ev.anchor] = (out, ev.start_mark.line + 1)
        return out


def _load_events(text: str, limits: LimitSet) -> Any:
    loader = _Loader(text)
    loader.uc_build = _Build(limits)
    try:
        return _Events(loader).document()
    finally:
        loader.dispose()


def read(text: str, limits: LimitSet | None = None) -> Any:
    """The YAML document of `text` as Map/Seq/scalars, aliases and merge keys counted against
    `limits` (LIMITS by default: the template layer passes its own) as they are read, never
    expanded, and nesting bounded; yaml.YAMLError (or RecursionError) when it cannot be."""
    limits = LIMITS if limits is None else limits
    if _Base is not yaml.SafeLoader:
        try:
            return _load_events(text, limits)
        except (_Slow, yaml.YAMLError, RecursionError):
            pass  # the node reader decides: the same document, or its own error
    try:
        return _load_with(_Loader, text, limits)
    except (yaml.scanner.ScannerError, yaml.parser.ParserError):
        if _Base is yaml.SafeLoader:  # no libyaml: that was PyYAML already
            raise
        try:
            return _load_with(_PyLoader, text, limits)
        except yaml.YAMLError:
            pass
        raise  # libyaml's own message


def _load_with(cls: type, text: str, limits: LimitSet) -> Any:
    loader = cls(text)
    loader.uc_build = b = _Build(limits)
    try:
        node = loader.get_single_node()
        return None if node is None else _build(loader, node, b)
    finally:
        loader.dispose()


def line_of(root: Any, path: Sequence) -> int:
    """The line of the deepest node of `path` found under `root` (0 if none)."""
    line = getattr(root, "line", 0)
    node = root
    for p in path:
        lines = getattr(node, "lines", None)
        if lines is None:
            break
        try:
            line = lines[p]
            node = node[p]
        except (KeyError, IndexError, TypeError):
            break
    return line
