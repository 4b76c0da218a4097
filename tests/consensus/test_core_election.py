"""Interaction scripts: elections, replication, leases, restarts (see scripts/net.py)."""

from __future__ import annotations

from consensus.core import RaftCore
from consensus.types import EntryKind, HardState, MessageType, Role
from tests.consensus.scripts.net import Net, of

T = MessageType


def test_election_and_replication() -> None:
    net = Net("abc")
    net.nodes["a"].campaign()
    net.process("a")
    # pre-vote first: no term bump until a quorum says it could win
    assert net.nodes["a"].role == Role.PRE_CANDIDATE and net.nodes["a"].term == 0
    assert {m.dst for m in net.queue if m.type == T.PRE_VOTE} == {"b", "c"}
    net.deliver()  # pre-votes reach b and c
    net.deliver()  # their grants come back: a campaigns for real
    assert net.nodes["a"].role == Role.CANDIDATE and net.nodes["a"].term == 1
    assert net.disks["a"].hard_state == HardState(term=1, vote="a", commit=0)
    net.deliver()  # votes
    assert net.disks["b"].hard_state.vote == "a"  # persisted before the grant left
    net.deliver()  # grants
    a = net.nodes["a"]
    assert a.role == Role.LEADER and a.leader == "a"
    assert net.disks["a"].entries[-1].kind == EntryKind.NOOP
    net.stabilize()
    assert all(n.commit == 1 and n.leader == "a" for n in net.nodes.values())

    index = net.propose("a", b"x", b"y")
    assert index == 3 and a.commit == 1  # nothing commits before a follower has it
    net.deliver(of(T.APPEND))
    assert a.commit == 1 and [e.data for e in net.disks["b"].entries[1:]] == [b"x", b"y"]
    net.deliver(of(T.APPEND_RESP, src="b"))
    assert a.commit == 3 and net.items("a") == [b"x", b"y"]  # a and b are a quorum
    net.stabilize()
    assert all(net.items(n) == [b"x", b"y"] for n in "abc")
    assert all(net.nodes[n].commit == 3 for n in "abc")


def test_single_node_commits_alone() -> None:
    net = Net("a")
    net.elect("a")
    net.propose("a", b"1")
    assert net.nodes["a"].commit == 2 and net.items("a") == [b"1"]


def test_election_timeout_is_randomized_and_starts_a_pre_vote() -> None:
    net = Net("abc", election_ticks=10)
    ticks = 0
    while net.nodes["a"].role == Role.FOLLOWER:
        net.tick("a")
        ticks += 1
    assert 10 <= ticks < 20
    net.stabilize()
    assert net.leader() == "a"


def test_prevote_partitioned_node_rejoins_without_disrupting() -> None:
    net = Net("abc")
    net.elect("a")
    net.isolate("c")
    net.tick("c", 100)  # it campaigns over and over
    c = net.nodes["c"]
    assert c.role == Role.PRE_CANDIDATE and c.term == 1  # pre-votes never bumped the term
    net.propose("a", b"while-away")
    net.stabilize()
    net.heal()
    net.tick("c", 40)  # pre-votes reach a and b, who hear from a leader: ignored
    net.stabilize()
    assert net.nodes["a"].role == Role.LEADER and net.nodes["a"].term == 1
    net.tick("a")  # heartbeat
    net.stabilize()
    assert c.role == Role.FOLLOWER and c.leader == "a" and c.term == 1
    assert net.items("c") == [b"while-away"]


def test_without_prevote_a_rejoining_node_disrupts_the_leader() -> None:
    net = Net("abc", pre_vote=False, check_quorum=False)
    net.elect("a")
    net.isolate("c")
    net.tick("c", 100)
    assert net.nodes["c"].term > 3  # every timeout bumped its term
    net.heal()
    net.tick("c", 40)
    net.stabilize()
    term = net.nodes["c"].term
    assert net.nodes["a"].term == term > 3  # the old leader was deposed into c's term
    assert any(m.type == T.VOTE_RESP and m.src == "a" and m.term == term for m in net.sent)


def test_check_quorum_steps_down_an_isolated_leader() -> None:
    net = Net("abc", election_ticks=10)
    net.elect("a")
    net.isolate("a")
    net.tick("a", 10)
    a = net.nodes["a"]
    assert a.role == Role.LEADER  # b and c answered within the first period
    net.tick("a", 10)
    assert a.role == Role.FOLLOWER and a.leader is None and a.term == 1


