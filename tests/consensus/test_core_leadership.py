"""Interaction scripts: leader transfer and linearizable reads (ReadIndex)."""

from __future__ import annotations

import pytest

from consensus.types import (
    ChangeInProgressError,
    ConfChange,
    ConfOp,
    MessageType,
    NotLeaderError,
    ReadState,
    Role,
)
from tests.consensus.scripts.net import Net, of

T = MessageType


def test_transfer_to_a_chosen_peer() -> None:
    net = Net("abc")
    net.elect("a")
    net.propose("a", b"1")
    net.stabilize()
    net.nodes["a"].transfer_leadership("c")
    net.process("a")
    assert [m.dst for m in net.queue if m.type == T.TIMEOUT_NOW] == ["c"]  # c is caught up
    net.stabilize()
    c = net.nodes["c"]
    assert c.role == Role.LEADER and c.term == 2 and net.nodes["a"].leader == "c"
    net.propose("c", b"2")
    net.stabilize()
    assert all(net.items(n) == [b"1", b"2"] for n in "abc")


def test_transfer_to_the_most_caught_up_voter_waits_for_it() -> None:
    net = Net("abc")
    net.elect("a")
    net.propose("a", b"1")
    net.deliver(of(T.APPEND, dst="b"))  # only b has entry 2
    net.drop(of(T.APPEND))
    net.deliver()
    net.propose("a", b"2")
    net.drop(of(T.APPEND, dst="c"))  # neither is fully caught up (b lacks 3)
    a = net.nodes["a"]
    a.transfer_leadership()
    net.process("a")
    assert a.status()["transferee"] == "b"
    assert not any(m.type == T.TIMEOUT_NOW for m in net.queue)  # b must catch up first
    with pytest.raises(NotLeaderError):
        a.propose([b"refused"])
    with pytest.raises(ChangeInProgressError):
        a.propose_conf_change(ConfChange(ConfOp.ADD_LEARNER, "d"))
    net.deliver(of(T.APPEND, dst="b"))
    net.deliver(of(T.APPEND_RESP, src="b"))  # b now matches: TIMEOUT_NOW follows
    assert [m.dst for m in net.queue if m.type == T.TIMEOUT_NOW] == ["b"]
    net.stabilize()
    assert net.leader() == "b" and net.nodes["b"].term == 2


def test_transfer_aborts_after_an_election_timeout() -> None:
    net = Net("abc", election_ticks=10)
    net.elect("a")
    net.isolate("c")
    net.propose("a", b"1")
    net.stabilize()
    a = net.nodes["a"]
    a.transfer_leadership("c")  # c is cut off: it never catches up
    with pytest.raises(NotLeaderError):
        a.propose([b"x"])
    for _ in range(9):
        net.tick("a")
        net.stabilize()
    assert a.status()["transferee"] == "c"
    net.tick("a")
    assert a.status()["transferee"] is None and a.role == Role.LEADER
    assert net.propose("a", b"2") == 3


def test_transfer_bypasses_the_lease_but_a_plain_vote_does_not() -> None:
    net = Net("abc", pre_vote=False)
    net.elect("a")
    with pytest.raises(NotLeaderError) as err:
        net.nodes["b"].transfer_leadership("c")
    assert err.value.leader == "a"
    net.nodes["a"].transfer_leadership("b")
    net.process("a")
    net.stabilize()
    assert net.leader() == "b"  # c granted a VOTE inside a's lease: it was a transfer


def test_read_index_on_the_leader_needs_a_heartbeat_quorum() -> None:
    net = Net("abc")
    net.elect("a")
    net.propose("a", b"1")
    net.stabilize()
    a = net.nodes["a"]
    a.read_index(b"r1")
    net.process("a")
    assert net.reads["a"] == []
    hbs = [m for m in net.queue if m.type == T.HEARTBEAT]
    assert {m.dst for m in hbs} == {"b", "c"} and all(m.context == b"r1" for m in hbs)
    net.deliver(of(T.HEARTBEAT, dst="b"))
    net.drop(of(T.HEARTBEAT))
    net.deliver(of(T.HEARTBEAT_RESP))
    assert net.reads["a"] == [ReadState(2, b"r1")]


def test_read_index_waits_for_an_entry_of_the_leaders_term() -> None:
    net = Net("abc", check_quorum=False)  # no lease: b can win at once
    net.elect("a")
    net.stabilize()
    net.isolate("a")
    net.nodes["b"].campaign()
    net.process("b")
    net.deliver(of(T.PRE_VOTE))
    net.deliver(of(T.PRE_VOTE_RESP))
    net.deliver(of(T.VOTE))
    net.deliver(of(T.VOTE_RESP))
    b = net.nodes["b"]
    assert b.role == Role.LEADER and b.commit == 1  # its no-op (2) is not committed yet
    b.read_index(b"early")
    net.process("b")
    assert not any(m.context == b"early" for m in net.queue)  # delayed, not served at 1
    net.stabilize()  # the no-op commits; the read round runs
    assert net.reads["b"] == [ReadState(2, b"early")]


def test_read_index_forwarded_from_a_follower() -> None:
    net = Net("abc")
    net.elect("a")
    net.propose("a", b"1")
    net.stabilize()
    c = net.nodes["c"]
    c.read_index(b"rc")
    net.process("c")
    assert [(m.type, m.dst) for m in net.queue] == [(T.READ_INDEX, "a")]
    net.stabilize()
    assert net.reads["c"] == [ReadState(2, b"rc")] and net.reads["a"] == []


def test_read_index_without_a_known_leader_is_refused() -> None:
    net = Net("abc")
    with pytest.raises(NotLeaderError):
        net.nodes["a"].read_index(b"r")


def test_read_index_on_a_single_node_is_immediate() -> None:
    net = Net("a")
    net.elect("a")
    net.nodes["a"].read_index(b"r")
    net.process("a")
    assert net.reads["a"] == [ReadState(1, b"r")]


def test_reads_confirmed_by_a_later_round_are_served_in_order() -> None:
    net = Net("abc")
    net.elect("a")
    net.stabilize()
    a = net.nodes["a"]
    a.read_index(b"r1")
    net.process("a")
    net.drop()  # r1's heartbeats are lost
    a.read_index(b"r2")
    net.process("a")
    net.stabilize()
    assert net.reads["a"] == [ReadState(1, b"r1"), ReadState(1, b"r2")]


def test_pending_reads_are_dropped_when_leadership_is_lost() -> None:
    net = Net("abc", election_ticks=5)
    net.elect("a")
    net.stabilize()
    net.isolate("a")
    net.nodes["a"].read_index(b"lost")
    net.process("a")
    net.tick("a", 10)  # check-quorum steps it down
    assert net.nodes["a"].role == Role.FOLLOWER
    net.heal()
    net.tick("a", 1)
    net.stabilize()
    assert net.reads["a"] == []
