"""The package's layers, read from the source: every import counts, at module level or inside
a function (a lazy one is still a dependency of its layer), and so does
`importlib.import_module` of a literal name or of names a module lists as strings (api/app's
ROUTERS and STARTUP, cli/commands' COMMANDS, the drivers' table). TYPE_CHECKING blocks do
not count. The rules: no import cycles at module level, and no circles with the imports inside
functions either (a lazy import for start-up speed is fine when it points down; KNOWN_CIRCLES
lists those that close a circle today, and may only shrink); the agent imports only itself (a
node has only that package); the CLI imports no server-side module or library (every command
would pay for them); provisioning, orchestration and the overcloud import no API module; the
lab is a tool beside the CLI, and host/ is the bottom. Each rule is a function of an import map
(module -> {imported module: only inside functions?}), and `test_each_rule_can_fail` feeds each
one a made-up package breaking it."""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import undercloud

ROOT = Path(undercloud.__file__).parent

# Every name below must be a module or package of undercloud, or an installed third-party
# package (test_the_rules_name_real_modules): a misspelt one would make its rule check nothing.
AGENT = "undercloud.agent"
AGENT_MAY_IMPORT = ("undercloud.agent", "undercloud")  # `undercloud` itself: __version__ only
CLI = "undercloud.cli"
SERVER_SIDE = ("undercloud.api", "undercloud.store", "undercloud.orchestration.engine",
               "undercloud.provisioning", "sqlalchemy", "alembic", "fastapi", "uvicorn", "starlette")
API = "undercloud.api"
NO_API = ("undercloud.provisioning", "undercloud.orchestration", "undercloud.overcloud")
LAB = "undercloud.lab"
LAB_USERS = ("undercloud.lab", "undercloud.cli")
HOST = "undercloud.host"
# ... beside the agent's package, which imports only itself (host/podman.py runs podman with
# the agent's settings, so that nodes and this host run it alike).
HOST_MAY_IMPORT = ("undercloud.host", "undercloud.errors", "undercloud.config", "undercloud.agent")

# Imports inside functions that close a circle today: (importer, imported) -> why. Without
# them the graph of all imports has no cycle; each must still occur, inside a function, and be
# needed to break a circle (test_known_circles_only_shrink): the list can only shrink.
KNOWN_CIRCLES: dict[tuple[str, str], str] = {
    # api/app loads ROUTERS and STARTUP hooks by name; each router imports app.get_context.
    **{("undercloud.api.app", f"undercloud.api.{r}"): "ROUTERS/STARTUP: routers import app.get_context"
       for r in ("agent_admin", "clouds", "images", "nodes", "overcloud", "overcloud_status", "ramdisk_callback",
                 "servers", "stack_signals", "stacks", "workers", "workflows")},
    ("undercloud.api.context", "undercloud.api.listeners"): "Context builds the listeners, which import api.app",
    ("undercloud.api.context", "undercloud.api.workers"): "Context builds the workers' table; api.workers imports api.app",
    ("undercloud.daemon", "undercloud.api.app"): "`serve` runs the API from the CLI's daemon module; app imports daemon",
    # provisioning/drivers loads its drivers by name (DRIVERS); each imports the base it extends.
    **{("undercloud.provisioning.drivers", f"undercloud.provisioning.drivers.{d}"):
       "DRIVERS: each driver imports the package's base" for d in ("fake", "ipmi", "openstack", "redfish")},
    ("undercloud.store.db", "undercloud.store.migrate"): "the store creates/upgrades its schema; migrate uses db",
    ("undercloud.store.db", "undercloud.store.models"): "the store creates its tables; every table module uses db",
    ("undercloud.orchestration.template.definitions", "undercloud.orchestration.resources.registry"):
        "resource types validate with template.validation, which reads definitions",
}

Imports = Mapping[str, Mapping[str, bool]]  # module -> {imported module: only inside functions?}


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
    return name.removesuffix(".__init__")


