"""The README's and CONTRIBUTING's links into docs/ resolve, and the README stays a first
screen, not a manual.

mkdocs checks links between the docs' own pages; these files are outside the site, so
their links are checked here, anchors included.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 250  # what a newcomer reads before the docs; the rest belongs in docs/

LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.MULTILINE)
EXPLICIT_ID = re.compile(r"\{#([\w-]+)\}\s*$")


def _slug(title: str) -> str:
    """Python-Markdown's toc slug, which the docs site's anchors use."""
    text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    found = set()
    for title in HEADING.findall(page.read_text(encoding="utf-8")):
        explicit = EXPLICIT_ID.search(title)
        found.add(explicit.group(1) if explicit else _slug(title.replace("`", "")))
    return found


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


@pytest.mark.parametrize("name", ["README.md", "CONTRIBUTING.md"])
def test_every_relative_link_resolves(name: str) -> None:
    broken = []
    for target in LINK.findall((ROOT / name).read_text(encoding="utf-8")):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        page = (ROOT / path).resolve()
        missing_anchor = bool(anchor) and page.suffix == ".md" and page.exists()
        if not page.exists() or (missing_anchor and anchor not in _anchors(page)):
            broken.append(target)
    assert not broken, f"broken links in {name}: {broken}"
