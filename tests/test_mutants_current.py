"""The curated mutants (tools/mutants) keep up with the code: each one's text occurs exactly
once in its file and each test it names exists. A change that moves such code fails here, in
the fast suite, rather than the next time someone runs `tools/mutation_check.py` (which refuses
to run while any mutant is stale: eight had gone stale unnoticed)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

from mutation_check import load_mutants  # noqa: E402


def test_every_mutant_applies_once_and_names_tests_that_exist():
    mutants = load_mutants()  # exits, listing them, where a mutant's text is not found exactly once
    missing = []
    for mutant in mutants:
        for test in mutant.tests:
            path, _, name = test.partition("::")
            function = name.split("[")[0].split("::")[-1]
            source = REPO / path
            if not source.is_file() or (function and f"def {function}(" not in source.read_text()):
                missing.append(f"{mutant.name}: {test}")
    assert not missing, missing
