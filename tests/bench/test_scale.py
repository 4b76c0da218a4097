"""The scale rows' pure helpers: reading RSS and child pids from /proc texts, picking rows."""

from __future__ import annotations

import argparse
import os

import pytest

from benchmarks import scale

STATUS = """Name:\tnats-server
VmPeak:\t  1234 kB
VmRSS:\t   20480 kB
RssAnon:\t  10000 kB
"""


def test_rss_is_vmrss_in_bytes() -> None:
    assert scale.rss_bytes(STATUS) == 20480 * 1024


def test_a_zombie_has_no_rss() -> None:
    assert scale.rss_bytes("Name:\tjetlake\nState:\tZ (zombie)\n") == 0


def test_an_unknown_unit_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="'MB'"):
        scale.rss_bytes("VmRSS:\t 12 MB\n")


def test_children_parse_space_separated_pids() -> None:
    assert scale.child_pids("12 345 \n") == [12, 345]
    assert scale.child_pids("") == []


def test_tree_rss_counts_at_least_this_process() -> None:
    assert scale.tree_rss(os.getpid()) > 0


def test_tree_rss_of_a_gone_process_is_zero() -> None:
    assert scale.tree_rss(2**22 + 1) == 0  # above the kernel's pid_max ceiling


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    scale.add_arguments(parser)
    return parser.parse_args(argv)


def test_scale_picks_every_row_and_leaves_other_names() -> None:
    rest, rows = scale.choose(["core", "scale"], _args())
    assert rest == ["core"]
    assert [w.name for w in rows] == [
        "scale-subjects",
        "scale-conns",
        "scale-streams",
        "scale-history",
    ]


def test_rows_are_opt_in_and_pickable_by_name() -> None:
    assert scale.choose([], _args()) == ([], [])
    rest, rows = scale.choose(["scale-conns"], _args("--scale-conns", "7"))
    assert rest == [] and [w.name for w in rows] == ["scale-conns"]
    assert "7 idle conns" in rows[0].metrics[0].label
