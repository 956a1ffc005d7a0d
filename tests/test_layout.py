"""docs/layout.md is generated from the modules' docstrings (``tools/layout.py``): the page a
contributor reads first names every module there is and no module that is gone."""

from __future__ import annotations

import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))

import layout  # noqa: E402


def test_docs_layout_is_generated_from_the_tree():
    assert layout.PAGE.read_text(encoding="utf-8") == layout.page(), "docs/layout.md is stale: run python tools/layout.py"


def test_every_module_and_tool_is_on_the_page():
    page = layout.page()
    root = layout.ROOT
    for path in [*root.glob("tfspec/**/*.py"), *root.glob("backends/**/*.py"), *root.glob("tools/*.py")]:
        if path.name != "__init__.py" and not layout.is_family(path):
            assert f"`{path.name}`" in page, path
