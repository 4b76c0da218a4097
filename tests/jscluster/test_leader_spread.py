"""Placement spreads the first peer (the one that stands first and leads) over servers
that tie on load, even when one has more storage free: R3 streams on three servers
otherwise all led by one server, which then carries every group's heartbeats."""

from __future__ import annotations

from collections import Counter

from ingest.server.jetstream.cluster.placement import choose_peers


def test_first_peers_spread_over_equal_servers_whatever_their_room() -> None:
    servers = {"N0", "N1", "N2"}
    room = {"N0": 10_000, "N1": 10_001, "N2": 9_999}
    firsts = Counter(
        choose_peers(f"S{i}", 3, servers, {}, cluster="C", online=servers, available=room)[0]
        for i in range(300)
    )
    assert set(firsts) == servers and min(firsts.values()) > 60


def test_the_chosen_set_is_still_the_least_loaded() -> None:
    load = {"A": 5, "B": 0, "C": 1, "D": 0}
    for i in range(20):
        assert set(choose_peers(f"S{i}", 3, set(load), load, cluster="C")) == {"B", "C", "D"}
