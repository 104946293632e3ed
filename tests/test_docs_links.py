"""The README is a guide to pages that exist: every relative link in it and in docs/ resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = [target for target in LINK.findall(page.read_text()) if "://" not in target and not (page.parent / target).exists()]
    assert not broken, f"{page.relative_to(ROOT)} links to missing files: {broken}"


def test_the_readme_stays_a_guide():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250, "run reports go under docs/results/, not in the README"
