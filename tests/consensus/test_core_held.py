"""Held nodes: a power loss's hold, and the election held nodes have among themselves.

A node that may have lost entries it acknowledged gives no ordinary vote; when a
majority is held at once only they can elect, and the most up-to-date of them wins.
"""

from __future__ import annotations

import pytest

from consensus.types import HardState, MessageType, Role
from tests.consensus.scripts.net import Net

T = MessageType


def lose_tail(net: Net, node: str, keep: int) -> None:
    """What a power loss leaves: the first `keep` entries, the hard state's commit cut."""
    disk = net.disks[node]
    disk.entries = disk.entries[:keep]
    hs = disk.hard_state
    disk.hard_state = HardState(hs.term, hs.vote, min(hs.commit, keep))


def test_a_rebooted_node_is_held_until_it_holds_an_entry_of_a_newer_term() -> None:
    net = Net("abc")
    net.elect("a")
    net.propose("a", b"1", b"2")
    net.stabilize()
    lose_tail(net, "c", 1)
    net.restart("c", reboot_term=1)
    c = net.nodes["c"]
    assert c.held_back and c.status()["held"]
    net.tick("a")
    net.stabilize()
    # The same leader refilled it: no proof, since what it acknowledged last may lie
    # past what the leader resent so far (it cannot know how far it had got).
    assert c.last_index == 3 and c.held_back
    # Without a, neither b (c's grant is a held one) nor c (held) can be elected.
    net.isolate("a")
    with pytest.raises(AssertionError, match="no leader"):
        net.run_until_leader(among="bc", rounds=40)
    held_answers = [m for m in net.sent if m.src + m.dst == "cb" and m.type == T.PRE_VOTE_RESP]
    assert held_answers and all(m.held for m in held_answers)
    net.tick("a", 30)  # check-quorum: a steps down
    assert net.nodes["a"].role == Role.FOLLOWER
    net.heal()
    leader = net.run_until_leader()
    net.stabilize()
    assert net.nodes[leader].term == 2 and not c.held_back  # it holds term 2's no-op
    assert net.items("c") == [b"1", b"2"]


def test_a_majority_held_at_once_elects_the_most_up_to_date_of_them() -> None:
    net = Net("abc")
    net.elect("a")
    net.propose("a", b"1", b"2")
    net.stabilize()
    net.isolate("c")  # the one that did not lose power is away
    lose_tail(net, "b", 2)  # b lost its last entry, a kept all
    net.restart("a", reboot_term=1)
    net.restart("b", reboot_term=1)
    assert net.nodes["a"].held_back and net.nodes["b"].held_back
    leader = net.run_until_leader(among="ab")
    assert leader == "a"  # b's held grant went to a; a refused b's, its log being longer
    assert net.disks["b"].hard_state.vote == "a"  # a held grant is the term's one vote
    net.stabilize()
    assert not net.nodes["a"].held_back and not net.nodes["b"].held_back
    assert net.items("b") == [b"1", b"2"]


def test_an_unheld_candidate_wins_on_held_grants_only_from_a_held_majority() -> None:
    net = Net("abc")
    net.elect("a")
    net.propose("a", b"1")
    net.stabilize()
    net.restart("a", reboot_term=1)
    net.restart("b", reboot_term=1)
    # c alone is whole: the ordinary path cannot reach a majority, the held one can
    # (a and b both held, and c's log is as long as theirs).
    c = net.nodes["c"]
    c.campaign()
    net.process("c")
    net.stabilize()
    assert c.role == Role.LEADER and c.term == 2
    assert all(m.held for m in net.sent if m.type == T.VOTE_RESP and m.dst == "c")


def test_without_pre_vote_a_held_node_does_not_campaign() -> None:
    net = Net("abc", pre_vote=False)
    net.elect("a")
    net.restart("c", reboot_term=1)
    net.isolate("a")
    net.tick("c", 60)
    assert net.nodes["c"].role == Role.FOLLOWER and net.nodes["c"].term == 1
