"""StackTemplate's private state stays in stack.py: the modules beside it (definitions,
conditions, functions, evaluation, ...) and the rest of the package use its public methods
and properties. Read from the source: the private names are those StackTemplate's class body
defines (methods, and attributes set on `self`); any other module that reads or sets one of
those names on something other than its own `self`/`cls` (or through getattr/setattr/hasattr
with a literal name) breaks the rule. By name, not by type: another class's own `self._x` is
fine, `self.t._x` or `tmpl._x` is not."""

from __future__ import annotations

import ast
from pathlib import Path

import undercloud

ROOT = Path(undercloud.__file__).parent
STACK = ROOT / "orchestration" / "template" / "stack.py"
CLASS = "StackTemplate"
ATTR_CALLS = ("getattr", "setattr", "hasattr", "delattr")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_names(source: str, cls: str = CLASS) -> set[str]:
    """The private names class `cls` defines in `source`: its methods and class attributes,
    and the attributes its methods set on `self`."""
    tree = ast.parse(source)
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    names: set[str] = set()
    for node in body.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    for node in ast.walk(body):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for t in targets:
            for x in ast.walk(t):
                if isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name) and x.value.id == "self":
                    names.add(x.attr)
    return {n for n in names if _private(n)}


def private_reads(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each use of one of `names` on something other than the module's own
    `self`/`cls`, or through getattr & co. with that name written out."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in names:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                out.append((node.lineno, node.attr))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ATTR_CALLS
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and node.args[1].value in names):
            out.append((node.lineno, node.args[1].value))
    return sorted(out)


def test_the_private_names_are_read_from_the_class():
    names = private_names(STACK.read_text())
    # a few it has today: if these are renamed, the rule still reads the new names
    assert {"_values", "_trees", "_dep_sink", "_build", "_tree"} <= names
    assert not any(n.startswith("__") for n in names)


def test_no_module_but_stack_py_uses_stack_templates_private_names():
    names = private_names(STACK.read_text())
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == STACK:
            continue
        for line, name in private_reads(path.read_text(), names):
            found.append(f"{path.relative_to(ROOT.parent)}:{line}: .{name}")
    assert not found, ("StackTemplate's private state used outside stack.py (give StackTemplate "
                       "a public method or property for it):\n" + "\n".join(found))


def test_the_rule_can_fail():
    cls_src = """
class StackTemplate:
    _kind = 1
    def __init__(self):
        self._values = {}
        self.public = 1
        self._n += 1
    def _build(self):
        pass
"""
    names = private_names(cls_src)
    assert names == {"_kind", "_values", "_n", "_build"}
    sibling = """
class Conditions:
    def __init__(self, t):
        self.t = t
        self._values = {}          # its own: fine
    def f(self, tmpl):
        tmpl._values["a"] = 1      # 7
        self.t._build()            # 8
        x = getattr(tmpl, "_n")    # 9
        return self._values, tmpl.public
"""
    assert private_reads(sibling, names) == [(7, "_values"), (8, "_build"), (9, "_n")]
