"""The many-streams row's pure parts: CPU time from /proc texts, picking the row."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from benchmarks import scale
from benchmarks.cluster import rows
from benchmarks.cluster import scale as cluster_scale
from benchmarks.model import Params

# A command name with a space and a parenthesis: fields are counted from the last ")".
STAT = "4242 (jet lake) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 3 0 100 0 0"


def test_cpu_is_utime_plus_stime_in_seconds() -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    assert scale.cpu_seconds(STAT) == 300 / ticks


def test_this_process_has_spent_cpu_and_a_gone_one_none() -> None:
    assert scale.tree_cpu(os.getpid()) > 0
    assert scale.tree_cpu(2**22 + 1) == 0  # above the kernel's pid_max ceiling


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cluster_scale.add_arguments(parser)
    return parser.parse_args(argv)


def test_the_row_is_opt_in_and_sized_by_streams() -> None:
    assert cluster_scale.choose(["cluster"], _args()) == (["cluster"], [])
    rest, chosen = cluster_scale.choose(["cluster-scale", "core"], _args("--streams", "40"))
    assert rest == ["core"] and [w.name for w in chosen] == ["cluster-scale"]
    assert chosen[0].metrics[0].label == "create 40 R3 streams"
    assert chosen[0].ref_measure is not None


SOAK_STREAMS = 1_000


async def idle_figures(tmp_path: Path, side: str, streams: int) -> dict[str, float]:
    """The row's figures for one side, on three fresh servers under `tmp_path`."""
    root = tmp_path / side
    root.mkdir()
    params = Params(
        count=0, size=128, requests=0, sync_count=0, window=0, concurrency=0, timeout=60.0,
        store=root,
    )  # fmt: skip
    return await cluster_scale._measure("", params, command=rows.COMMANDS[side], streams=streams)


@pytest.mark.soak
@pytest.mark.timeout(3600)
async def test_a_thousand_idle_r3_streams_cost_less_cpu_than_the_reference(
    tmp_path: Path,
) -> None:
    """1,000 R3 streams on three servers of each kind, created, idle, one server
    restarted: jetlake's idle upkeep per server below the reference's (under half of it
    measured), its memory within half again of it, and the restarted server catches up
    on every stream."""
    ref = await idle_figures(tmp_path, "ref", SOAK_STREAMS)
    jetlake = await idle_figures(tmp_path, "jetlake", SOAK_STREAMS)
    assert jetlake["idle_cpu_pct"] < ref["idle_cpu_pct"], (ref, jetlake)
    assert jetlake["rss_mib"] < 1.5 * ref["rss_mib"], (ref, jetlake)
    assert jetlake["catch_up_s"] > 0  # every stream listed it current with no lag
