"""What the Ready loop hands its core after a long wait: the answers that arrived while it
waited (a save, a snapshot) count before the ticks that piled up meanwhile, so a leader
whose followers did answer keeps its lead. One node driven over a transport the test
answers for its two peers, its timer far off: every tick is one the test queues."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from consensus.core import Config
from consensus.driver import RaftNode
from consensus.log_store import LogStore
from consensus.types import Entry, EntryKind, Message, MessageType, Role
from tests.consensus.cluster import until
from tests.consensus.fake_transport import FakeTransport

T = MessageType
ELECTION_TICKS = 10


@pytest.fixture
async def led(tmp_path: Path) -> AsyncIterator[tuple[RaftNode, FakeTransport]]:
    """n1 leading n2 and n3; n2 alone answers (a quorum with n1)."""
    store, restored = LogStore.open(tmp_path / "n1", name="n1")
    peers = FakeTransport("n1")
    config = Config("n1", election_ticks=ELECTION_TICKS, seed=1)
    node = RaftNode(
        config, ("n1", "n2", "n3"), store, restored, peers, apply=lambda _: None, tick_seconds=3600
    )
    node.start()
    try:
        node.campaign()
        for ask, answer in ((T.PRE_VOTE, T.PRE_VOTE_RESP), (T.VOTE, T.VOTE_RESP)):
            await until(lambda ask=ask: peers.last(ask, "n2") is not None, f"{ask.name} to n2")
            asked = peers.last(ask, "n2")
            assert asked is not None
            peers.answer(Message(answer, "n2", "n1", asked.term))
        await until(lambda: node.role == Role.LEADER, "n1 leading")
        yield node, peers
    finally:
        await node.close()


async def piled(node: RaftNode, peers: FakeTransport, ticks: int, *, answered: bool) -> None:
    """`ticks` piled up while the loop waited; meanwhile n2 answered a heartbeat if
    `answered`. The loop then takes both in one turn."""
    if answered:
        peers.answer(Message(T.HEARTBEAT_RESP, "n2", "n1", node.term))
    sent = len(peers.sent)
    node._ticks += ticks  # as the timer counts them while the loop is busy
    node._wake.set()
    await until(lambda: len(peers.sent) > sent or node.role != Role.LEADER, "the turn taken")


async def test_answers_that_arrived_during_a_long_wait_keep_the_lead(
    led: tuple[RaftNode, FakeTransport],
) -> None:
    node, peers = led
    for _ in range(3):
        await piled(node, peers, ELECTION_TICKS, answered=True)
        assert node.role == Role.LEADER


async def test_a_timeout_without_answers_still_ends_the_lead(
    led: tuple[RaftNode, FakeTransport],
) -> None:
    node, peers = led
    await piled(node, peers, ELECTION_TICKS, answered=True)
    await piled(node, peers, ELECTION_TICKS - 1, answered=False)
    assert node.role == Role.LEADER
    await piled(node, peers, 1, answered=False)
    assert node.role == Role.FOLLOWER


# An idle group's traffic is taken in the caller's turn while the loop waits: a Ready of
# messages alone (a heartbeat's answer, a tick's heartbeats) is sent from the transport's
# callback or the ticker's, without waking the node's task.


async def parked(node: RaftNode) -> None:
    await until(lambda: node._parked and not node._wake.is_set(), "the loop waiting")


@pytest.fixture
async def follower(tmp_path: Path) -> AsyncIterator[tuple[RaftNode, FakeTransport, list[int]]]:
    """n1 following n2 in term 1, its log holding n2's entry 1 (not yet committed)."""
    store, restored = LogStore.open(tmp_path / "n1", name="n1")
    peers = FakeTransport("n1")
    applied: list[int] = []
    config = Config("n1", election_ticks=ELECTION_TICKS, seed=1, lazy_commit=True)
    node = RaftNode(
        config,
        ("n1", "n2", "n3"),
        store,
        restored,
        peers,
        apply=lambda entries: applied.extend(e.index for e in entries),
        tick_seconds=3600,
    )
    node.start()
    try:
        entry = Entry(1, 1, EntryKind.NORMAL, b"x")
        peers.answer(Message(T.APPEND, "n2", "n1", 1, entries=(entry,)))
        await until(lambda: peers.last(T.APPEND_RESP, "n2") is not None, "the append answered")
        await parked(node)
        yield node, peers, applied
    finally:
        await node.close()


async def test_a_heartbeat_with_nothing_new_is_answered_in_the_callers_turn(
    follower: tuple[RaftNode, FakeTransport, list[int]],
) -> None:
    node, peers, _ = follower
    peers.answer(Message(T.HEARTBEAT, "n2", "n1", 1, commit=0, context=b"r"))
    answer = peers.last(T.HEARTBEAT_RESP, "n2")
    assert answer is not None and answer.context == b"r" and answer.index == 1
    assert not node._wake.is_set()


async def test_a_heartbeat_bringing_a_commit_is_applied_in_the_callers_turn(
    follower: tuple[RaftNode, FakeTransport, list[int]],
) -> None:
    node, peers, applied = follower  # a Ready that waits on no disk: see test_driver_in_place
    peers.answer(Message(T.HEARTBEAT, "n2", "n1", 1, commit=1))
    assert applied == [1] and peers.last(T.HEARTBEAT_RESP, "n2") is not None
    assert not node._wake.is_set()


async def test_a_leaders_heartbeat_tick_sends_in_the_tickers_turn(
    led: tuple[RaftNode, FakeTransport],
) -> None:
    node, peers = led
    await parked(node)
    sent = len(peers.sent)
    node.on_tick()  # as the loop's Ticker calls it; every tick is a heartbeat's here
    beats = [m for m in peers.sent[sent:] if m.type == T.HEARTBEAT]
    assert sorted(m.dst for m in beats) == ["n2", "n3"]
    assert node.role == Role.LEADER
