"""Templates' YAML (read by undercloud/yamldata.py, lines kept, under the template limits), and
the one error type of the package: any problem is reported as `file:line: path.to.node: message`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import yaml

from undercloud.errors import InvalidInput
from undercloud.orchestration.limits import LIMITS, cut, exceeded
from undercloud.yamldata import Map, Seq, line_of, read


def parse_yaml(text: str, name: str) -> Any:
    """Parse YAML text; a syntax error becomes a TemplateError naming file and line.

    Refused before any node is built: files over the size limit; while building: data
    nesting deeper than the depth limit and aliases (or merge keys) standing for more
    nodes than the alias limit, so an alias bomb costs no more than its text."""
    if len(text) > LIMITS.file_bytes or (len(text) * 4 > LIMITS.file_bytes
                                         and len(text.encode("utf-8", "surrogatepass")) > LIMITS.file_bytes):
        raise TemplateError([problem(name, 0, "", exceeded("file_bytes", "the size of the file in bytes",
                                                           len(text.encode("utf-8", "surrogatepass"))))])
    try:
        return read(text, LIMITS)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        msg = " ".join(x for x in (exc.context, exc.problem) if x) or "invalid YAML"
        raise TemplateError([problem(name, line, "", f"invalid YAML: {one_line(msg)}")]) from None
    except yaml.YAMLError as exc:
        raise TemplateError([problem(name, 0, "", f"invalid YAML: {one_line(str(exc))}")]) from None
    except RecursionError:
        raise TemplateError([problem(name, 0, "", TOO_DEEP)]) from None
    except UnicodeEncodeError as exc:  # a lone surrogate (e.g. "\ud800" in JSON): not text YAML can read
        line = text.count("\n", 0, exc.start) + 1
        raise TemplateError([problem(name, line, "", "invalid YAML: a character that is not Unicode text "
                                                     f"(U+{ord(text[exc.start]):04X})")]) from None


TOO_DEEP = "data nests too deeply to be processed"


def one_line(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------
# Paths and problems

Path = tuple  # of str keys and int indexes


def dotted(path: Iterable) -> str:
    """("resources", "a", "properties", 0) -> "resources.a.properties[0]"."""
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out


def kind(value: Any) -> str:
    """The YAML name of a value's type, for messages."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int | float):
        return "number"
    return "null" if value is None else type(value).__name__


def problem(file: str, line: int, path: str, message: str) -> str:
    """One problem line, cut to the message limit (values and keys may be quoted in it)."""
    where = f"{file}:{line}" if line else file
    text = f"{where}: {path}: {message}" if path else f"{where}: {message}"
    return cut(one_line(text)) if len(text) > 200 or "\n" in text else text


SHOWN_PROBLEMS = 50  # a template of 10,000 broken resources is told in 51 lines, not 10,000


class TemplateError(InvalidInput):
    """One or more problems in a template or environment, each `file:line: path: message`
    (the first SHOWN_PROBLEMS of them in the message; `problems` keeps them all)."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__(self._text())

    def _text(self) -> str:
        shown = self.problems[:SHOWN_PROBLEMS]
        more = len(self.problems) - len(shown)
        return "\n".join(shown + ([f"... and {more:,} more problems like these"] if more > 0 else []))

    def __str__(self) -> str:
        return self._text()


class FnError(Exception):
    """Raised inside the package with a path relative to the snippet; turned into a problem."""

    def __init__(self, message: str, path: Sequence = ()):
        super().__init__(message)
        self.message = message
        self.path = tuple(path)


__all__ = ["FnError", "Map", "Seq", "TemplateError", "dotted", "kind", "line_of", "one_line", "parse_yaml",
           "problem"]
