"""Documentation that cannot point outside the repository (issue 54): every relative link of
every Markdown file resolves to a file or folder of the checkout, and no file names the
developers' shared notes (``../shared``), which a user's clone does not have."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
OUTSIDE = re.compile(r"\.\./shared/|/work/shared")


def tracked(*patterns: str) -> list[Path]:
    names = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    return [ROOT / name for name in names if (ROOT / name).is_file()]


@pytest.mark.parametrize("page", tracked("*.md"), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_checkout(page):
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):  # a URL or an anchor
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.is_relative_to(ROOT) or not path.exists():
            broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)} links outside the checkout or to nothing: {broken}"


def test_no_file_refers_to_notes_outside_the_repository():
    found = [f"{path.relative_to(ROOT)}:{n}" for path in tracked("*.py", "*.md", "*.mjs", "*.js", "*.toml", "*.yaml")
             for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if OUTSIDE.search(line) and path != Path(__file__)]
    assert found == []
