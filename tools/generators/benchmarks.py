"""Writes BENCHMARKS.md's measured tables from the benchmarks' saved results (tools/results/*.json,
``tools/bench/results.py``): the text between ``<!-- results: NAME -->`` and ``<!-- /results -->``
is record NAME as its tool printed it (command, date, conditions, tables), so a published table is
what a run measured; the words around it are the reader's. ``tests/test_layout.py`` fails the fast
suite when the page and the records differ.

    python tools/bench/bench_optimum.py --save optimum    # a run writes tools/results/optimum.json
    python tools/generators/benchmarks.py                 # rewrite the marked tables of BENCHMARKS.md
    python tools/generators/benchmarks.py --check         # exit 1 if BENCHMARKS.md is stale
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "bench"))

import results  # noqa: E402

PAGE = ROOT / "BENCHMARKS.md"
REGION = re.compile(r"(<!-- results: ([\w.-]+) -->\n)(?:.*?\n)??(<!-- /results -->)", re.S)


def names(text: str) -> list[str]:
    """The records a page shows, in order."""
    return [m.group(2) for m in REGION.finditer(text)]


def page(text: str) -> str:
    """``text`` with every marked region rewritten from its record."""
    return REGION.sub(lambda m: m.group(1) + results.markdown(results.load(m.group(2))) + "\n" + m.group(3), text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if BENCHMARKS.md differs from the records")
    text = PAGE.read_text(encoding="utf-8")
    new = page(text)
    if parser.parse_args().check:
        if new != text:
            sys.exit("BENCHMARKS.md is stale: run `python tools/generators/benchmarks.py`")
        return
    PAGE.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
