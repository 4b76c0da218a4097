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
from consensus.transport import Handler
from consensus.types import Message, MessageType, NodeId, Role
from tests.consensus.cluster import until

T = MessageType
ELECTION_TICKS = 10


class Peers:
    """The transport of node n1: what it sends is kept, answers go to its handler."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.handler: Handler | None = None

    @property
    def id(self) -> NodeId:
        return "n1"

    def set_handler(self, handler: Handler) -> None:
        self.handler = handler

    def send(self, msg: Message) -> None:
        self.sent.append(msg)

    def flush(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def answer(self, msg: Message) -> None:
        assert self.handler is not None
        self.handler(msg)

    def last(self, kind: MessageType, to: NodeId) -> Message | None:
        return next((m for m in reversed(self.sent) if m.type == kind and m.dst == to), None)


@pytest.fixture
async def led(tmp_path: Path) -> AsyncIterator[tuple[RaftNode, Peers]]:
    """n1 leading n2 and n3; n2 alone answers (a quorum with n1)."""
    store, restored = LogStore.open(tmp_path / "n1", name="n1")
    peers = Peers()
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


async def piled(node: RaftNode, peers: Peers, ticks: int, *, answered: bool) -> None:
    """`ticks` piled up while the loop waited; meanwhile n2 answered a heartbeat if
    `answered`. The loop then takes both in one turn."""
    if answered:
        peers.answer(Message(T.HEARTBEAT_RESP, "n2", "n1", node.term))
    sent = len(peers.sent)
    node._ticks += ticks  # as the timer counts them while the loop is busy
    node._wake.set()
    await until(lambda: len(peers.sent) > sent or node.role != Role.LEADER, "the turn taken")


async def test_answers_that_arrived_during_a_long_wait_keep_the_lead(
    led: tuple[RaftNode, Peers],
) -> None:
    node, peers = led
    for _ in range(3):
        await piled(node, peers, ELECTION_TICKS, answered=True)
        assert node.role == Role.LEADER


async def test_a_timeout_without_answers_still_ends_the_lead(
    led: tuple[RaftNode, Peers],
) -> None:
    node, peers = led
    await piled(node, peers, ELECTION_TICKS, answered=True)
    await piled(node, peers, ELECTION_TICKS - 1, answered=False)
    assert node.role == Role.LEADER
    await piled(node, peers, 1, answered=False)
    assert node.role == Role.FOLLOWER
