"""The many-streams row's pure parts: CPU time from /proc texts, picking the row."""

from __future__ import annotations

import argparse
import os

from benchmarks import cluster_scale

# A command name with a space and a parenthesis: fields are counted from the last ")".
STAT = "4242 (jet lake) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 3 0 100 0 0"


def test_cpu_is_utime_plus_stime_in_seconds() -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    assert cluster_scale.cpu_seconds(STAT) == 300 / ticks


def test_this_process_has_spent_cpu_and_a_gone_one_none() -> None:
    assert cluster_scale.tree_cpu(os.getpid()) > 0
    assert cluster_scale.tree_cpu(2**22 + 1) == 0  # above the kernel's pid_max ceiling


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cluster_scale.add_arguments(parser)
    return parser.parse_args(argv)


def test_the_row_is_opt_in_and_sized_by_streams() -> None:
    assert cluster_scale.choose(["cluster"], _args()) == (["cluster"], [])
    rest, rows = cluster_scale.choose(["cluster-scale", "core"], _args("--streams", "40"))
    assert rest == ["core"] and [w.name for w in rows] == ["cluster-scale"]
    assert rows[0].metrics[0].label == "create 40 R3 streams"
    assert rows[0].ref_measure is not None
