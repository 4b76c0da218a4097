"""`RaftCore.idle_ticks`: the ticks a driver may hold back change nothing but counters,
and the one after them acts (a follower's election, a leader's heartbeat or quorum check).
The seeded simulator holds ticks back the same way on every run (`SimNode.catch_up`)."""

from __future__ import annotations

from consensus.types import MessageType, Role
from tests.consensus.scripts.net import Net

T = MessageType


def test_a_follower_is_idle_until_its_election_timeout() -> None:
    net = Net("abc", election_ticks=10)
    a = net.nodes["a"]
    idle = a.idle_ticks()
    assert 9 <= idle < 19  # the timeout is drawn from [10, 20)
    sent = len(net.sent)
    net.tick("a", idle)
    assert a.role == Role.FOLLOWER and len(net.sent) == sent and a.idle_ticks() == 0
    net.tick("a")
    assert a.role == Role.PRE_CANDIDATE


def test_a_heartbeat_restarts_the_idle_count() -> None:
    net = Net("abc", election_ticks=10)
    net.elect("a")
    b = net.nodes["b"]
    net.tick("b", 5)
    before = b.idle_ticks()
    net.heartbeat()
    assert b.idle_ticks() == before + 5


def test_a_leader_with_one_tick_heartbeats_is_never_idle() -> None:
    net = Net("abc", election_ticks=10)
    net.elect("a")
    assert net.nodes["a"].idle_ticks() == 0
    sent = len(net.sent)
    net.tick("a")
    assert {m.type for m in net.sent[sent:]} == {T.HEARTBEAT}


def test_a_leader_is_idle_until_its_next_heartbeat_or_quorum_check() -> None:
    net = Net("abc", election_ticks=10, heartbeat_ticks=4)
    net.elect("a")
    a = net.nodes["a"]
    for _ in range(6):  # across a quorum check: its answers keep it leading
        idle = a.idle_ticks()
        assert idle <= 3
        sent = len(net.sent)
        net.tick("a", idle)
        assert len(net.sent) == sent and a.role == Role.LEADER
        net.tick("a")
        net.stabilize()
        assert a.role == Role.LEADER
    net.isolate("a")
    ticks = 0
    while a.role == Role.LEADER:  # the quorum check still fires, idle ticks or not
        step = a.idle_ticks() + 1
        net.tick("a", step)
        net.drop()
        ticks += step
    assert a.role == Role.FOLLOWER and ticks <= 20  # answers seen in the first period count
