"""No comparison tool times two engines in one process (issue 37; tools/bench/isolated.py says why)."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools" / "bench"
sys.path.insert(0, str(TOOLS))

from isolated import ENGINES, Job, interleave  # noqa: E402
from peer_bare import invalid  # noqa: E402

NAMED = {"tfspec.backends.torch": "torch", "tfspec.backends.onnx": "onnxruntime", **{e: e for e in ENGINES}}
"""Modules whose import names an engine: tfspec's backends name the engine they run on."""


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A worker module on the workers' path: ``work`` imports ``engine`` and returns its pid
    and the time it ran."""
    (tmp_path / "probe.py").write_text(textwrap.dedent("""
        import importlib, os, time

        def work(threads, engine=None):
            if engine:
                importlib.import_module(engine)
            return [os.getpid(), time.monotonic_ns(), threads]
    """))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return Job("probe", "work")


def test_every_timing_runs_in_a_fresh_process_of_its_own_and_rounds_rotate(probe):
    results = interleave({"a": probe, "b": probe, "c": probe}, rounds=2, threads=3)
    pids = [pid for runs in results.values() for pid, _, _ in runs]
    assert len(set(pids)) == 6 and sys.modules["os"].getpid() not in pids
    assert {threads for runs in results.values() for _, _, threads in runs} == {3}
    order = [sorted(results, key=lambda name: results[name][r][1]) for r in range(2)]
    assert order == [["a", "b", "c"], ["b", "c", "a"]]


def test_a_worker_that_imports_a_foreign_engine_is_refused(probe):
    pid, _, _ = probe.but(engines=("onnxruntime",), kwargs={"engine": "onnxruntime"}).run(1)[0]
    assert pid > 0
    with pytest.raises(SystemExit, match="refused: this process imported onnxruntime"):
        probe.but(engines=("ctranslate2",), kwargs={"engine": "onnxruntime"}).run(1)


def test_a_peer_column_below_nine_tenths_of_its_bare_speed_invalidates_the_table():
    assert invalid("CTranslate2", 95, 100) is None
    assert "INVALID" in invalid("CTranslate2", 85, 100)


def engines_named(tree: ast.Module) -> set[str]:
    """The engines a tool's source imports, anywhere in it."""
    named = set()
    for node in ast.walk(tree):
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for module in modules:
            named |= {engine for prefix, engine in NAMED.items() if module == prefix or module.startswith(prefix + ".")}
    return named


def top_level_imports(tree: ast.Module) -> set[str]:
    return {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names} | {
        n.module or "" for n in tree.body if isinstance(n, ast.ImportFrom)}


COMPARISONS = [p.stem for p in sorted(TOOLS.glob("bench_*.py"))
               if len(engines_named(ast.parse(p.read_text()))) >= 2]


def test_the_comparisons_are_found():
    assert {"bench_decode", "bench_translate", "bench_generate", "bench_moe", "bench_serve"} <= set(COMPARISONS)


OWN_PROCESSES = {"bench_restricted": "in_subprocess", "bench_load": "server"}
"""Tools that start a fresh process per measured point their own way (and the function that
does): bench_restricted's peak-memory figures need a process per point, one method each;
bench_load starts each engine's HTTP server as a process of its own, and the load generator
as another (the parent only builds the model)."""


@pytest.mark.parametrize("tool", COMPARISONS)
def test_a_tool_naming_two_engines_times_them_through_the_harness(tool):
    tree = ast.parse((TOOLS / f"{tool}.py").read_text())
    top = top_level_imports(tree)
    if tool in OWN_PROCESSES:
        assert OWN_PROCESSES[tool] in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    else:
        assert "isolated" in top, f"{tool} names {sorted(engines_named(tree))} but does not use tools/bench/isolated.py"
    held = {m for m in top if m.split(".")[0] in ENGINES}
    assert not held, f"{tool} imports {held} at module level: each worker importing the tool would hold them"


def test_importing_the_comparison_tools_imports_no_engine():
    """A worker imports its tool for one engine: the tool itself must bring none."""
    code = f"import sys; sys.path.insert(0, {str(TOOLS)!r})\n" + "".join(f"import {t}\n" for t in COMPARISONS) + (
        f"print([e for e in {ENGINES!r} if e in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.skipif(importlib.util.find_spec("ctranslate2") is None, reason="ctranslate2 not installed")
def test_the_peer_in_the_table_and_bare_run_in_processes_holding_ctranslate2_only(tmp_path):
    import torch

    from bench_decode import ct2_model
    from tfspec import load_spec
    from tfspec.backends.torch import build_module

    spec = load_spec("small")
    torch.manual_seed(0)
    ct2_model(build_module(spec).eval(), spec, tmp_path / "ct2")
    np.save(tmp_path / "src.npy", np.random.default_rng(0).integers(4, spec.vocab.size, (1, 8)))
    job = Job("peer_bare", "ct2_times", ("ctranslate2",), {
        "model": str(tmp_path / "ct2"), "compute": "float32", "sources": {"1": str(tmp_path / "src.npy")},
        "settings": [[1, 1]], "n": 4})
    (table, table_pid), (bare, bare_pid) = job.run(1), dataclasses.replace(job, bare=True).run(1)
    assert len(table) == len(bare) == 1 and table_pid != bare_pid


def test_a_job_runs_under_its_own_interpreter(tmp_path, monkeypatch):
    """An engine installed in a venv of its own (llama-cpp-python) runs in that venv's python."""
    (tmp_path / "where.py").write_text("import sys\n\ndef work(threads):\n    return sys.executable\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    other = tmp_path / "python"
    other.symlink_to(sys.executable)
    assert Job("where", "work", python=str(other)).run(1)[0] == str(other)
    assert Job("where", "work").run(1)[0] == sys.executable
