"""The README's and CONTRIBUTING's links into docs/ resolve, the README stays a first
screen, not a manual, and every page of the site can be reached from the README's list
and from the site's first page.

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
WORK_HISTORY = re.compile(  # issue and PR numbers, rounds of work
    r"\(#\d+\)|\b[Ii]ssues? #?\d+|\bPR #?\d+|\bround \d+\b|\bthis (?:round|session)\b"
)


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


def nav_pages() -> set[str]:
    """The pages in mkdocs.yml's nav, as paths from the repository's root."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config[config.index("\nnav:") :]
    return {f"docs/{page}" for page in re.findall(r":\s*(\S+\.md)\s*$", nav, re.MULTILINE)}


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


@pytest.mark.parametrize("name", ["README.md", "docs/index.md"])
def test_every_page_of_the_site_is_linked(name: str) -> None:
    page = ROOT / name
    linked = {
        str((page.parent / target.partition("#")[0]).resolve().relative_to(ROOT))
        for target in LINK.findall(page.read_text(encoding="utf-8"))
        if "://" not in target
    }
    pages = nav_pages()
    assert len(pages) > 20, "mkdocs.yml's nav not read"
    missing = sorted(pages - linked - {name})
    assert not missing, f"{name} does not link to {missing}"


def test_contributing_names_every_test_folder() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    folders = [p.name for p in (ROOT / "tests").iterdir() if any(p.glob("*.py"))]
    assert len(folders) > 10
    missing = sorted(name for name in folders if f"`tests/{name}/`" not in text)
    assert not missing, f"CONTRIBUTING.md's table of test folders lacks {missing}"


def test_no_page_names_an_issue_or_a_round_of_work() -> None:
    """The docs say what is; how it came to be belongs in git log."""
    pages = [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [
        f"{page.relative_to(ROOT)}: {match.group(0)}"
        for page in pages
        for match in WORK_HISTORY.finditer(page.read_text(encoding="utf-8"))
    ]
    assert not found, found
