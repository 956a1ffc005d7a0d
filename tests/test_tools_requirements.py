"""Every tool in tools/ runs from the README's install (``pip install -e ".[cpu,dev]"``) plus what
its own docstring says to add: each module a tool imports or runs with ``python -m`` is either
installed by that install or named in the tool's docstring, and what a module it runs imports
at its top level comes with the install too (onnxruntime-genai's model builder imports
``onnx_ir``, which onnxruntime-genai itself does not require: `bench_generate.py --shape` failed
at that step on a fresh install)."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOLS = sorted((REPO / "tools").glob("*/*.py"))
OWN = {p.stem for p in TOOLS} | {"tfspec"}
README_EXTRAS = ("cpu", "dev")


def modules(path: Path) -> tuple[set[str], set[str]]:
    """(modules ``path`` imports anywhere, modules it runs as ``[python, "-m", MODULE, ...]``),
    absolute names only."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported, run = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            imported.add(node.module)
        elif isinstance(node, ast.List):
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            run |= {m for flag, m in zip(items, items[1:]) if flag == "-m" and isinstance(m, str)}
    return imported, run


def third_party(names: set[str]) -> set[str]:
    return {n for n in names if n.split(".")[0] not in sys.stdlib_module_names | OWN}


def named(docstring: str, module: str) -> bool:
    """Whether the docstring names ``module`` (or its top package, with - or _ alike)."""
    text = docstring.lower().replace("-", "_")
    return any(re.search(rf"\b{re.escape(m.lower())}\b", text) for m in (module, module.split(".")[0]))


@pytest.mark.parametrize("tool", TOOLS, ids=lambda p: p.name)
def test_tool_documents_what_the_install_lacks(tool):
    imported, run = modules(tool)
    docstring = ast.get_docstring(ast.parse(tool.read_text(encoding="utf-8"))) or ""
    assert docstring, f"{tool.name} has no docstring to say what it needs"
    providers, installed = importlib.metadata.packages_distributions(), installed_by_readme()
    lacking = [m for m in sorted(third_party(imported | run))
               if not {normal(d) for d in providers.get(m.split(".")[0], [])} & installed]
    assert not [m for m in lacking if not named(docstring, m)], \
        f"{tool.name} uses {lacking}, which the README's install lacks: its docstring must say how to get them"


def normal(distribution: str) -> str:
    return distribution.lower().replace("-", "_").replace(".", "_")


def requirement_names(requirements) -> set[str]:
    """Distribution names of requirement strings ("onnx-ir>=1.0; ...": onnx_ir), normalised."""
    return {normal(re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0]) for r in requirements or ()}


@functools.cache
def installed_by_readme() -> frozenset[str]:
    """The distributions the README's install asks for, and what each requires in turn."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = requirement_names(project["dependencies"])
    for extra in README_EXTRAS:
        wanted |= requirement_names(project["optional-dependencies"][extra])
    found, todo = set(), list(wanted)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        try:
            todo += requirement_names(r for r in importlib.metadata.requires(name) or () if "extra ==" not in r)
        except importlib.metadata.PackageNotFoundError:
            pass
    return frozenset(found)


BLOCK = """
import importlib.abc, importlib.metadata, json, sys
allowed, providers = set(json.loads(sys.argv[1])), importlib.metadata.packages_distributions()


class OnlyTheInstall(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        dists = providers.get(name) if "." not in name else None
        if dists and not {d.lower().replace("-", "_").replace(".", "_") for d in dists} & allowed:
            raise ModuleNotFoundError(f"No module named {name!r} in the README's install ({dists[0]})")


sys.meta_path.insert(0, OnlyTheInstall())
for name in sys.argv[2:]:
    try:
        __import__(name)
    except ImportError as e:
        print(f"python -m {name}: {e}")
"""
"""Import modules where only the distributions the README's install brings can be found (one
process: they share torch's import), printing each that fails."""


def test_modules_tools_run_import_only_what_the_install_brings():
    """Each ``python -m MODULE`` a tool runs imports, where only the README's install is there to
    find (distributions installed here by hand hidden), so it runs on a fresh install."""
    run = set().union(*(third_party(modules(tool)[1]) for tool in TOOLS))
    assert "onnxruntime_genai.models.builder" in run  # tools/bench/llm_engines.py's int4 peer
    here = [m for m in sorted(run) if importlib.util.find_spec(m.split(".")[0])]  # the rest: named (above)
    allowed = json.dumps(sorted(installed_by_readme() | {"tfspec"}))
    done = subprocess.run([sys.executable, "-c", BLOCK, allowed, *here], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stdout, done.stdout + done.stderr[-2000:]
