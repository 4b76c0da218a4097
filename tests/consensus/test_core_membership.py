"""Interaction scripts: membership changes, one server at a time."""

from __future__ import annotations

import pytest

from consensus.membership import InvalidChangeError
from consensus.types import (
    ChangeInProgressError,
    ConfChange,
    ConfOp,
    ConfState,
    EntryKind,
    MessageType,
    NotCaughtUpError,
    NotLeaderError,
    Role,
    Snapshot,
    SnapshotMeta,
)
from tests.consensus.scripts.net import Net, of

T = MessageType


def _with_learner() -> Net:
    net = Net("abc")
    net.elect("a")
    net.propose("a", b"1", b"2")
    net.stabilize()
    net.add("d", voters="abc")  # a joiner starts from the group's bootstrap membership
    net.change("a", ConfChange(ConfOp.ADD_LEARNER, "d"))
    net.stabilize()
    return net


def test_learner_is_added_catches_up_and_never_campaigns() -> None:
    net = _with_learner()
    assert net.nodes["a"].conf == ConfState(frozenset("abc"), frozenset("d"))
    net.tick("a")
    net.stabilize()
    d = net.nodes["d"]
    assert net.items("d") == [b"1", b"2"] and d.conf == net.nodes["a"].conf
    net.sent.clear()
    net.tick("d", 100)
    assert d.role == Role.FOLLOWER and not net.sent
    # its vote does not count: a, b lost, c and d cannot elect c
    net.isolate("a")
    net.isolate("b")
    net.cut.discard(frozenset("cd"))
    for _ in range(60):
        net.tick("c")
        net.stabilize()
    assert net.nodes["c"].role != Role.LEADER


def test_promote_is_refused_until_the_learner_caught_up() -> None:
    net = Net("abc")
    net.elect("a")
    net.add("d", voters="abc")
    net.isolate("d")
    net.change("a", ConfChange(ConfOp.ADD_LEARNER, "d"))
    net.stabilize()
    a = net.nodes["a"]
    with pytest.raises(NotCaughtUpError):
        a.propose_conf_change(ConfChange(ConfOp.PROMOTE, "d"))
    net.heal()
    net.tick("a")
    net.stabilize()
    index = net.change("a", ConfChange(ConfOp.PROMOTE, "d"))
    assert a.conf.voters == frozenset("abc")  # not in force until committed
    net.stabilize()
    assert a.commit >= index and a.conf == ConfState(frozenset("abcd"))
    net.tick("a")
    net.stabilize()
    assert all(net.nodes[n].conf == ConfState(frozenset("abcd")) for n in "abcd")
    # four voters: a and b alone are no longer a quorum
    net.isolate("c")
    net.isolate("d")
    net.propose("a", b"x")
    net.stabilize()
    assert a.commit == index
    net.heal()
    net.tick("a")
    net.stabilize()
    assert a.commit == index + 1 and net.items("d") == [b"x"]


def test_second_change_is_refused_while_one_is_in_flight() -> None:
    net = _with_learner()
    net.isolate("b")
    net.isolate("c")
    net.change("a", ConfChange(ConfOp.REMOVE, "d"))
    with pytest.raises(ChangeInProgressError):
        net.nodes["a"].propose_conf_change(ConfChange(ConfOp.ADD_LEARNER, "e"))
    net.heal()
    net.tick("a")
    net.stabilize()
    net.change("a", ConfChange(ConfOp.ADD_LEARNER, "e"))  # the first one committed
    net.stabilize()
    assert net.nodes["a"].conf == ConfState(frozenset("abc"), frozenset("e"))


def test_invalid_changes_are_refused() -> None:
    net = _with_learner()
    a = net.nodes["a"]
    for change in (
        ConfChange(ConfOp.ADD_LEARNER, "b"),
        ConfChange(ConfOp.PROMOTE, "b"),
        ConfChange(ConfOp.REMOVE, "z"),
    ):
        with pytest.raises(InvalidChangeError):
            a.propose_conf_change(change)
    with pytest.raises(NotLeaderError):
        net.nodes["b"].propose_conf_change(ConfChange(ConfOp.REMOVE, "d"))


