"""Benchmark results as data: a run's tables saved as JSON under tools/results/, from which
tools/generators/benchmarks.py writes BENCHMARKS.md's tables and tools/generators/charts.py its
charts, so a published number is the one a tool measured, not one copied by hand.

A record is what one command printed: its date, the command, the conditions line (threads,
CPU, huge pages) and its tables. Each table keeps its numbers as numbers and one format per
column, so the Markdown reads as the tool printed it and a chart reads the values.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import shlex
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"


@dataclasses.dataclass
class Table:
    """One Markdown table: ``columns`` with a ``formats`` entry each (``".2f"``; "" for text),
    ``rows`` of cells, a ``title`` (a heading line) and ``notes`` (lines) around it."""

    columns: list[str]
    formats: list[str]
    rows: list[list]
    title: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)

    def markdown(self) -> str:
        """The table as the tool prints it, with its title and notes."""
        cells = [[format(v, f) if f else str(v) for v, f in zip(row, self.formats)] for row in self.rows]
        lines = [f"| {' | '.join(self.columns)} |", "|" + "---|" * len(self.columns)]
        lines += [f"| {' | '.join(row)} |" for row in cells]
        parts = [self.title] if self.title else []
        return "\n\n".join(parts + ["\n".join(lines)] + self.notes)

    def column(self, name: str) -> list:
        """The values of column ``name``, row by row."""
        index = self.columns.index(name)
        return [row[index] for row in self.rows]


def record(header: str, tables: list[Table]) -> dict:
    """A run's record: today's date, the command that ran (from ``sys.argv``), its conditions line."""
    command = "python " + shlex.join(["tools/" + Path(sys.argv[0]).resolve().relative_to(RESULTS.parent).as_posix(),
                                      *sys.argv[1:]])
    return {"date": datetime.date.today().isoformat(), "command": command, "header": header,
            "tables": [dataclasses.asdict(t) for t in tables]}


def save(name: str, data: dict) -> Path:
    """Write ``data`` as tools/results/NAME.json (what BENCHMARKS.md's ``<!-- results: NAME -->`` shows)."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path


def load(name: str) -> dict:
    """The saved record ``name``."""
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


def tables(data: dict) -> list[Table]:
    """The tables of a record."""
    return [Table(**t) for t in data["tables"]]


def markdown(data: dict) -> str:
    """A record as BENCHMARKS.md shows it: its command and date, conditions, then its tables."""
    head = f"`{data['command']}`, {data['date']}: {data['header']}"
    return "\n\n".join([head] + [t.markdown() for t in tables(data)])
