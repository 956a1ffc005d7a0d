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
