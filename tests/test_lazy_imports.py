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
