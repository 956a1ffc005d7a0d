"""Shared helpers: writing specs to temporary files and running the CLI in-process."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tfspec.cli import main

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "specs"
SHIPPED = sorted(str(p.relative_to(SPECS).with_suffix("")) for p in SPECS.rglob("*.yaml"))


@pytest.fixture
def write_spec(tmp_path):
    """write_spec(text, name='spec.yaml') -> path of a spec file holding the dedented text."""
    def write(text: str, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip())
        return path
    return write


@pytest.fixture
def cli(capsys):
    """cli(*args) -> (exit status, stdout, stderr) of `tfspec args...`."""
    def run(*args):
        code = main([str(a) for a in args])
        out = capsys.readouterr()
        return code, out.out, out.err
    return run
