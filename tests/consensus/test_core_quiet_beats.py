"""The core's quiet path for plain heartbeats and answers (`RaftCore.quiet_heartbeat`,
`quiet_answer`): taken only when it changes nothing but liveness, with the answer the
whole step would send; anything more (a new term, a commit to learn, a lagging or cut
follower) is refused so the caller steps the whole message. The seeded simulator takes
the quiet path on half its seeds (`SimNode._quiet`)."""

from __future__ import annotations

from consensus.types import Message, MessageType, Role
from tests.consensus.scripts.net import Net

T = MessageType


def settled() -> Net:
    """a leads b and c; every log holds the leader's no-op and knows it committed."""
    net = Net("abc", election_ticks=10)
    net.elect("a")
    net.heartbeat()
    return net


def test_a_plain_heartbeat_restarts_the_timer_and_answers_as_a_step_would() -> None:
    net = settled()
    a, b = net.nodes["a"], net.nodes["b"]
    net.tick("b", 5)
    before = b.idle_ticks()
    assert b.quiet_heartbeat("a", a.term, a.commit) == b.last_index
    assert b.idle_ticks() == before + 5 and not b.has_ready()
    b.step(Message(T.HEARTBEAT, "a", "b", a.term, commit=a.commit))
    (answer,) = b.ready().messages
    assert (answer.type, answer.term, answer.index) == (T.HEARTBEAT_RESP, a.term, b.last_index)


def test_a_heartbeat_with_news_takes_the_whole_step() -> None:
    net = settled()
    a, b = net.nodes["a"], net.nodes["b"]
    assert b.quiet_heartbeat("a", a.term + 1, a.commit) is None  # a new term
    assert b.quiet_heartbeat("c", a.term, a.commit) is None  # not its leader
    net.propose("a", b"x")
    net.deliver()  # b holds entry 2, not yet known committed
    net.deliver()  # a commits it
    assert a.commit == b.last_index > b.commit
    assert b.quiet_heartbeat("a", a.term, a.commit) is None  # a commit to learn
    assert a.quiet_heartbeat("b", a.term, 0) is None  # a leader is no follower


def test_a_plain_answer_marks_the_follower_alive() -> None:
    net = settled()
    a, b = net.nodes["a"], net.nodes["b"]
    progress = a._progress["b"]
    progress.recent_active = False
    assert a.quiet_answer("b", a.term, b.last_index)
    assert progress.recent_active and not a.has_ready()


def test_an_answer_from_a_lagging_or_cut_follower_takes_the_whole_step() -> None:
    net = settled()
    a = net.nodes["a"]
    net.propose("a", b"x")
    net.drop()  # entry 2 never reaches b or c
    assert not a.quiet_answer("b", a.term, a.last_index - 1)
    assert not a.quiet_answer("b", a.term + 1, a.last_index)  # a term it does not know
    net = settled()
    a = net.nodes["a"]
    assert not a.quiet_answer("b", a.term, a.last_index - 1)  # its log was cut
    assert not a.quiet_answer("z", a.term, a.last_index)  # not a member
    assert not net.nodes["b"].quiet_answer("a", a.term, a.last_index)  # not a leader
    assert net.nodes["b"].role == Role.FOLLOWER
