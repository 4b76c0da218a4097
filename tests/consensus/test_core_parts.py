"""The core's parts on their own: the offset log, replication progress, read queue."""

from __future__ import annotations

import pytest

from consensus.membership import Membership, decode_change
from consensus.progress import Progress, ReplicaState
from consensus.raft_log import RaftLog
from consensus.read_index import PendingRead, ReadQueue
from consensus.types import ConfChange, ConfOp, ConfState, Entry, RaftError


def _log(terms: list[int], snap: tuple[int, int] = (0, 0)) -> RaftLog:
    index, term = snap
    return RaftLog(index, term, [Entry(t, index + 1 + i) for i, t in enumerate(terms)])


def test_term_lookups_around_the_snapshot_point() -> None:
    log = _log([2, 2, 3], snap=(10, 2))
    assert (log.last_index, log.last_term) == (13, 3)
    assert [log.term_at(i) for i in (9, 10, 11, 13, 14)] == [None, 2, 2, 3, None]
    assert [e.index for e in log.slice(0, 100)] == [11, 12, 13]
    assert [e.index for e in log.slice(12, 13)] == [12]


def test_restored_entries_must_be_contiguous() -> None:
    with pytest.raises(RaftError, match="not contiguous"):
        RaftLog(0, 0, [Entry(1, 1), Entry(1, 3)])


def test_term_boundaries_by_bisection() -> None:
    log = _log([1, 1, 2, 2, 2, 5, 5])
    assert log.first_index_of_term(5) == 3
    assert log.first_index_of_term(7) == 6
    assert log.last_index_of_term(2, at_most=100) == 5
    assert log.last_index_of_term(2, at_most=4) == 4
    assert log.last_index_of_term(3, at_most=100) is None
    assert _log([4], snap=(9, 3)).last_index_of_term(3, at_most=20) == 9


def test_merge_skips_held_entries_and_cuts_at_the_first_conflict() -> None:
    log = _log([1, 1, 1, 1])
    log.unstable_from = 5  # all persisted
    assert log.merge([Entry(1, 2), Entry(1, 3)], commit=1) == 5
    assert log.last_index == 4 and log.unstable_from == 5  # nothing rewritten
    assert log.merge([Entry(1, 3), Entry(2, 4), Entry(2, 5)], commit=1) == 4
    assert [e.term for e in log.slice(1, 10)] == [1, 1, 1, 2, 2]
    assert [e.index for e in log.unstable()] == [4, 5]
    assert log.merge([Entry(2, 6)], commit=1) == 6
    assert log.merge([Entry(3, 2)], commit=2) is None  # would rewrite a committed entry
    assert log.last_index == 6


def test_stable_to_ignores_a_rewritten_suffix() -> None:
    log = _log([1, 1])
    log.stable_to(2, 1)
    assert log.unstable() == []
    log.merge([Entry(2, 2)], commit=1)
    log.stable_to(2, 1)  # the Ready that held (2, term 1) is no longer the log
    assert [e.term for e in log.unstable()] == [2]


def test_compact_and_restore() -> None:
    log = _log([1, 1, 2, 2])
    log.compact(3)
    assert (log.snap_index, log.snap_term, log.last_index) == (3, 2, 4)
    log.compact(2)  # older: nothing
    assert log.snap_index == 3
    log.restore(9, 4)
    assert (log.last_index, log.last_term, log.unstable()) == (9, 4, [])


def test_progress_probe_then_replicate_with_a_window() -> None:
    pr = Progress(match=0, next=5)
    assert not pr.paused(2)
    pr.sent(5, 1)
    assert pr.paused(2)  # PROBE: one at a time
    assert pr.acknowledge(5) and not pr.paused(2)
    pr.become_replicate()
    pr.sent(6, 1)
    pr.sent(8, 2)
    assert pr.paused(2) and pr.next == 9
    pr.acknowledge(6)
    assert not pr.paused(2) and list(pr.inflight) == [8]


def test_progress_back_off_ignores_stale_refusals() -> None:
    pr = Progress(match=3, next=10, state=ReplicaState.REPLICATE)
    assert not pr.back_off(rejected=3, guess=1)  # at or below match: stale
    assert pr.back_off(rejected=9, guess=1)
    assert pr.state == ReplicaState.PROBE and pr.next == 4  # never below match + 1
    assert not pr.back_off(rejected=7, guess=5)  # not the probe in flight
    pr.next = 8
    assert pr.back_off(rejected=7, guess=5) and pr.next == 5


def test_read_queue_later_confirmation_covers_earlier_reads() -> None:
    queue = ReadQueue()
    for ctx, index in ((b"1", 4), (b"2", 5), (b"3", 6)):
        queue.add(PendingRead(ctx, index, "a", {"a"}))

    def quorum(acks: set[str]) -> bool:
        return len(acks) >= 2

    assert queue.acknowledge(b"unknown", "b", quorum) == []
    assert [r.context for r in queue.acknowledge(b"2", "b", quorum)] == [b"1", b"2"]
    assert queue.latest_context() == b"3"


def test_membership_history_answers_conf_at_an_index() -> None:
    members = Membership(ConfState(frozenset("ab")))
    assert members.apply(5, ConfChange(ConfOp.ADD_LEARNER, "c"))
    assert members.apply(6, ConfChange(ConfOp.ADD_LEARNER, "c")) is None  # already a member
    assert members.apply(8, ConfChange(ConfOp.PROMOTE, "c"))
    assert members.conf_at(4) == ConfState(frozenset("ab"))
    assert members.conf_at(7) == ConfState(frozenset("ab"), frozenset("c"))
    members.compact(7)
    assert members.conf_at(7) == ConfState(frozenset("ab"), frozenset("c"))
    assert members.conf == ConfState(frozenset("abc"))
    assert decode_change(b"") is None and decode_change(b"\x09x") is None
    assert decode_change(b"\xff\xfe") is None
