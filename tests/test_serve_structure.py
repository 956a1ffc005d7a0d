"""The shape of ``tfspec/serve`` read with ``ast``: no import circles among its modules (imports
inside functions count: a circle hidden in a function is still one), no import of ``tfspec.cli``
(the CLI calls the server, never the other way), and no private name of another module imported."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

SERVE = Path(__file__).resolve().parents[1] / "tfspec" / "serve"


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in ``path``, relative ones resolved within tfspec.serve."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                module = ".".join(["tfspec", "serve"][: 3 - node.level] + ([module] if module else []))
            found.append((module, [alias.name for alias in node.names]))
    return found


def graph() -> nx.DiGraph:
    """Edges from each module of tfspec.serve to the ones of tfspec.serve it imports."""
    modules = {f"tfspec.serve.{p.stem}" for p in SERVE.glob("*.py") if p.stem != "__init__"}
    g = nx.DiGraph()
    for path in SERVE.glob("*.py"):
        here = "tfspec.serve" if path.stem == "__init__" else f"tfspec.serve.{path.stem}"
        g.add_node(here)
        for module, names in imports(path):
            if module in modules or module == "tfspec.serve" and not names:
                targets = [module]
            elif module == "tfspec.serve":  # a submodule, or a name of the package's __init__
                targets = [f"{module}.{n}" if f"{module}.{n}" in modules else module for n in names]
            else:
                targets = []
            g.add_edges_from((here, t) for t in targets)
    return g


def test_no_import_circles_in_tfspec_serve():
    assert list(nx.simple_cycles(graph())) == []


def test_tfspec_serve_never_imports_the_cli_nor_private_names():
    bad = []
    for path in SERVE.glob("*.py"):
        for module, names in imports(path):
            if module == "tfspec.cli" or module.startswith("tfspec.cli."):
                bad.append(f"{path.name}: {module}")
            bad += [f"{path.name}: {module}.{n}" for n in names if n.startswith("_") and module.startswith("tfspec")]
    assert bad == []
