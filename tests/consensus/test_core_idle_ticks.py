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


def heartbeat_ticks(net: Net, node: str, rounds: int) -> list[int]:
    """The ticks, counted from now, at which `node` sent heartbeats (answers delivered)."""
    sent_at = []
    for tick in range(1, rounds + 1):
        sent = len(net.sent)
        net.tick(node)
        if any(m.type == T.HEARTBEAT for m in net.sent[sent:]):
            sent_at.append(tick)
        net.stabilize()
    return sent_at


def test_an_idle_leader_heartbeats_quietly_and_a_proposal_ends_it() -> None:
    net = Net("abc", election_ticks=10, quiet_heartbeat_ticks=3)
    net.elect("a")
    net.stabilize()
    heartbeat_ticks(net, "a", 3)  # followers learn the commit
    a = net.nodes["a"]
    assert heartbeat_ticks(net, "a", 9) == [3, 6, 9] and a.idle_ticks() == 2
    net.propose("a", b"x")  # not committed, then not known committed: every tick again
    assert a.idle_ticks() == 0
    net.stabilize()
    heartbeat_ticks(net, "a", 3)
    assert all(net.nodes[n].commit == a.commit for n in "bc")
    assert heartbeat_ticks(net, "a", 6) == [3, 6] and a.role == Role.LEADER


def test_a_read_is_confirmed_at_once_and_a_lagging_follower_ends_quiet() -> None:
    net = Net("abc", election_ticks=10, quiet_heartbeat_ticks=3)
    net.elect("a")
    net.stabilize()
    heartbeat_ticks(net, "a", 6)
    a = net.nodes["a"]
    sent = len(net.sent)
    a.read_index(b"r1")
    net.process("a")
    assert [m.context for m in net.sent[sent:] if m.type == T.HEARTBEAT] == [b"r1", b"r1"]
    net.isolate("c")
    net.propose("a", b"y")
    net.stabilize()
    assert heartbeat_ticks(net, "a", 3) == [1, 2, 3]  # c does not hold the log


def test_quiet_heartbeats_fall_on_multiples_of_the_aligned_clock() -> None:
    """Groups sharing a timer send their quiet heartbeats on the same ticks."""
    for phase in range(5):
        net = Net("abc", election_ticks=10, quiet_heartbeat_ticks=5)
        net.elect("a")
        net.stabilize()
        heartbeat_ticks(net, "a", 3)  # followers learn the commit: quiet from here
        a = net.nodes["a"]
        a.align_clock(phase)  # the timer had fired `phase` times when this one joined
        assert a.idle_ticks() == 4 - phase
        assert heartbeat_ticks(net, "a", 10) == [5 - phase, 10 - phase]
        assert a.role == Role.LEADER


def test_a_follower_silent_for_a_whole_check_gets_quiet_heartbeats_until_it_answers() -> None:
    """One server down must not bring every group it follows back to every tick."""
    net = Net("abc", election_ticks=10, quiet_heartbeat_ticks=5)
    net.elect("a")
    net.stabilize()
    net.isolate("c")
    net.propose("a", b"x")
    net.stabilize()
    a = net.nodes["a"]
    assert heartbeat_ticks(net, "a", 2) == [1, 2]  # c lags, answered lately: every tick
    heartbeat_ticks(net, "a", 10)  # a quorum check passes: c said nothing since
    assert len(heartbeat_ticks(net, "a", 10)) == 2 and a.role == Role.LEADER
    net.heal()
    heartbeat_ticks(net, "a", 5)  # c answers a quiet one and is sent the entry
    assert net.items("c") == net.items("a")


def test_idle_ticks_passed_at_once_leave_the_core_as_one_by_one() -> None:
    counters = ("_election_elapsed", "_heartbeat_elapsed", "_transfer_elapsed", "_clock")
    for quiet in (0, 5):
        one, many = (Net("abc", election_ticks=10, quiet_heartbeat_ticks=quiet) for _ in "12")
        for net in (one, many):
            net.elect("a")
            net.heartbeat()
        for node in "ab":
            idle = one.nodes[node].idle_ticks()
            assert idle == many.nodes[node].idle_ticks()
            one.tick(node, idle)
            many.nodes[node].pass_idle(idle)
            for name in counters:
                assert getattr(one.nodes[node], name) == getattr(many.nodes[node], name)
            assert one.nodes[node].status() == many.nodes[node].status()
            assert not many.nodes[node].has_ready()


def test_ticks_past_the_idle_ones_are_ticked_in_full() -> None:
    net = Net("abc", election_ticks=10)
    net.elect("a")
    b = net.nodes["b"]
    b.pass_idle(b.idle_ticks() + 1)  # its election timeout passes
    assert b.role == Role.PRE_CANDIDATE
