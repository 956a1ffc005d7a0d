"""tools/checks/gpu_check.py runs anywhere; its CUDA path needs a GPU machine (see BENCHMARKS.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch


def test_gpu_check_says_one_line_without_cuda():
    """tools/checks/gpu_check.py is safe anywhere: without CUDA it explains in one line and exits 0."""
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine runs the real check")
    tool = Path(__file__).resolve().parents[1] / "tools" / "checks" / "gpu_check.py"
    proc = subprocess.run([sys.executable, str(tool)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.count("\n") == 1 and "nothing to check" in proc.stdout


def test_gpu_check_runs_through_on_cpu():
    """The whole check, CUDA graphs' static decoder included, runs through on CPU (a dry run),
    so the tool is known to work before a GPU session spends its time on it."""
    tool = Path(__file__).resolve().parents[1] / "tools" / "checks" / "gpu_check.py"
    proc = subprocess.run([sys.executable, str(tool), "--dry-run-on-cpu", "--spec", "tiny", "--rounds", "1",
                           "--src-len", "6", "--out-len", "6"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("ok   CUDA graphs vs growing cache") == 4
    assert "| batch 16, beam 4 |" in proc.stdout
    assert "tfspec ORT CUDA graphs fp16 / PyTorch eager CUDA fp16" in proc.stdout
