"""The rules of the code's shape, read from the source (ast, no import of offload's modules).

Layers, imports pointing down only: cli -> serve -> surfaces (proxy, mcp, gateway,
sections) -> llm -> store -> core -> config, errors. Surfaces never import each other; core
does no I/O; no module imports another's private names; and offload's modules import each
other without a cycle, counting imports made only for type checking and imports inside
functions (each is a dependency a reader follows, and a cycle among them is a knot).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# each top-level part of offload and its layer: a module imports only its own part or lower
LAYERS = {
    "errors": 0,
    "config": 1,
    "core": 2,
    "store": 3,
    "llm": 4,
    "proxy": 5,
    "mcp": 5,
    "gateway": 5,
    "sections": 5,
    "serve": 6,
    "cli": 7,
}
SURFACES = {"proxy", "mcp", "gateway", "sections"}
# what core may not import: files, the environment (settings are built at the edge),
# sockets, processes, databases, HTTP, event loops, compression of stored bytes (threads'
# locks are fine)
IO_MODULES = {
    "os",
    "io",
    "pathlib",
    "shutil",
    "tempfile",
    "glob",
    "fcntl",
    "mmap",
    "sqlite3",
    "socket",
    "ssl",
    "select",
    "selectors",
    "subprocess",
    "multiprocessing",
    "asyncio",
    "anyio",
    "http",
    "urllib.request",
    "httpx",
    "httpcore",
    "requests",
    "psycopg",
    "psycopg_pool",
    "platformdirs",
    "uvicorn",
    "starlette",
    "zstandard",
}


@dataclass(frozen=True)
class Import:
    """One import statement's target, as a module of offload or a third-party name."""

    source: str  # the importing module
    target: str  # the imported module (a package's __init__ when a name of it is imported)
    names: tuple[str, ...]  # the names taken from it (empty for `import x`)
    line: int


@cache
def modules() -> dict[str, Path]:
    """Every module of offload by its dotted name (a package by its own name)."""
    out: dict[str, Path] = {}
    for path in sorted((SRC / "offload").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(source: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = source.split(".") if path.name == "__init__.py" else source.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


@cache
def imports_of(source: str) -> tuple[Import, ...]:
    """Every import in a module, wherever it stands (top level, TYPE_CHECKING, functions)."""
    return tuple(_imports(source))


def _imports(source: str) -> Iterator[Import]:
    known = modules()
    path = known[source]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(source, alias.name, (), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(source, path, node)
            names = tuple(a.name for a in node.names)
            taken = [n for n in names if f"{module}.{n}" in known]  # submodules
            for name in taken:
                yield Import(source, f"{module}.{name}", (), node.lineno)
            rest = tuple(n for n in names if n not in taken)
            if rest or not taken:
                yield Import(source, module, rest, node.lineno)


def _ours(imports: Iterable[Import]) -> list[Import]:
    return [i for i in imports if i.target == "offload" or i.target.startswith("offload.")]


def _part(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_part_of_offload_has_a_layer() -> None:
    parts = {_part(m) for m in modules()} - {None}
    assert parts - set(LAYERS) == set()


def test_imports_point_down_the_layers() -> None:
    wrong = []
    for source in modules():
        here = _part(source)
        if here is None:  # offload/__init__.py: lazy re-exports of the library surface
            continue
        for imp in _ours(imports_of(source)):
            there = _part(imp.target)
            if there is None or there == here:
                continue
            if LAYERS[there] >= LAYERS[here]:
                wrong.append(f"{source}:{imp.line} imports {imp.target}")
    assert wrong == []


def test_surfaces_never_import_each_other() -> None:
    wrong = []
    for source in modules():
        here = _part(source)
        if here not in SURFACES:
            continue
        for imp in _ours(imports_of(source)):
            there = _part(imp.target)
            if there in SURFACES and there != here:
                wrong.append(f"{source}:{imp.line} imports {imp.target}")
    assert wrong == []


def test_core_and_errors_do_no_io() -> None:
    wrong = []
    for source in modules():
        if _part(source) not in {"core", "errors"}:
            continue
        for imp in imports_of(source):
            top = imp.target.split(".")[0]
            if top in IO_MODULES or imp.target in IO_MODULES:
                wrong.append(f"{source}:{imp.line} imports {imp.target}")
    assert wrong == []


def test_no_module_imports_a_private_name_of_another() -> None:
    wrong = []
    for source in modules():
        for imp in _ours(imports_of(source)):
            private = [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
            hidden = [p for p in imp.target.split(".") if p.startswith("_") and p != "__init__"]
            if private or hidden:
                wrong.append(f"{source}:{imp.line} imports {imp.target} {private or ''}")
    assert wrong == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
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


def import_graph() -> dict[str, set[str]]:
    """Which of offload's modules each module imports (by any import statement)."""
    known = modules()
    return {
        source: {i.target for i in _ours(imports_of(source)) if i.target in known} - {source}
        for source in known
    }


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycle_among_offloads_modules() -> None:
    assert _cycles(import_graph()) == []


def test_no_folder_of_offload_holds_more_than_15_modules() -> None:
    tops = [SRC / "offload"]
    crowded = {
        str(folder.relative_to(SRC)): count
        for top in tops
        for folder in [top, *(p for p in top.rglob("*") if p.is_dir())]
        if (count := len([p for p in folder.glob("*.py") if p.name != "__init__.py"])) > 15
    }
    assert crowded == {}


# the store's packages, lowest first: each imports only packages of a lower rank (the
# modules at the store's top, the facade and the seams every package uses, are apart)
STORE_PACKAGES = {"sqlite": 0, "postgres": 0, "write": 1, "search": 2, "life": 3}


# the proxy's packages, lowest first (app.py and state.py, at the proxy's top, are apart:
# state is what one process shares, app puts the routes together)
PROXY_PACKAGES = {"rewrite": 0, "figures": 0, "transport": 0, "retrieval": 1, "routes": 2}


def _package(part: str, module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["offload", part] or len(parts) < 4:
        return None
    return parts[2]


def _upward_imports(part: str, ranks: dict[str, int]) -> list[str]:
    wrong = []
    for source in modules():
        here = _package(part, source)
        if here is None:
            continue
        for imp in _ours(imports_of(source)):
            there = _package(part, imp.target)
            if there is None or there == here:
                continue
            if ranks[there] >= ranks[here]:
                wrong.append(f"{source}:{imp.line} imports {imp.target}")
    return wrong


def test_the_stores_packages_import_each_other_one_way() -> None:
    assert _upward_imports("store", STORE_PACKAGES) == []


def test_the_proxys_packages_import_each_other_one_way() -> None:
    assert _upward_imports("proxy", PROXY_PACKAGES) == []
