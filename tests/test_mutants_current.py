"""The curated mutants (tools/checks/mutants) keep up with the code: each one's text occurs exactly
once in its file and each test it names exists (``load_mutants`` exits, listing the stale ones,
otherwise). A change that moves such code fails here, in the fast suite, rather than the next
time someone runs `tools/checks/mutation_check.py` (eight had gone stale unnoticed)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "checks"))

from mutation_check import load_mutants  # noqa: E402


def test_every_mutant_applies_once_and_names_tests_that_exist():
    assert len(load_mutants()) > 0
