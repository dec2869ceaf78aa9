"""A Bundle: every file a stack needs, as text, so a stack can travel to the API whole.

Keys are normalised paths. A file named inside another (`get_file`, a template resource
`type:`, a registry target) is looked up relative to the file that names it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from undercloud.orchestration.limits import LIMITS, exceeded
from undercloud.orchestration.template.environment import TEMPLATE_SUFFIXES, is_template_ref
from undercloud.orchestration.template.source import (
    FnError,
    TemplateError,
    dotted,
    line_of,
    parse_yaml,
    problem,
)


def text_bytes(text: str) -> int:
    """The UTF-8 size of `text` (counted without encoding when it cannot matter)."""
    n = len(text)
    return n if n * 4 <= LIMITS.file_bytes or text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def ref_key(parent: str, name: str) -> str:
    """The bundle key of `name` as written in file `parent`."""
    if name.startswith("file://"):
        name = name[len("file://"):]
    if os.path.isabs(name):
        return os.path.normpath(name)
    return os.path.normpath(os.path.join(os.path.dirname(parent), name))


class Bundle:
    def __init__(self, template: str, environments: list[str] | None = None,
                 files: dict[str, str] | None = None):
        self.template = template
        self.environments = list(environments or [])
        self.files: dict[str, str] = dict(files or {})
        self._parsed: dict[str, Any] = {}
        self.validated: dict[tuple, tuple[bool, int]] = {}  # see StackTemplate.child_tree_size
        # parsed sections shared by every stack built from a file: (key, path, check_params) ->
        # tree, and the resources the section names (see StackTemplate.parse_all)
        self.trees: dict[tuple, Any] = {}
        self.tree_deps: dict[tuple, tuple[str, ...]] = {}

    # ---- travel
    def to_json(self) -> dict:
        return {"template": self.template, "environments": self.environments, "files": self.files}

    @classmethod
    def from_json(cls, d: Mapping) -> Bundle:
        try:
            files = d["files"]
            if not isinstance(files, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                         for k, v in files.items()):
                raise TypeError
            b = cls(str(d["template"]), [str(e) for e in d.get("environments") or []], dict(files))
        except (KeyError, TypeError, AttributeError):
            raise TemplateError(["bundle: expected {template, environments, files: {key: text}}"]) from None
        b.check_sizes()
        return b

    def check_sizes(self) -> None:
        """Refuse files over the size limits (before anything reads them)."""
        problems, total = [], 0
        for key, text in self.files.items():
            n = text_bytes(text)
            total += n
            if n > LIMITS.file_bytes:
                problems.append(problem(_show(key), 0, "", exceeded("file_bytes", "the size of the file in bytes", n)))
        if total > LIMITS.bundle_bytes:
            problems.append(problem("bundle", 0, "", exceeded("bundle_bytes", "the size of all files in bytes", total)))
        if problems:
            raise TemplateError(problems)

    # ---- reading
    def parsed(self, key: str) -> Any:
        """The file's YAML, parsed once (with line numbers)."""
        if key not in self._parsed:
            if key not in self.files:
                raise TemplateError([problem(key, 0, "", "file not found in the bundle")])
            self._parsed[key] = parse_yaml(self.files[key], key)
        return self._parsed[key]

    def parsed_as(self, key: str) -> Any:
        """The file's YAML if it was parsed already (else None)."""
        return self._parsed.get(key)

    @classmethod
    def from_paths(cls, template_path: str | None, env_paths: list[str] | tuple = ()) -> Bundle:
        """Read the template, the environments and every file they name, transitively.

        `template_path=None` reads environments alone (to check environment files)."""
        tkey = os.path.normpath(os.path.abspath(template_path)) if template_path else ""
        ekeys = [os.path.normpath(os.path.abspath(p)) for p in env_paths]
        b = cls(tkey, ekeys)
        problems: list[str] = []
        for key in [tkey, *ekeys] if tkey else ekeys:
            err = b._read(key)
            if err:
                problems.append(problem(_show(key), 0, "", err))
        if problems:
            raise TemplateError(problems)
        todo: list[str] = [tkey] if tkey else []
        for ekey in ekeys:
            doc = b._parse_or_collect(ekey, problems)
            for target, path in _registry_files(doc):
                b._need(target, ekey, doc, path, problems, todo, template=True)
        seen: set[str] = set()
        while todo:
            key = todo.pop()
            if key in seen:
                continue
            seen.add(key)
            doc = b._parse_or_collect(key, problems)
            if not _may_reference(b.files.get(key, "")):
                continue
            for kind, name, path in _references(doc):
                b._need(name, key, doc, path, problems, todo, template=(kind == "type"))
        if problems:
            raise TemplateError(problems)
        b.check_sizes()
        return b

    def _read(self, key: str) -> str | None:
        if key in self.files:
            return None
        try:
            size = os.path.getsize(key)
            if size > LIMITS.file_bytes:
                return exceeded("file_bytes", "the size of the file in bytes", size)
            with open(key, encoding="utf-8") as fh:
                self.files[key] = fh.read()
        except FileNotFoundError:
            return "file not found"
        except IsADirectoryError:
            return "is a directory, not a file"
        except UnicodeDecodeError:
            return "file is not UTF-8 text"
        except OSError as exc:
            return f"cannot read: {exc.strerror}"
        return None

    def _parse_or_collect(self, key: str, problems: list[str]) -> Any:
        try:
            return self.parsed(key)
        except TemplateError as exc:
            problems.extend(exc.problems)
            return None

    def _need(self, name: str, parent: str, doc: Any, path: tuple, problems: list[str], todo: list[str],
              template: bool) -> None:
        k = ref_key(parent, name)
        if "://" in name and not name.startswith("file://"):
            problems.append(problem(_show(parent), line_of(doc, path), dotted(path),
                                    "only local files can be referenced, not URLs"))
            return
        err = self._read(k)
        if err:
            problems.append(problem(_show(parent), line_of(doc, path), dotted(path), f"{_show(k)}: {err}"))
        elif template:
            todo.append(k)


