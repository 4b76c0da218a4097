"""`jetlake --help` points at docs pages; they must exist, anchors included."""

from __future__ import annotations

import pytest

from jobs import cli
from tests.docs.test_readme import ROOT, _anchors


def test_every_page_the_usage_names_exists() -> None:
    for name, (_, _, target) in cli._COMMANDS.items():
        path, _, anchor = target.partition("#")
        page = ROOT / path
        assert page.is_file(), f"jetlake {name}: {target} does not exist"
        assert not anchor or anchor in _anchors(page), f"jetlake {name}: no #{anchor}"
    assert (ROOT / "docs" / "getting-started.md").is_file()


@pytest.mark.parametrize("name", list(cli._COMMANDS))
def test_each_commands_help_names_its_page_and_fits_a_screen(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([name, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith(
        f"Documentation: {cli._COMMANDS[name][2]} (`make docs` builds the site)"
    )
    assert len(out.splitlines()) <= 60, f"jetlake {name} --help is {len(out.splitlines())} lines"