def test_new_leader_refuses_a_change_before_its_noop_commits() -> None:
    net = Net("abc", check_quorum=False)
    net.elect("a")
    net.isolate("a")
    net.nodes["b"].campaign()
    net.process("b")
    for kind in (T.PRE_VOTE, T.PRE_VOTE_RESP, T.VOTE, T.VOTE_RESP):
        net.deliver(of(kind))
    b = net.nodes["b"]
    assert b.role == Role.LEADER and b.commit < b.last_index
    with pytest.raises(ChangeInProgressError):
        b.propose_conf_change(ConfChange(ConfOp.REMOVE, "a"))
    net.stabilize()
    net.change("b", ConfChange(ConfOp.REMOVE, "a"))
    net.stabilize()
    assert b.conf == ConfState(frozenset("bc"))


def test_remove_a_follower() -> None:
    net = Net("abc")
    net.elect("a")
    net.change("a", ConfChange(ConfOp.REMOVE, "c"))
    net.stabilize()
    a = net.nodes["a"]
    assert a.conf == ConfState(frozenset("ab")) and "c" not in a.status()["peers"]  # type: ignore[operator]
    assert net.nodes["c"].conf == ConfState(frozenset("ab"))  # told once more on removal
    net.sent.clear()
    net.propose("a", b"x")
    net.stabilize()
    assert a.commit == 3 and all(m.dst != "c" for m in net.sent)
    net.tick("c", 100)
    net.stabilize()
    assert not any(m.src == "c" for m in net.sent)  # a removed node never campaigns


def test_a_removed_node_that_committed_past_what_the_leader_knew_still_learns_it() -> None:
    """The leader's farewell starts where it last knew the node to be; the node has
    committed further meanwhile (its answers were lost), and must still take the rest."""
    net = Net("abc")
    net.elect("a")
    net.propose("a", b"x")
    net.deliver(of(T.APPEND))
    net.drop(of(T.APPEND_RESP, src="c"))
    net.deliver(of(T.APPEND_RESP, src="b"))
    index = net.change("a", ConfChange(ConfOp.REMOVE, "c"))
    net.deliver(of(T.APPEND))  # c commits x with the removal's entry, and answers
    net.drop(of(T.APPEND_RESP, src="c"))
    c = net.nodes["c"]
    assert c.commit == index - 1 and c.conf.voters == frozenset("abc")
    net.deliver(of(T.APPEND_RESP, src="b"))  # the removal commits; c hears once more
    farewell = net.take(of(T.APPEND, dst="c"))
    assert len(farewell) == 1 and farewell[0].index < c.commit
    net.step(farewell[0])
    assert c.commit == index and c.conf == ConfState(frozenset("ab"))


def test_remove_the_leader() -> None:
    net = Net("abc")
    net.elect("a")
    net.propose("a", b"1")
    net.stabilize()
    index = net.change("a", ConfChange(ConfOp.REMOVE, "a"))
    net.deliver(of(T.APPEND))
    net.deliver(of(T.APPEND_RESP, src="b"))  # the removal commits on a and b
    a = net.nodes["a"]
    assert a.commit == index and a.role == Role.FOLLOWER and a.conf.voters == frozenset("bc")
    assert any(m.type == T.APPEND and m.commit == index for m in net.queue)  # told the rest
    net.stabilize()
    assert net.nodes["b"].conf.voters == frozenset("bc")
    leader = net.run_until_leader(among="bc")
    net.propose(leader, b"2")
    net.stabilize()
    assert net.items("b") == net.items("c") == [b"1", b"2"]
    assert net.nodes["a"].role == Role.FOLLOWER


def test_membership_survives_restart_and_snapshot() -> None:
    net = _with_learner()
    net.change("a", ConfChange(ConfOp.PROMOTE, "d"))
    net.stabilize()
    net.tick("a")
    net.stabilize()
    net.restart("b")
    assert net.nodes["b"].conf == ConfState(frozenset("abcd"))  # replayed from its log
    a = net.nodes["a"]
    entries = net.disks["a"].entries
    assert [e.kind for e in entries if e.kind == EntryKind.CONFIG] == [EntryKind.CONFIG] * 2
    a.compact(Snapshot(SnapshotMeta(a.applied, 0, ConfState(frozenset())), b""))
    assert a.status()["snapshot_index"] == a.applied
    net.disks["a"].snapshot = SnapshotMeta(a.applied, a.term, a.conf)
    net.disks["a"].entries = []
    net.restart("a")
    assert net.nodes["a"].conf == ConfState(frozenset("abcd"))