def _show(key: str) -> str:
    """A key as people read it: relative to the working directory when under it."""
    try:
        rel = os.path.relpath(key)
    except ValueError:
        return key
    return key if rel.startswith("..") else rel


def same_meaning(new: Mapping, old: Mapping) -> bool:
    """Whether two bundles (as they travel) mean the same: the same template and
    environments, and each file the same text, or, for a template or environment that no
    `get_file` reads, the same YAML document: an edited comment or layout changes nothing.
    (A file read by get_file is a value: every character of it counts.)"""
    if new == old:
        return True
    nfiles, ofiles = new.get("files"), old.get("files")
    if {k: v for k, v in new.items() if k != "files"} != {k: v for k, v in old.items() if k != "files"} \
            or not isinstance(nfiles, Mapping) or not isinstance(ofiles, Mapping) or set(nfiles) != set(ofiles):
        return False
    docs: dict[str, Any] = {}
    for k, text in nfiles.items():
        try:
            docs[k] = parse_yaml(text, k)
        except TemplateError:  # not YAML (a script): a data file, compared by its text
            docs[k] = None
    read_raw = {ref_key(k, name) for k, doc in docs.items() if doc is not None
                for kind, name, _path in _references(doc) if kind == "get_file"}
    for k in (k for k in nfiles if nfiles[k] != ofiles[k]):
        if k in read_raw or docs[k] is None:
            return False
        try:
            if parse_yaml(ofiles[k], k) != docs[k]:
                return False
        except TemplateError:
            return False
    return True


def show(key: str) -> str:
    return _show(key)


def _may_reference(text: str) -> bool:
    """Whether a file's text can name another file: a name found by _references is written
    in it (`get_file`, a `.yaml`/`.template` ending) unless escapes spell it (then the walk
    decides). Most files of a tree name none: their walk is skipped."""
    return "\\" in text or "get_file" in text or any(s in text for s in TEMPLATE_SUFFIXES)


def _references(doc: Any) -> list[tuple[str, str, tuple]]:
    """(kind, name, path) of every `get_file: name` and template-file `type: name` in a doc.
    A walk that makes a path only for what it finds (THT: 60,000 nodes, 133 found)."""
    found: list[tuple[str, str, tuple]] = []
    path: list = []

    def walk(node: Any) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in items:
            path.append(k)
            if k == "get_file" and isinstance(v, str) and len(node) == 1:
                found.append(("get_file", v, tuple(path)))
            elif k == "type" and is_template_ref(v):
                found.append(("type", v, tuple(path)))
            elif isinstance(v, dict | list):
                walk(v)
            path.pop()

    if isinstance(doc, dict | list):
        walk(doc)
    return found


def _registry_files(doc: Any) -> Iterator[tuple[str, tuple]]:
    if not isinstance(doc, Mapping):
        return
    reg = doc.get("resource_registry")

    def walk(m: Any, path: tuple) -> Iterator[tuple[str, tuple]]:
        if not isinstance(m, Mapping):
            return
        for k, v in m.items():
            if isinstance(v, Mapping):
                yield from walk(v, path + (k,))
            elif is_template_ref(v):
                yield v, path + (k,)

    yield from walk(reg, ("resource_registry",))


__all__ = ["Bundle", "ref_key", "show", "FnError"]
