"""The set checker on hand-made histories: each category caught, each legal outcome accepted."""

from __future__ import annotations

import pytest

from tests.jepsen.checker import Attempt, HistoryError, NodeRead, Outcome, check

A, F, U = Outcome.ACKED, Outcome.FAILED, Outcome.UNKNOWN

HISTORY = (
    Attempt("w0-0", A, 1),
    Attempt("w1-0", A, 2),
    Attempt("w0-1", F),
    Attempt("w1-1", U),
    Attempt("w0-2", U),
    Attempt("w1-2", A, 3),
)
GOOD = ((1, "w0-0"), (2, "w1-0"), (3, "w1-2"), (4, "w1-1"))


def test_every_node_with_every_ack_is_valid() -> None:
    verdict = check(HISTORY, [NodeRead(n, GOOD) for n in ("S0", "S1", "S2")])
    assert verdict.valid, verdict.summary()
    assert (verdict.acked, verdict.failed, verdict.unknown) == (3, 1, 2)
    for node in verdict.nodes:
        assert (node.read, node.ok, node.unknown_present, node.unknown_absent) == (4, 3, 1, 1)
    assert verdict.divergent == ()


def test_a_missing_ack_is_lost_on_that_node_only() -> None:
    short = tuple(m for m in GOOD if m[1] != "w1-0")
    verdict = check(HISTORY, [NodeRead("S0", GOOD), NodeRead("S1", short)])
    assert [n.lost for n in verdict.nodes] == [(), ("w1-0",)]
    assert not verdict.valid
    assert "lost 1 (w1-0)" in verdict.summary()


def test_never_attempted_and_refused_values_are_unexpected() -> None:
    read = (*GOOD, (5, "w9-9"), (6, "w0-1"))
    node = check(HISTORY, [NodeRead("S0", read)]).nodes[0]
    assert node.unexpected == ("w9-9", "w0-1")
    assert not node.valid


def test_a_value_stored_twice_is_duplicated() -> None:
    node = check(HISTORY, [NodeRead("S0", (*GOOD, (5, "w1-1")))]).nodes[0]
    assert node.duplicated == ("w1-1",)
    assert node.lost == () and node.unexpected == ()
    assert not node.valid


def test_an_ack_at_another_sequence_is_misplaced() -> None:
    moved = ((1, "w0-0"), (2, "w1-2"), (3, "w1-0"))
    node = check(HISTORY, [NodeRead("S0", moved)]).nodes[0]
    assert node.misplaced == ("w1-0", "w1-2")
    assert not node.valid


def test_unknown_outcomes_are_legal_either_way() -> None:
    acked_only = ((1, "w0-0"), (2, "w1-0"), (3, "w1-2"))
    everything = (*acked_only, (4, "w1-1"), (5, "w0-2"))
    reads = [NodeRead("S0", acked_only), NodeRead("S1", everything), NodeRead("S2", everything)]
    verdict = check(HISTORY, reads)
    assert [(n.unknown_present, n.unknown_absent) for n in verdict.nodes] == [
        (0, 2),
        (2, 0),
        (2, 0),
    ]
    assert all(n.valid for n in verdict.nodes)
    assert verdict.divergent == ("S0",)  # legal per node, yet the replicas disagree
    assert not verdict.valid


def test_the_odd_replica_out_is_divergent() -> None:
    other = ((1, "w0-0"), (2, "w1-0"), (3, "w1-2"), (4, "w0-2"))
    reads = [NodeRead("S0", GOOD), NodeRead("S1", other), NodeRead("S2", GOOD)]
    assert check(HISTORY, reads).divergent == ("S1",)


def test_a_value_attempted_twice_is_a_workload_bug() -> None:
    with pytest.raises(HistoryError, match="w0-0"):
        check([Attempt("w0-0", A, 1), Attempt("w0-0", U)], [])