def test_check_quorum_keeps_a_leader_that_hears_from_a_quorum() -> None:
    net = Net("abc", election_ticks=10)
    net.elect("a")
    net.isolate("c")
    for _ in range(50):
        net.tick("a")
        net.stabilize()
    assert net.nodes["a"].role == Role.LEADER


def _vote_in_lease() -> int:
    """c campaigns (no pre-vote) while b still hears from leader a: b's term after."""
    net = Net("abc", pre_vote=False)
    net.elect("a")
    net.nodes["c"].campaign()
    net.process("c")
    assert net.nodes["c"].term == 2
    net.deliver(of(T.VOTE))
    return net.nodes["b"].term


def test_lease_ignores_votes_while_leader_is_heard() -> None:
    assert _vote_in_lease() == 1  # b is in a's lease: the vote is ignored


def test_lease_script_catches_a_broken_lease(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(RaftCore, "_in_lease", lambda self: False)
    assert _vote_in_lease() == 2


def test_vote_floor_blocks_voting_and_campaigning_until_caught_up() -> None:
    net = Net("abc")
    net.elect("a")
    net.propose("a", b"1", b"2")
    net.stabilize()
    # c's recovery cut entries it may have acknowledged: floor at 3 (it now holds 1)
    disk = net.disks["c"]
    disk.entries = disk.entries[:1]
    disk.hard_state = HardState(disk.hard_state.term, disk.hard_state.vote, 1)
    net.restart("c", vote_floor=3)
    c = net.nodes["c"]
    c.campaign()
    net.process("c")
    # below the floor only a held pre-vote, which only other held nodes could grant
    assert {(m.type, m.held) for m in net.queue} == {(T.PRE_VOTE, True)}
    net.stabilize()
    net.tick("c", 50)
    net.stabilize()
    assert c.role != Role.LEADER and c.term == 1 and net.nodes["a"].role == Role.LEADER
    # a vote request reaching c gets only a held answer while it is below the floor
    net.isolate("a")
    net.tick("b", 60)
    net.stabilize()
    answers = [m for m in net.sent if m.type == T.PRE_VOTE_RESP and m.src + m.dst == "cb"]
    assert answers and all(m.held for m in answers)
    assert net.nodes["b"].role != Role.LEADER  # c could not help b win
    # once a leader refills c past the floor, c votes and campaigns again
    net.heal()
    net.tick("a")
    net.stabilize()
    assert c.last_index >= 3
    net.isolate("a")
    leader = net.run_until_leader(among="bc")
    assert net.nodes[leader].term == 2


def test_a_lone_voter_is_never_held_back_by_its_own_recovery() -> None:
    net = Net("a")
    net.elect("a")
    net.propose("a", b"1")
    net.stabilize()
    net.restart("a", vote_floor=9)
    assert net.run_until_leader(among="a") == "a"


def test_restart_rebuilds_term_vote_log_and_commit() -> None:
    net = Net("abc")
    net.elect("a")
    net.propose("a", b"1", b"2")
    net.stabilize()
    net.tick("a")
    net.stabilize()
    before = net.nodes["b"].status()
    net.restart("b")
    b = net.nodes["b"]
    assert (b.term, b.commit, b.last_index) == (
        before["term"],
        before["commit"],
        before["last_index"],
    )
    assert b.status()["vote"] == "a"
    assert net.items("b") == [b"1", b"2"]  # re-applied from the log after the snapshot
    assert not b.has_ready()  # nothing new to persist or send
    net.restart("a")
    a = net.nodes["a"]
    assert a.role == Role.FOLLOWER and a.term == 1
    leader = net.run_until_leader()
    net.propose(leader, b"3")
    assert net.nodes[leader].term >= 2
    net.stabilize()
    assert all(net.items(n) == [b"1", b"2", b"3"] for n in "abc")


def test_term_and_vote_changes_ask_for_sync() -> None:
    net = Net("abc")
    net.elect("a")
    syncs = {n: net.disks[n].syncs for n in "abc"}
    net.propose("a", b"1")
    net.stabilize()
    assert {n: net.disks[n].syncs for n in "abc"} == syncs  # no term/vote change
    assert syncs["b"] >= 1 and syncs["a"] >= 1
