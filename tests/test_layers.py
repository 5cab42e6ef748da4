"""The structure of geryon/: no import circle between its modules, no import up the layer order.

Pure and fast: every geryon/**/*.py is parsed with `ast` (nothing imported). An edge A -> B is any
import of geryon module B written in module A, wherever it is written:
  * at module level, inside functions (lazy imports) and under `if TYPE_CHECKING:`. Lazy imports count:
    deferring an import makes it cheaper at start-up, not independent; a circle closed by a function-level
    import is still two modules that cannot be understood (or moved) one without the other, and
    whether it breaks at run time depends on the call order. Type-only imports count for the same reason.
  * `importlib.import_module("geryon.x")` with a literal name, and `[..., "-m", "geryon.x", ...]` (a
    module started as a process): a dependency the same as an import, just not written as one.
`from geryon.pkg import name` is an edge to geryon.pkg.name when that is a module, else to geryon.pkg.
Implicit imports of parent packages (importing geryon.a.b runs geryon/a/__init__.py) are not edges.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "geryon"

# The layer order, bottom first: a module may import from its own layer and from layers below it,
# never from a layer above. A layer is a subpackage of geryon/ or a top-level module of geryon/
# ("geryon" is geryon/__init__.py itself: __version__). Taken from what the code imports:
#   - errors/units/fields/progress/tfenv: leaves (tfenv imports errors only).
#   - tagger: the parameter tagger and its map table, below everything that ships the map.
#   - jobs: the cluster view of jobs in etcd and their bands (above tagger for MAX_CLASSES), below the
#     agent and tf, which are to follow a host's bands.
#   - agent: the host agent; its config and driver protocol are what fabric renders switches from,
#     the testbed builds hosts with and geryon.tf reports to, so it is below fabric, tf and testbed.
#   - cluster: the local TensorFlow cluster (task processes, their protocol, the model zoo, process
#     helpers), above tf (a task serves with geryon.tf) and below what trains and measures on it.
#   - threshold (profiles, simulator, search) below demo, which runs everything on the testbed.
#   - plan (aggregation schedules over a server's links) above threshold, whose simulator it will use.
#   - dashboard, then the `geryon` command (cli, __main__) on top.
# Neighbours that do not import each other (fabric/tf) are ordered arbitrarily.
LAYERS: tuple[str, ...] = (
    "geryon",
    "errors",
    "units",
    "fields",
    "progress",
    "tfenv",
    "tagger",
    "jobs",
    "agent",
    "fabric",
    "tf",
    "testbed",
    "cluster",
    "threshold",
    "plan",
    "demo",
    "dashboard",
    "cli",
    "__main__",
)

# Violations still to fix, each listed exactly (the test also fails when one of them is gone, so the
# lists can only shrink). Empty is the goal.
ALLOWED_CYCLES: set[frozenset[str]] = set()
ALLOWED_UPWARD: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _owner(name: str, mods: dict[str, Path]) -> str | None:
    """The module `name` refers to: itself or the nearest enclosing one (geryon.a.b.attr -> geryon.a.b)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def imported_names(module: str, source: str, is_package: bool = False) -> Iterator[tuple[str, int]]:
    """(dotted name, line) of everything `module` imports or starts, lazy and type-only imports included."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                yield f"{source}.{alias.name}", node.lineno
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "import_module" and node.args and isinstance(node.args[0], ast.Constant):
                yield str(node.args[0].value), node.lineno
        elif isinstance(node, ast.List | ast.Tuple):
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            for flag, target in itertools.pairwise(items):
                if flag == "-m" and isinstance(target, str):
                    yield target, node.lineno


@cache
def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported geryon module: first line importing it}."""
    mods = _modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in mods.items():
        edges: dict[str, int] = {}
        for name, line in imported_names(module, path.read_text(), path.name == "__init__.py"):
            if name != "geryon" and not name.startswith("geryon."):
                continue
            target = _owner(name, mods)
            if target is not None and target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def one_circle(graph: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """A shortest circle through the component's first module, to print (A -> B -> ... -> A)."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in graph[node]:
            if child == start:
                return [*paths[node], start]
            if child in members and child not in paths:
                paths[child] = [*paths[node], child]
                queue.append(child)
    raise AssertionError(f"no circle in {component}")  # pragma: no cover: an SCC has one


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_edges(graph: dict[str, dict[str, int]]) -> list[tuple[str, str, int]]:
    rank = {name: i for i, name in enumerate(LAYERS)}
    return [
        (module, target, line)
        for module, edges in graph.items()
        for target, line in edges.items()
        if rank[layer(target)] > rank[layer(module)]
    ]


def _where(module: str, line: int) -> str:
    return f"{_modules()[module].relative_to(ROOT)}:{line}"


def test_every_layer_is_declared() -> None:
    layers = {layer(m) for m in import_graph()}
    assert layers <= set(LAYERS), f"add {sorted(layers - set(LAYERS))} to LAYERS in {__file__}"


def test_no_import_circle() -> None:
    graph = import_graph()
    found = {frozenset(c): c for c in cycles(graph)}
    lines = []
    for key, component in found.items():
        if key in ALLOWED_CYCLES:
            continue
        circle = one_circle(graph, component)
        steps = " -> ".join(f"{a} ({_where(a, graph[a][b])})" for a, b in itertools.pairwise(circle))
        lines.append(f"circle of {len(component)} modules {component}:\n    {steps} -> {circle[0]}")
    gone = [sorted(c) for c in ALLOWED_CYCLES - set(found)]
    assert not lines, "import circles in geryon/:\n" + "\n".join(lines)
    assert not gone, f"no longer circles: remove them from ALLOWED_CYCLES: {gone}"


def test_no_import_up_the_layers() -> None:
    edges = upward_edges(import_graph())
    bad = [
        f"{module} ({layer(module)}) imports {target} ({layer(target)}, higher) at {_where(module, line)}"
        for module, target, line in edges
        if (module, target) not in ALLOWED_UPWARD
    ]
    gone = sorted(ALLOWED_UPWARD - {(m, t) for m, t, _ in edges})
    assert not bad, f"upward imports (layer order, bottom first: {', '.join(LAYERS)}):\n" + "\n".join(bad)
    assert not gone, f"no longer upward: remove them from ALLOWED_UPWARD: {gone}"


def test_the_checker_sees_lazy_imports_processes_and_circles() -> None:
    source = (
        "import os\n"
        "from . import units\n"
        "def f():\n"
        "    from geryon.agent import config\n"
        "    importlib.import_module('geryon.agent.service')\n"
        "    run([sys.executable, '-m', 'geryon.demo.task', spec])\n"
    )
    names = [name for name, _ in imported_names("geryon.cli", source)]
    assert names == ["os", "geryon.units", "geryon.agent.config", "geryon.agent.service", "geryon.demo.task"]
    graph = {
        "geryon.a": {"geryon.b": 1},
        "geryon.b": {"geryon.c": 1},
        "geryon.c": {"geryon.a": 1},
        "geryon.d": {},
    }
    assert cycles(graph) == [["geryon.a", "geryon.b", "geryon.c"]]
    assert one_circle(graph, ["geryon.a", "geryon.b", "geryon.c"]) == [
        "geryon.a",
        "geryon.b",
        "geryon.c",
        "geryon.a",
    ]
