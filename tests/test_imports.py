"""The import graph of ``tfspec/`` and ``backends/`` (issue 40), read with ``ast``, no code run.

What counts as an import: every ``import`` and ``from ... import`` statement, at module level
or inside a function. A function-level import among tfspec's own modules only moves a circle
to call time (the module must still be loaded, in some order, for the call to work), so it is
counted; the project's lazy imports are of heavy third-party packages (transformers,
onnxruntime, sympy), which are outside the graph. Not counted: imports under ``if
TYPE_CHECKING:`` (never run) and PEP 562 package attributes (``tfspec/__init__.py``,
``tfspec/spec/__init__.py``, ``tfspec/ir/__init__.py`` import by name on first use). Importing
``a.b.c`` also runs the packages ``a.b`` and ``a`` first, so it counts as importing each of
them that does not contain the importer (its own packages are already loading).

Each package is a case of its own, so a circle shows under the packages it passes through.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI_ENTRY = {"tfspec.__main__"}
"""``python -m tfspec``: the command line's own entry point."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts = ["tfspec", *parts] if parts[0] == "backends" else parts  # installed as tfspec.backends
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for top in ("tfspec", "backends") for p in sorted((ROOT / top).rglob("*.py"))}


def _type_checking(node: ast.If) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imported(name: str, path: Path) -> set[str]:
    """The modules of the tree ``name`` imports (see the module docstring)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found, todo = set(), list(ast.parse(path.read_text(encoding="utf-8")).body)
    while todo:
        node = todo.pop()
        if _type_checking(node):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[:len(package.split(".")) - node.level + 1], *filter(None, [base])])
            found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules() else base for alias in node.names}
        todo.extend(ast.iter_child_nodes(node))
    return {run for target in found for run in _loaded(target) if not (name == run or name.startswith(run + "."))}


def _loaded(target: str) -> set[str]:
    """``target`` and the packages Python runs to load it, those of the tree."""
    parts = target.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & modules().keys()


@cache
def graph() -> nx.DiGraph:
    g = nx.DiGraph()
    for name, path in modules().items():
        g.add_node(name)
        g.add_edges_from((name, target) for target in imported(name, path))
    return g


PACKAGES = sorted({name.rpartition(".")[0] if modules()[name].name != "__init__.py" else name
                   for name in modules()} - {""})


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circles(package):
    circles = [sorted(c) for c in nx.strongly_connected_components(graph())
               if len(c) > 1 and any(m.rpartition(".")[0] == package or m == package for m in c)]
    assert not circles, f"import circles through {package}: {circles}"


@pytest.mark.parametrize("package", PACKAGES)
def test_only_the_command_line_imports_it(package):
    users = sorted(m for m in graph() if (m.rpartition(".")[0] == package or m == package)
                   and not m.startswith("tfspec.cli") and m not in CLI_ENTRY
                   and any(t == "tfspec.cli" or t.startswith("tfspec.cli.") for t in graph().successors(m)))
    assert not users, f"{users} import tfspec.cli: the library must work without its command line"


@pytest.mark.parametrize("first", ["tfspec.layers", "tfspec.ir.build", "tfspec.spec.positions", "tfspec.interop.hf"])
def test_a_package_imported_first_loads(first):
    """What the graph above guards against, run: a fresh process importing ``first`` before
    anything else (``import tfspec.layers`` used to fail on the spec/layers circle)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", f"import {first}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