@functools.cache
def parsed() -> dict[str, ast.Module]:
    """Module -> its syntax tree, read once for all the tests here (a second or two each)."""
    return {module_name(p): ast.parse(p.read_text()) for p in ROOT.rglob("*.py")}


def _is_import_module(node: ast.AST) -> bool:
    f = node.func if isinstance(node, ast.Call) else None
    return (isinstance(f, ast.Attribute) and f.attr == "import_module") or (
        isinstance(f, ast.Name) and f.id == "import_module")


def read_imports(trees: Mapping[str, ast.Module]) -> dict[str, dict[str, bool]]:
    """Module -> {what it imports: True when only inside functions}. A from-import of a
    submodule counts as that submodule, not its package; `import_module("x")` counts as x; a
    module calling import_module on a computed name imports, inside functions, every module
    it names in a string ("undercloud.api.stacks" or "undercloud.api.stacks:startup")."""
    names = set(trees)
    out = {}
    for name, tree in trees.items():
        deps = imports_of(tree, names)
        deps.pop(name, None)
        out[name] = deps
    return out


def imports_of(tree: ast.Module, names: set[str]) -> dict[str, bool]:
    deps: dict[str, bool] = {}

    def add(dep: str, lazy: bool) -> None:
        deps[dep] = deps.get(dep, True) and lazy

    def visit(node: ast.AST, lazy: bool) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            for n in node.orelse:
                visit(n, lazy)
            return
        lazy = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name, lazy)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names}
            for s in subs & names:
                add(s, lazy)
            if subs - names:
                add(node.module, lazy)
        elif _is_import_module(node) and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                add(arg.value, lazy)
            else:  # a computed name: the module's strings naming modules are what it can be
                for n in ast.walk(tree):
                    if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.split(":")[0] in names:
                        add(n.value.split(":")[0], True)
        for child in ast.iter_child_nodes(node):
            visit(child, lazy)

    visit(tree, False)
    return deps


@functools.cache  # the tests only read it
def package_imports() -> dict[str, dict[str, bool]]:
    return read_imports(parsed())


def within(name: str, prefixes: str | Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".")
               for p in ((prefixes,) if isinstance(prefixes, str) else prefixes))


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                on_stack.discard(w)
                group.append(w)
            on_stack.discard(v)
            if group:
                found.append(sorted([v, *group]))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


# --- the rules: each returns what breaks it (empty when kept) ---------------------------------

def module_level_cycles(imports: Imports) -> list[list[str]]:
    return cycles({m: {d for d, lazy in deps.items() if not lazy} for m, deps in imports.items()})


def circles(imports: Imports, allowed: Iterable[tuple[str, str]] = ()) -> dict[str, list[str]]:
    """Cycles of all imports, inside functions too, without the `allowed` edges: a list of
    modules -> the imports among them (a lazy one marked "(in a function)")."""
    allowed = set(allowed)
    graph = {m: {d for d in deps if (m, d) not in allowed} for m, deps in imports.items()}
    out = {}
    for group in cycles(graph):
        members = set(group)
        out[" ".join(group)] = sorted(f"{m} -> {d}" + (" (in a function)" if imports[m][d] else "")
                                      for m in group for d in graph[m] & members)
    return out


