"""Draws the speed comparisons of BENCHMARKS.md as charts (docs/charts/NAME.png) from the saved
records (tools/results/NAME.json, ``tools/bench/results.py``), so a picture shows the numbers the
tables hold. A record is drawn when its speed tables have a ``batch`` column, tok/s columns and a
``tfspec / PEER`` ratio: every engine's speed over the peer's (bare controls left out) as bars
per model and batch. Needs matplotlib (``pip install 'tfspec[plot]'``).

    python tools/generators/charts.py                 # every record with speed tables
    python tools/generators/charts.py optimum         # one
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "bench"))

import results  # noqa: E402

CHARTS = ROOT / "docs" / "charts"
SPEED = " (tok/s)"


def speed_tables(data: dict) -> list[tuple[str, results.Table]]:
    """(model, table) for each speed table of a record, the model named by the table before it."""
    found, model = [], ""
    for table in results.tables(data):
        if table.title:
            model = table.title.lstrip("# ").split(":")[0]
        if "batch" in table.columns and any(c.endswith(SPEED) for c in table.columns):
            found.append((model, table))
    return found


def peer(table: results.Table) -> str:
    """The engine the ratios divide by (``tfspec / optimum``: optimum)."""
    return next(c.split(" / ")[1] for c in table.columns if c.startswith("tfspec / "))


def engines(table: results.Table) -> list[str]:
    """The engines a chart shows: tok/s columns that are not bare controls."""
    return [c[:-len(SPEED)] for c in table.columns if c.endswith(SPEED) and not c.endswith(f"bare{SPEED}")]


def draw(name: str, out: Path) -> Path | None:
    """Record ``name``'s speed tables as grouped bars, written to ``out``; None when it has none."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = results.load(name)
    tables = speed_tables(data)
    if not tables:
        return None
    shown, base = engines(tables[0][1]), peer(tables[0][1])
    groups = [(f"{model}\nbatch {batch}", table, i) for model, table in tables
              for i, batch in enumerate(table.column("batch"))]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(groups)), 3.6), dpi=110)
    width = 0.8 / len(shown)
    for k, engine in enumerate(shown):
        values = [table.column(engine + SPEED)[i] / table.column(base + SPEED)[i] for _, table, i in groups]
        ax.bar([g + (k - (len(shown) - 1) / 2) * width for g in range(len(groups))], values, width, label=engine)
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xticks(range(len(groups)), [label for label, _, _ in groups], fontsize=8)
    ax.set_ylabel(f"tokens/s over {base}'s")
    ax.set_title(f"{data['header'].split(':')[0]} ({data['date']}; {cpu(data['header'])})", fontsize=9)
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, metadata={"Software": None})
    plt.close(fig)
    return out


def cpu(header: str) -> str:
    """The CPU named in a record's conditions line (the part with the vector extensions)."""
    return next((part.strip() for part in header.split(";") if "AVX" in part), "CPU not named")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="records to draw (default: every one with speed tables)")
    names = parser.parse_args().names or sorted(p.stem for p in results.RESULTS.glob("*.json"))
    for name in names:
        if (path := draw(name, CHARTS / f"{name}.png")) is not None:
            print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
