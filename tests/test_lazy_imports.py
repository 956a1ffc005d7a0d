"""Quick commands stay quick: ``tfspec --version`` and ``--help`` import none of the heavy
libraries (the CLI imports a subcommand's module only when that subcommand runs), and the
list of subcommands ``--help`` prints agrees with what their modules register."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from tfspec.cli import COMMANDS

HEAVY = ("torch", "onnx", "networkx", "pydantic")

PROBE = f"""\
import runpy, sys
try:
    runpy.run_module("tfspec", run_name="__main__", alter_sys=True)  # what `python -m tfspec` runs
except SystemExit as e:
    assert e.code == 0, e.code
print("imported:", *[m for m in {HEAVY!r} if m in sys.modules])
"""


@pytest.mark.parametrize("option", ["--version", "--help"])
def test_quick_commands_import_no_heavy_library(option):
    """A structural check, not a timing: a fresh interpreter's sys.modules after the command."""
    done = subprocess.run([sys.executable, "-c", PROBE, option], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).parents[1])
    assert done.stdout.splitlines()[-1] == "imported:"


def test_each_module_registers_the_commands_listed_for_it():
    registered = {}

    def command(name, fn, description=None):
        registered[name] = module
        return argparse.ArgumentParser()  # takes whatever arguments the module adds

    for module in {module for module, _ in COMMANDS.values()}:
        importlib.import_module(f"tfspec.cli.{module}").register(command)
    assert registered == {name: module for name, (module, _) in COMMANDS.items()}


DEPLOYED = """\
import sys
import numpy as np
from tfspec.backends.onnx import OnnxModel
from tfspec.search import SearchOptions, search
import tfspec.serve.app
decoder = OnnxModel(sys.argv[1], device="cpu").decoder()
out = search(decoder, np.array([[5, 6, 7, 2]]), SearchOptions(beam=2, max_extra=4))
print("torch" in sys.modules, len(out))
"""


def test_loading_and_decoding_an_export_never_imports_torch():
    """Deployments (translate, serve) load exports with onnxruntime alone: torch costs seconds
    of start-up and hundreds of MB a server never uses. The export here was written by an older
    release; the check is structural (sys.modules), not a timing."""
    export = Path(__file__).parent / "fixtures" / "before-masks" / "seq2seq-onnx"
    done = subprocess.run([sys.executable, "-c", DEPLOYED, str(export)], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).parents[1])
    assert done.stdout.split() == ["False", "1"]
