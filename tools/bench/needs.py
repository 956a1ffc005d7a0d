"""What a tool needs beyond the README's install (``pip install -e ".[cpu,dev]"``), checked before
it starts: each missing piece is one ``error:`` line saying how to get it, and the tool exits with
status 2 instead of stopping part-way (``bench_generate.py --shape`` wrote and converted its
checkpoints for minutes before onnxruntime-genai's model builder failed on a module it imports).
Each tool's docstring says what it needs; tests/test_tools_requirements.py holds them to it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path


def module(name: str, how: str) -> str | None:
    """None where the top-level package ``name`` is installed, else what to do."""
    return None if importlib.util.find_spec(name) else f"{name} is not installed: {how}"


def imports(name: str, how: str, python: str = sys.executable) -> str | None:
    """None where ``python`` imports module ``name`` and all it imports (a module run with
    ``-m``, whose own requirements may not say what it imports), else what to do."""
    try:
        done = subprocess.run([python, "-c", f"import {name}"], capture_output=True, text=True)
    except OSError as e:
        return f"{python}: {e.strerror}: {how}"
    last = done.stderr.strip().splitlines()[-1:] or ["no output"]
    return None if done.returncode == 0 else f"{python} cannot import {name} ({last[0]}): {how}"


def path(where: Path, how: str) -> str | None:
    """None where ``where`` exists, else what to do."""
    return None if Path(where).exists() else f"{where} is missing: {how}"


def require(problems) -> None:
    """Print one ``error:`` line per problem (None: none) and exit with status 2 if there was one."""
    found = [p for p in problems if p]
    for problem in found:
        print(f"error: {problem}", file=sys.stderr)
    if found:
        sys.exit(2)
