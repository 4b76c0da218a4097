"""The architecture page's table of packages names every package, so a contributor
looking for where something lives finds each folder there (a new one must be added)."""

from __future__ import annotations

from tests.docs.test_readme import ROOT

PAGE = ROOT / "docs" / "architecture.md"
TOP = ("benchmarks", "consensus", "ingest", "jobs", "log", "sql")  # pyproject's packages


def test_every_package_is_on_the_architecture_page() -> None:
    text = PAGE.read_text(encoding="utf-8")
    packages = {
        init.parent.relative_to(ROOT)
        for top in TOP
        for init in (ROOT / top).rglob("__init__.py")
        if init.parent != ROOT / "ingest"  # a namespace for ingest/parser and ingest/server
    }
    assert len(packages) > 10
    missing = sorted(
        str(package)
        for package in packages
        if f"`{package}/`" not in text and f"`{package.name}/`" not in text
    )
    assert not missing, f"packages missing from docs/architecture.md: {missing}"
