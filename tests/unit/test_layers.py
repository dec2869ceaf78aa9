"""The package's layers, read from the source (module-level imports; an import inside a
function is a deliberate, lazy one): no import cycles; the agent imports only itself (a
node has only that package); the CLI imports no server-side module or library (every
command would pay for them); provisioning and orchestration import no API module; the lab
is a tool beside the CLI, and host/ is the bottom."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import undercloud

ROOT = Path(undercloud.__file__).parent
SERVER_SIDE = ("undercloud.api", "undercloud.store", "undercloud.engine", "sqlalchemy", "fastapi", "uvicorn")


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
    return name.removesuffix(".__init__")


@functools.cache
def parsed() -> dict[str, ast.Module]:
    """Module -> its syntax tree, read once for all the tests here (a second or two each)."""
    return {module_name(p): ast.parse(p.read_text()) for p in ROOT.rglob("*.py")}


@functools.cache  # the tests only read it
def module_imports() -> dict[str, set[str]]:
    """Module -> what it imports when it is imported (a from-import of a submodule counts as
    that submodule, not its package; TYPE_CHECKING blocks do not count)."""
    files = parsed()
    names = set(files)
    out = {}
    for name, tree in files.items():
        deps: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
                continue
            for n in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
                if isinstance(n, ast.Import):
                    deps |= {a.name for a in n.names}
                elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                    subs = {f"{n.module}.{a.name}" for a in n.names}
                    deps |= subs & names
                    if subs - names:
                        deps.add(n.module)
        out[name] = deps - {name}
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                found.append(sorted([v, *group]))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def offenders(imports: dict[str, set[str]], importer: str, banned) -> dict[str, list[str]]:
    return {m: sorted(d for d in deps if banned(d)) for m, deps in imports.items()
            if (m == importer or m.startswith(importer + ".")) and any(banned(d) for d in deps)}


def test_no_module_level_import_cycles():
    imports = module_imports()
    assert len(imports) > 100  # the whole package was read
    assert cycles({m: {d for d in deps if d in imports} for m, deps in imports.items()}) == []


def test_the_agent_imports_only_itself():
    imports = module_imports()
    outside = offenders(imports, "undercloud.agent", lambda d: d.startswith("undercloud.") and not (
        d.startswith("undercloud.agent") or d == "undercloud.__version__"))
    assert outside == {}


def test_the_cli_imports_nothing_server_side():
    assert offenders(module_imports(), "undercloud.cli", lambda d: d.startswith(SERVER_SIDE)) == {}


def test_provisioning_orchestration_and_the_overcloud_import_no_api_module():
    imports = module_imports()
    for layer in ("undercloud.provisioning", "undercloud.orchestration", "undercloud.overcloud"):
        assert offenders(imports, layer, lambda d: d.startswith("undercloud.api")) == {}, layer


@functools.cache  # the tests only read it
def all_imports() -> dict[str, set[str]]:
    """Module -> every module it imports anywhere (inside functions too: a lazy import is
    still a dependency of the layer)."""
    out = {}
    for name, tree in parsed().items():
        deps: set[str] = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                deps |= {a.name for a in n.names}
            elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                deps.add(n.module)
        out[name] = deps - {name}
    return out


def test_the_lab_is_a_tool_beside_the_cli_not_a_layer_below():
    # Only the CLI (and the lab itself) use the virtual lab; what servers need of the host
    # (libvirt, the lab network, KVM or TCG) is in host/.
    imports = all_imports()
    users = {m for m, deps in imports.items() if any(d.startswith("undercloud.lab") for d in deps)}
    assert {m for m in users if not m.startswith(("undercloud.lab", "undercloud.cli"))} == set()


def test_host_is_the_bottom_layer():
    # ... beside the agent's package, which imports only itself (host/podman.py runs podman
    # with the agent's settings, so that nodes and this host run it alike).
    imports = all_imports()
    allowed = ("undercloud.host", "undercloud.errors", "undercloud.config", "undercloud.agent")
    assert offenders(imports, "undercloud.host",
                     lambda d: d.startswith("undercloud.") and not d.startswith(allowed)) == {}


def test_a_cycle_is_found():  # the finder itself, on a made-up graph
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
