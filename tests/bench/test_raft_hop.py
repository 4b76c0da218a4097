"""The Raft hop benchmark drives a follower and a leader through their sync publishes."""

from __future__ import annotations

from benchmarks.raft_hop import measure


async def test_each_hop_is_timed() -> None:
    figures = await measure(200)  # the benchmark asserts every publish was answered
    for call in ("follower_append_us", "leader_first_answer_us", "leader_second_answer_us"):
        assert figures[call] > 0
