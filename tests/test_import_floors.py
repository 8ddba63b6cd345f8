"""The engine's packages are floors: a module imports only its own floor and those below it,
and no packages import each other in a circle. Every import counts there, including those
under TYPE_CHECKING and those inside functions. Between modules, no import made at run time
closes a circle; a type-only back-reference (a helper naming its owner's class under
TYPE_CHECKING) is allowed, since it adds no dependency at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Bottom to top. A top-level module of engine/ is named by its file; a package by its folder.
FLOORS: list[tuple[str, ...]] = [
    ("errors", "align", "text", "allocs", "progress", "fileio", "paths"),
    ("model",),
    ("state",),
    ("backends",),
    ("conversation",),
    ("snapshot",),
    ("session",),
    ("process",),
    ("tools",),
    ("__main__",),
]
FLOOR_OF = {unit: level for level, units in enumerate(FLOORS) for unit in units}
# What the front end may import of the engine: the protocol's constants and types, the
# session files' names, and the moves of those files (rename, trash, search: the session list
# does them under the session's lock, as `channel sessions` does). Nothing that pulls in
# numpy: the TUI must start fast (test_session_manage and test_session_search check their
# imports).
TUI_MAY_IMPORT = {"engine.process.protocol", "engine.process.events", "engine.process.flags",
                  "engine.paths", "engine.session.manage", "engine.session.search"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def type_only_nodes(tree: ast.AST) -> set[ast.AST]:
    """The import statements under `if TYPE_CHECKING:`."""
    return {inner for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for stmt in node.body for inner in ast.walk(stmt)}


def imported_modules(source: str, name: str, is_package: bool, known: set[str],
                     runtime_only: bool = False) -> set[str]:
    """The project modules module `name` imports; `from pkg import sub` imports sub."""
    package = name.split(".") if is_package else name.split(".")[:-1]
    tree = ast.parse(source)
    skip = type_only_nodes(tree) if runtime_only else set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if node in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names
                         if f"{target}.{a.name}" in known)
    return {m for m in found if m in known}


def project_graph(runtime_only: bool = False) -> dict[str, set[str]]:
    paths = [p for root in ("engine", "channel_tui", "channel_cli")
             for p in (REPO / root).rglob("*.py")]
    known = {module_name(p) for p in paths}
    return {module_name(p): imported_modules(p.read_text(), module_name(p),
                                             p.name == "__init__.py", known, runtime_only)
            - {module_name(p)} for p in paths}


def package_graph() -> dict[str, set[str]]:
    """Each package (engine.backends.vulkan is one) and what its modules import, by package;
    a top-level module of engine/ counts as its own package."""

    def package(module: str) -> str:
        is_package = (REPO / Path(*module.split(".")) / "__init__.py").is_file()
        return module if is_package or module.count(".") < 2 else module.rsplit(".", 1)[0]

    graph: dict[str, set[str]] = {}
    for mod, deps in project_graph().items():
        own = package(mod)
        graph.setdefault(own, set()).update(package(d) for d in deps)
    return {pkg: {d for d in deps if d != pkg and not pkg.startswith(d + ".")}
            for pkg, deps in graph.items()}


def floor(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "engine" or len(parts) == 1:
        return None
    return FLOOR_OF[parts[1]]


def test_every_engine_unit_has_a_floor() -> None:
    units = {p.stem if p.is_file() else p.name for p in (REPO / "engine").iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert units == set(FLOOR_OF), "a new engine module or package needs a floor here"


def test_engine_imports_only_downward() -> None:
    upward = [f"{mod} (floor {floor(mod)}) imports {dep} (floor {floor(dep)})"
              for mod, deps in project_graph().items() if mod.startswith("engine.")
              for dep in deps
              if not dep.startswith("engine.") or floor(dep) is None or
              floor(dep) > floor(mod)]
    assert upward == []


def cycles_in(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in graph[node]:
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_package_imports_another_in_a_circle() -> None:
    assert cycles_in(package_graph()) == []


def test_no_module_imports_another_in_a_circle_at_run_time() -> None:
    assert cycles_in(project_graph(runtime_only=True)) == []


def test_cycles_are_found() -> None:
    assert cycles_in({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_front_end_imports_only_the_protocol() -> None:
    graph = project_graph()
    reached = {dep for mod, deps in graph.items() if mod.startswith("channel_tui")
               for dep in deps if dep.startswith("engine")}
    assert reached <= TUI_MAY_IMPORT | {"engine"}, reached - TUI_MAY_IMPORT


def test_every_form_of_import_is_seen() -> None:
    source = ("from typing import TYPE_CHECKING\nfrom .. import state\n"
              "from ..process import server\nif TYPE_CHECKING:\n"
              "    from engine.session.session import Session\n"
              "def f():\n    import engine.tools.bench\n")
    known = {"engine.state", "engine.process", "engine.process.server",
             "engine.session.session", "engine.tools.bench"}
    assert imported_modules(source, "engine.model.probe", False, known) == known
    assert imported_modules(source, "engine.model.probe", False, known, runtime_only=True) \
        == known - {"engine.session.session"}
