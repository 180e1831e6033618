"""The storage seam: the operation modules take a StoreHandle, never the Store class."""

from __future__ import annotations

import ast
from pathlib import Path

import offload.store

STORE_DIR = Path(offload.store.__file__).parent
OPERATIONS = (
    "life/lifecycle",
    "search/pipeline",
    "search/hybrid",
    "write/vectors",
    "life/maintenance",
    "life/archive",
    "life/health",
)


def _imports(module: str) -> set[str]:
    tree = ast.parse((STORE_DIR / f"{module}.py").read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_no_operation_module_imports_the_store_class() -> None:
    importers = [m for m in OPERATIONS if "offload.store.store" in _imports(m)]
    assert importers == []


def test_no_store_module_calls_another_objects_private_methods() -> None:
    offenders = []
    for path in sorted(STORE_DIR.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name)
                and node.value.id == "store"
            ):
                offenders.append(f"{path.name}:{node.lineno} store.{node.attr}")
    assert offenders == []
