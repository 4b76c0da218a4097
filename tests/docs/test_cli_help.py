"""`jetlake --help` points at docs pages; they must exist, anchors included."""

from __future__ import annotations

from jobs import cli
from tests.docs.test_readme import ROOT, _anchors


def test_every_page_the_usage_names_exists() -> None:
    for name, (_, _, target) in cli._COMMANDS.items():
        path, _, anchor = target.partition("#")
        page = ROOT / path
        assert page.is_file(), f"jetlake {name}: {target} does not exist"
        assert not anchor or anchor in _anchors(page), f"jetlake {name}: no #{anchor}"
    assert (ROOT / "docs" / "getting-started.md").is_file()
