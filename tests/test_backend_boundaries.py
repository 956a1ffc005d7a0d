"""What each backend may import (issue 52), read from the import graph of ``tests/test_imports.py``
and checked in fresh processes: the ONNX lowerings and variants load neither torch, the
PyTorch backend, the parity checks nor the Hugging Face families; running an export (translate,
generate, serve) loads neither torch nor the families; the parity checks are the one place
that joins the two backends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_imports import graph

ROOT = Path(__file__).resolve().parents[1]
ONNX, TORCH, PARITY = "tfspec.backends.onnx", "tfspec.backends.torch", "tfspec.backends.parity"
APPLICATIONS = ("tfspec.cli", "tfspec.serve", "tfspec.__main__")
"""Layers over the library that compose it with the backends: the command line and the server."""
CHECKED_EXPORTS = {f"{ONNX}.exporter", f"{ONNX}.variants.genai", f"{ONNX}.hub"}
"""Where the ONNX backend asks for the parity checks: exporting a PyTorch model, checked
against it (a function-level import, run only when a check is asked for)."""


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _edges(source: str, target: str) -> list[tuple[str, str]]:
    return sorted((a, b) for a, b in graph().edges if _inside(a, source) and _inside(b, target))


@pytest.mark.parametrize("target", [TORCH, "tfspec.interop", "tfspec.cli", "tfspec.serve"])
def test_the_onnx_backend_imports_no_other_backend_interop_or_application(target):
    assert _edges(ONNX, target) == []


def test_the_onnx_backend_reaches_the_parity_checks_only_where_it_checks_an_export():
    assert {a for a, _ in _edges(ONNX, PARITY)} <= CHECKED_EXPORTS


@pytest.mark.parametrize("target", [ONNX, PARITY, "tfspec.interop", "tfspec.cli", "tfspec.serve"])
def test_the_torch_backend_imports_no_other_backend_interop_or_application(target):
    assert _edges(TORCH, target) == []


def test_the_core_imports_no_backend():
    core = sorted((a, b) for a, b in graph().edges if a.startswith("tfspec.") and not a.startswith("tfspec.backends")
                  and not any(_inside(a, app) for app in APPLICATIONS) and _inside(b, "tfspec.backends"))
    assert core == []


LOADED = """\
import sys
from tfspec.backends.onnx.lower import lowerings
from tfspec.backends.onnx.variants import variants
from tfspec.backends.onnx.graphs import emit
assert lowerings() and variants()
print("loaded:", *sorted({m.split(".")[0] if not m.startswith("tfspec") else ".".join(m.split(".")[:3])
                          for m in sys.modules if m == "torch" or m.startswith(("torch.", "transformers",
                          "tfspec.interop", "tfspec.backends.torch", "tfspec.backends.parity"))}))
"""


def test_discovering_the_onnx_lowerings_and_variants_loads_no_torch_nor_families():
    done = subprocess.run([sys.executable, "-c", LOADED], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "loaded:"


TRANSLATED = """\
import runpy, sys
sys.argv = ["tfspec", "translate", sys.argv[1], sys.argv[2], "--beam", "2", "--max-extra", "3"]
try:
    runpy.run_module("tfspec", run_name="__main__", alter_sys=True)
except SystemExit as e:
    assert e.code in (0, None), e.code
print("loaded:", *[m for m in ("torch", "transformers", "tfspec.interop.hf", "tfspec.backends.torch",
                               "tfspec.backends.parity") if m in sys.modules])
"""


def test_translating_with_an_export_loads_neither_torch_nor_the_families(tmp_path):
    """``tfspec translate`` on token ids, over an export an older release wrote."""
    export = Path(__file__).parent / "fixtures" / "before-masks" / "seq2seq-onnx"
    (tmp_path / "in.txt").write_text("5 6 7\n8 9\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", TRANSLATED, str(export), str(tmp_path / "in.txt")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and lines[-1] == "loaded:"
