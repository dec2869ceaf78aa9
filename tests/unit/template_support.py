"""Helpers for the template tests: write files, load them, and compute outputs the way Heat
would for templates made of OS::Heat::Value resources (value attribute = resolved property)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from undercloud.orchestration.template import Bundle, TemplateError, load


def write(tmp: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        p = tmp / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))


def bundle(tmp: Path, template: str, envs: list[str] | None = None, files: dict[str, str] | None = None,
           name: str = "t.yaml") -> Bundle:
    write(tmp, {name: template, **(files or {})})
    return Bundle.from_paths(str(tmp / name), [str(tmp / e) for e in envs or []])


class ValueResolver:
    """Resolves get_attr/get_resource against already computed Value resources."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.nested: dict[str, dict] = {}

    def get_resource(self, name: str) -> Any:
        return name

    def get_attr(self, name: str, attr: Any, path: list) -> Any:
        from undercloud.orchestration.template import select_path

        if name in self.nested:  # a template resource: its outputs are its attributes
            attrs = self.nested[name]
        else:
            attrs = {"value": self.values.get(name)}
        if attr is None:
            return attrs
        return select_path(attrs.get(attr), path)


def run(tmp: Path, template: str, params: dict | None = None, envs: list[str] | None = None,
        files: dict[str, str] | None = None) -> dict:
    """Load and 'create' a template of Value resources; returns its outputs."""
    tmpl = load(bundle(tmp, template, envs, files), params or {})
    return outputs(tmpl)


def outputs(tmpl: Any) -> dict:
    r = ValueResolver()
    deps = tmpl.dependencies()
    done: set[str] = set()
    while len(done) < len(deps):
        ready = [n for n in deps if n not in done and deps[n] <= done]
        assert ready, "dependency cycle"
        for n in ready:
            rd = tmpl.resources[n]
            if rd.template_file:
                child = tmpl.nested(n, tmpl.resolve(rd.properties, r) or {})
                r.nested[n] = outputs(child)
            else:
                props = tmpl.resolve(rd.properties, r) or {}
                r.values[n] = props.get("value")
            done.add(n)
    return {k: tmpl.resolve(o.value, r) for k, o in tmpl.outputs.items()}


def value(tmp: Path, version: str, snippet: str, params: str = "", **kw) -> Any:
    """The value of one snippet (YAML text) in a template of `version`."""
    text = f"heat_template_version: {version}\n"
    if params:
        text += "parameters:\n" + textwrap.indent(textwrap.dedent(params), "  ")
    text += "resources:\n  v:\n    type: OS::Heat::Value\n    properties:\n      value: "
    text += snippet.strip().replace("\n", "\n        ") + "\noutputs:\n  o: {value: {get_attr: [v, value]}}\n"
    return run(tmp, text, **kw)["o"]


def problems(tmp: Path, template: str, params: dict | None = None, envs: list[str] | None = None,
             files: dict[str, str] | None = None, partial: bool = False) -> list[str]:
    """The problems load reports (fails the test if it loads)."""
    with pytest.raises(TemplateError) as info:
        load(bundle(tmp, template, envs, files), params or {}, partial=partial)
    return info.value.problems


def error(tmp: Path, version: str, snippet: str, params: str = "", **kw) -> str:
    """The single problem (file:line stripped to 'line: path: message') of a snippet."""
    with pytest.raises(TemplateError) as info:
        value(tmp, version, snippet, params, **kw)
    msgs = info.value.problems
    assert len(msgs) == 1, msgs
    return msgs[0].split(":", 1)[1].strip() if msgs[0].startswith(str(tmp)) else msgs[0]
