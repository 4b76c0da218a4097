"""`jetlake --help` and the `--help` of every command fit a screen and end with the docs
page that explains the command; every page a help names exists, anchor included, and is
in the site's navigation (a page outside it builds, but no reader finds it)."""

from __future__ import annotations

import re

import pytest

from ingest.server import flags
from ingest.server.main import USAGE
from jobs import cli
from tests.docs.test_readme import ROOT, _anchors, nav_pages

SCREEN = 50  # lines: what a terminal shows without scrolling back
COMMANDS = ["", *cli.help_pages()]  # "": `jetlake --help` itself
NAMED_PAGE = re.compile(r"\bdocs/[\w/.-]+\.md(?:#[\w-]+)?")
MENTIONED_HELP = re.compile(r"jetlake ((?:[a-z]+ )+)--help")  # `jetlake sql serve --help`


def _help(command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps to the terminal's width
    assert cli.main([*command.split(), "--help"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c or "jetlake")
def test_each_help_fits_a_screen_and_names_pages_in_the_site(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _help(command, capsys, monkeypatch)
    lines = out.rstrip().splitlines()
    assert len(lines) <= SCREEN, f"jetlake {command} --help is {len(lines)} lines"
    if command:
        page = cli.help_pages()[command]
        assert lines[-1] == f"Documentation: {page} (`make docs` builds the site)"
    named = NAMED_PAGE.findall(out)
    assert named, f"jetlake {command} --help names no docs page"
    nav = nav_pages()
    for target in named:
        path, _, anchor = target.partition("#")
        assert (ROOT / path).is_file(), f"jetlake {command} --help: {path} does not exist"
        assert path in nav, f"jetlake {command} --help: {path} is not in mkdocs.yml's nav"
        assert not anchor or anchor in _anchors(ROOT / path), f"{path} has no #{anchor}"


def test_every_command_a_help_points_at_is_walked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subcommand with options of its own (as `sql serve`) is found through the help
    that sends readers to it, so a new one cannot go without a page of its own."""
    mentioned: set[str] = set()
    for command in COMMANDS:
        out = _help(command, capsys, monkeypatch)
        mentioned |= {words.strip() for words in MENTIONED_HELP.findall(out)}
    assert mentioned, "no help points at another command's --help"
    assert mentioned <= set(cli.help_pages()), sorted(mentioned - set(cli.help_pages()))


def test_serves_help_lists_every_flag_the_parser_takes() -> None:
    missing = [
        name
        for name in flags._FLAG_SPECS
        if not re.search(rf"(?<![\w-])--?{re.escape(name)}(?![\w-])", USAGE)
    ]
    assert not missing, f"jetlake serve --help does not list {missing}"


def test_getting_started_lists_every_command() -> None:
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    missing = [name for name in cli.help_pages() if f"| `jetlake {name}" not in page]
    assert not missing, f"docs/getting-started.md's command table lacks {missing}"
