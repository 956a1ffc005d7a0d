"""docs/architecture.md is what tools/generators/architecture.py writes from the registries now (issue 54):
a kind, op, family, variant or task added without regenerating it fails here, by name."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "generators"))

import architecture  # noqa: E402


def test_the_architecture_page_is_current():
    assert architecture.PAGE.read_text(encoding="utf-8") == architecture.page(), \
        "docs/architecture.md is stale: python tools/generators/architecture.py"