def stale(imports: Imports, known: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """The `known` circle-closing imports that are gone, at module level now (a module-level
    cycle is never allowed), or not needed: without them on the list, still no circle."""
    known = set(known)
    lazy = {(m, d) for m, d in known if imports.get(m, {}).get(d) is True}
    return (known - lazy) | {e for e in lazy if not circles(imports, lazy - {e})}


def offenders(imports: Imports, importer: str | Iterable[str], banned) -> dict[str, list[str]]:
    """Modules of `importer` -> what they import that `banned(name)` refuses."""
    found = {m: sorted(d for d in deps if banned(d)) for m, deps in imports.items() if within(m, importer)}
    return {m: ds for m, ds in found.items() if ds}


def agent_outside_itself(imports: Imports) -> dict[str, list[str]]:
    return offenders(imports, AGENT, lambda d: within(d, "undercloud") and not (
        within(d, AGENT) or d == "undercloud"))


def cli_server_side(imports: Imports) -> dict[str, list[str]]:
    """The CLI's own imports of server-side modules, and those its module-level imports load
    (what `undercloud <command>` pays for): module -> server-side modules, with the path."""
    found = offenders(imports, CLI, lambda d: within(d, SERVER_SIDE))
    for m in imports:
        if not within(m, CLI):
            continue
        seen, todo = {m: [m]}, [m]
        while todo:
            v = todo.pop()
            for d, lazy in imports.get(v, {}).items():
                if lazy or d in seen:
                    continue
                seen[d] = [*seen[v], d]
                if within(d, SERVER_SIDE) and v != m:
                    found.setdefault(m, []).append(" -> ".join(seen[d]))
                elif d in imports:
                    todo.append(d)
    return found


def api_users_below_the_api(imports: Imports) -> dict[str, list[str]]:
    return offenders(imports, NO_API, lambda d: within(d, API))


def lab_users(imports: Imports) -> set[str]:
    return {m for m, deps in imports.items() if any(within(d, LAB) for d in deps) and not within(m, LAB_USERS)}


def host_above_the_bottom(imports: Imports) -> dict[str, list[str]]:
    return offenders(imports, HOST, lambda d: within(d, "undercloud") and not within(d, HOST_MAY_IMPORT))


# --- the package ------------------------------------------------------------------------------

def test_the_rules_name_real_modules():
    names = set(parsed())
    listed = {AGENT, *AGENT_MAY_IMPORT, CLI, *SERVER_SIDE, API, *NO_API, LAB, *LAB_USERS, HOST, *HOST_MAY_IMPORT,
              *(m for edge in KNOWN_CIRCLES for m in edge)}
    unknown = {n for n in listed if n not in names and (within(n, "undercloud") or importlib.util.find_spec(n) is None)}
    assert unknown == set()


def test_imports_inside_functions_and_by_name_are_read():
    imports = package_imports()
    assert len(imports) > 100  # the whole package was read
    assert imports["undercloud.api.app"]["undercloud.api.stacks"] is True  # ROUTERS, by name
    assert imports["undercloud.api.app"]["undercloud.provisioning.periodic"] is True  # STARTUP "module:function"
    assert imports["undercloud.cli.commands"]["undercloud.cli.stack"] is True  # COMMANDS
    assert imports["undercloud.daemon"]["undercloud.api.app"] is True  # a `from` import in a function


def test_no_module_level_import_cycles():
    assert module_level_cycles(package_imports()) == []


def test_no_import_circles_but_the_known_ones():
    assert circles(package_imports(), KNOWN_CIRCLES) == {}


def test_known_circles_only_shrink():
    # Each allowlisted import is still there, still inside a function, and still needed (a
    # circle comes back without it): otherwise take it off KNOWN_CIRCLES.
    assert stale(package_imports(), KNOWN_CIRCLES) == set()


def test_the_agent_imports_only_itself():
    assert agent_outside_itself(package_imports()) == {}


def test_the_cli_imports_nothing_server_side():
    assert cli_server_side(package_imports()) == {}


def test_provisioning_orchestration_and_the_overcloud_import_no_api_module():
    assert api_users_below_the_api(package_imports()) == {}


def test_the_lab_is_a_tool_beside_the_cli_not_a_layer_below():
    # Only the CLI (and the lab itself) use the virtual lab; what servers need of the host
    # (libvirt, the lab network, KVM or TCG) is in host/.
    assert lab_users(package_imports()) == set()


def test_host_is_the_bottom_layer():
    assert host_above_the_bottom(package_imports()) == {}


# --- the checker, on made-up packages ---------------------------------------------------------

def made_up(**sources: str) -> dict[str, dict[str, bool]]:
    """The import map of modules given as source (`undercloud__cli__x` is undercloud.cli.x)."""
    return read_imports({name.replace("__", "."): ast.parse(src) for name, src in sources.items()})


def test_a_cycle_is_found():  # the finder itself, on a made-up graph
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_imports_are_read_where_they_are():
    imports = made_up(
        undercloud__a="import undercloud.b\nfrom undercloud import c, VERSION\n"
                      "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import undercloud.d\n"
                      "def f():\n    import undercloud.e\n    importlib.import_module('undercloud.f')\n",
        undercloud__b="", undercloud__c="", undercloud__d="", undercloud__e="", undercloud__f="",
        undercloud__g="import importlib\nTABLE = ['undercloud.b', 'undercloud.c:start', 'not.a.module']\n"
                       "def load(n):\n    return importlib.import_module(n)\n",
        undercloud="")
    assert imports["undercloud.a"] == {"undercloud.b": False, "undercloud.c": False, "undercloud": False,
                                       "typing": False, "undercloud.e": True, "undercloud.f": True}
    assert imports["undercloud.g"] == {"importlib": False, "undercloud.b": True, "undercloud.c": True}


def test_each_rule_can_fail():
    bad = made_up(
        undercloud="",
        # a circle closed inside a function, and a module-level cycle
        undercloud__x="import undercloud.y",
        undercloud__y="def f():\n    import undercloud.x",
        undercloud__p="import undercloud.q",
        undercloud__q="import undercloud.p",
        undercloud__agent="import undercloud.config",
        undercloud__agent__kube="def f():\n    from undercloud.errors import UndercloudError",
        undercloud__config="", undercloud__errors="", undercloud__daemon="import undercloud.api.app",
        undercloud__cli__stack="def f():\n    from undercloud.orchestration.engine import service",
        undercloud__cli__client="import undercloud.daemon\nimport sqlalchemy",
        undercloud__api__app="", undercloud__orchestration__engine__service="",
        undercloud__provisioning__nodes="def f():\n    import undercloud.api.app",
        undercloud__overcloud__deploy="importlib.import_module('undercloud.api.app')",
        undercloud__orchestration__resources="from undercloud.lab import lab",
        undercloud__lab__lab="",
        undercloud__host__run="from undercloud.store import db",
        undercloud__store__db="",
    )
    assert module_level_cycles(bad) == [["undercloud.p", "undercloud.q"]]
    assert circles(bad) == {
        "undercloud.p undercloud.q": ["undercloud.p -> undercloud.q", "undercloud.q -> undercloud.p"],
        "undercloud.x undercloud.y": ["undercloud.x -> undercloud.y", "undercloud.y -> undercloud.x (in a function)"]}
    assert circles(bad, {("undercloud.y", "undercloud.x"), ("undercloud.q", "undercloud.p")}) == {}
    assert agent_outside_itself(bad) == {"undercloud.agent": ["undercloud.config"],
                                         "undercloud.agent.kube": ["undercloud.errors"]}
    assert cli_server_side(bad) == {
        "undercloud.cli.stack": ["undercloud.orchestration.engine.service"],
        "undercloud.cli.client": ["sqlalchemy", "undercloud.cli.client -> undercloud.daemon -> undercloud.api.app"]}
    assert api_users_below_the_api(bad) == {"undercloud.provisioning.nodes": ["undercloud.api.app"],
                                            "undercloud.overcloud.deploy": ["undercloud.api.app"]}
    assert lab_users(bad) == {"undercloud.orchestration.resources"}
    assert host_above_the_bottom(bad) == {"undercloud.host.run": ["undercloud.store.db"]}


def test_a_stale_known_circle_fails():
    graph = made_up(undercloud__x="import undercloud.y", undercloud__y="def f():\n    import undercloud.x",
                    undercloud__z="def f():\n    import undercloud.x")
    needed = ("undercloud.y", "undercloud.x")
    assert stale(graph, {needed}) == set()  # still closes the circle
    assert stale(graph, {needed,
                         ("undercloud.z", "undercloud.x"),  # closes no circle
                         ("undercloud.x", "undercloud.y"),  # at module level
                         ("undercloud.x", "undercloud.z")}  # not there at all
                 ) == {("undercloud.z", "undercloud.x"), ("undercloud.x", "undercloud.y"), ("undercloud.x", "undercloud.z")}
