"""The configuration reference page against the option parsers it documents.

A key added to a parser without a row in ingest/server/reference/, or a
page not regenerated after an edit, fails here rather than drifting unnoticed.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from ingest.server.reference import keys
from ingest.server.reference.entries import FLAGS, TOP_LEVEL, Key
from ingest.server.reference.render import PAGE, render
from ingest.server.reference.sections import SECTIONS
from tests.docs.test_readme import ROOT

# Documented in `permissions` though read by `_subject_permission` through `name.lower()`,
# which the scan of `lowered` comparisons does not follow.
_NOT_SCANNED = {"permissions": {"allow", "deny"}}


def _names(rows: tuple[Key, ...]) -> set[str]:
    return {name for row in rows for name in row.names}


def test_the_page_in_the_repository_is_what_the_tables_render() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/reference/configuration.md is stale: run python -m ingest.server.reference.render"
    )


@pytest.mark.parametrize(
    ("rows", "accepted", "shown"),
    [
        (FLAGS, keys.flag_names, "`-{}`"),
        (TOP_LEVEL, keys.top_level_keys, "`{}`"),
    ],
    ids=["flags", "top-level keys"],
)
def test_every_flag_and_top_level_key_is_on_the_page_and_no_other(
    rows: tuple[Key, ...], accepted: Callable[[], set[str]], shown: str
) -> None:
    page = PAGE.read_text(encoding="utf-8")
    names = accepted()
    assert _names(rows) == names
    missing = sorted(name for name in names if shown.format(name) not in page)
    assert not missing, f"missing from the page: {missing}"


def test_every_section_the_parsers_read_has_a_table() -> None:
    assert set(SECTIONS) == set(keys.SECTION_READERS)


@pytest.mark.parametrize("section", sorted(keys.SECTION_READERS))
def test_every_key_of_a_section_is_on_the_page(section: str) -> None:
    accepted = keys.section_keys(section)
    assert accepted, f"no keys found for {section}: did its reader stop using `lowered`?"
    documented = _names(SECTIONS[section])
    assert accepted - documented == set(), f"{section}: keys missing from the page"
    assert documented - accepted <= _NOT_SCANNED.get(section, set()), (
        f"{section}: the page lists keys the parser does not accept"
    )


def test_every_environment_variable_the_code_reads_is_on_the_configuration_page() -> None:
    code = [
        path
        for package in ("ingest", "log", "sql", "jobs", "consensus", "benchmarks")
        for path in (ROOT / package).rglob("*.py")
    ]
    names = {n for path in code for n in re.findall(r'"(JETLAKE_[A-Z_]+)"', path.read_text())}
    assert len(names) > 5
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    missing = sorted(name for name in names if not re.search(rf"`{name}[`=]", page))
    assert not missing, f"environment variables missing from docs/configuration.md: {missing}"
