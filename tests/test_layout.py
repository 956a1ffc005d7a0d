"""docs/layout.md is generated from the modules' docstrings (``tools/generators/layout.py``): the page a
contributor reads first names every module there is and no module that is gone."""

from __future__ import annotations

import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1] / "tools" / "generators"
sys.path.insert(0, str(TOOLS))

import layout  # noqa: E402
import tools_index  # noqa: E402


def test_docs_layout_is_generated_from_the_tree():
    assert layout.PAGE.read_text(encoding="utf-8") == layout.page(), "docs/layout.md is stale: run python tools/generators/layout.py"


def test_the_tools_index_is_generated_from_the_tools():
    assert tools_index.PAGE.read_text(encoding="utf-8") == tools_index.page(), \
        "tools/README.md is stale: run python tools/generators/tools_index.py"


def test_benchmarks_md_shows_the_saved_results():
    """Every marked table of BENCHMARKS.md is its record in tools/results/ as the tool printed it,
    and every record is shown somewhere (a result nobody reads is a stale one)."""
    import benchmarks

    text = benchmarks.PAGE.read_text(encoding="utf-8")
    assert text == benchmarks.page(text), "BENCHMARKS.md is stale: run python tools/generators/benchmarks.py"
    saved = {p.stem for p in (tools_index.ROOT / "tools" / "results").glob("*.json")}
    assert saved == set(benchmarks.names(text))


def test_every_record_with_speed_tables_has_its_chart_linked():
    import charts

    text = (tools_index.ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    for path in sorted(charts.results.RESULTS.glob("*.json")):
        if charts.speed_tables(charts.results.load(path.stem)):
            assert (charts.CHARTS / f"{path.stem}.png").is_file(), f"run python tools/generators/charts.py {path.stem}"
            assert f"(docs/charts/{path.stem}.png)" in text, path.stem


def test_every_benchmark_feeds_a_section_of_benchmarks_md():
    """A benchmark BENCHMARKS.md never names (its command, or the before/after tool its opening
    points to) is a retired experiment: delete it, or publish what it measures."""
    text = tools_index.BENCHMARKS.read_text(encoding="utf-8")
    for path in sorted((tools_index.ROOT / "tools" / "bench").glob("bench_*.py")):
        assert path.relative_to(tools_index.ROOT).as_posix() in text, path


def test_every_module_and_tool_is_on_the_page():
    page = layout.page()
    root = layout.ROOT
    for path in [*root.glob("tfspec/**/*.py"), *root.glob("backends/**/*.py"), *root.glob("tools/*/*.py")]:
        if path.name != "__init__.py" and not layout.is_family(path):
            assert f"`{path.name}`" in page, path
