"""A Ready that waits on no disk is carried out in the caller's turn while the loop waits.

With one publish at a time every Ready of the round trip is one (a follower's append
and answer, the leader's commit, apply and PubAck): each is done in the transport's
callback, in the contract's order (write, send, apply), with no wake-up of the node's
task. What must reach the disk first (a vote, a new term, entries under `always`)
still goes to the loop. One node over a transport the test answers for its peers, its
timer far off."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from consensus.core import Config
from consensus.driver import RaftNode
from consensus.election import TRANSFER_CONTEXT
from consensus.log_store import LogStore
from consensus.types import Entry, EntryKind, Message, MessageType, Role
from tests.consensus.cluster import until
from tests.consensus.fake_transport import FakeTransport

T = MessageType


async def started(tmp_path: Path, *, always: bool = False) -> tuple[RaftNode, FakeTransport]:
    store, restored = LogStore.open(tmp_path / "n1", name="n1")
    peers = FakeTransport("n1", store)
    node = RaftNode(
        Config("n1", election_ticks=10, seed=1, lazy_commit=True),
        ("n1", "n2", "n3"),
        store,
        restored,
        peers,
        apply=peers.apply,
        sync_interval_ns=None if always else 10_000_000,
        tick_seconds=3600,
    )
    node.start()
    return node, peers


async def parked(node: RaftNode) -> None:
    await until(lambda: node._parked and not node._wake.is_set(), "the loop waiting")


def append(index: int, commit: int) -> Message:
    """n2's APPEND (term 1) of entry `index` after `index - 1`, committing up to `commit`."""
    entry = Entry(1, index, EntryKind.NORMAL, b"m%d" % index)
    return Message(T.APPEND, "n2", "n1", 1, 1 if index > 1 else 0, index - 1, (entry,), commit)


@pytest.fixture
async def follower(tmp_path: Path) -> AsyncIterator[tuple[RaftNode, FakeTransport]]:
    """n1 following n2 in term 1, holding entry 1: the term is on disk, the loop waits."""
    node, peers = await started(tmp_path)
    try:
        peers.answer(append(1, 0))  # a new term: written and fsynced by the loop
        await until(lambda: peers.last(T.APPEND_RESP, "n2") is not None, "entry 1 answered")
        await parked(node)
        peers.events.clear()
        yield node, peers
    finally:
        await node.close()


async def test_a_followers_append_is_written_answered_and_applied_in_the_callers_turn(
    follower: tuple[RaftNode, FakeTransport],
) -> None:
    node, peers = follower
    peers.answer(append(2, 1))  # entry 2, and entry 1 committed
    assert peers.events == ["send APPEND_RESP to n2, log at 2", "flush", "apply 1-1", "flush"]
    assert not node._wake.is_set()
    assert node.applied == 1


async def test_a_vote_for_a_new_term_waits_for_the_loop_and_its_fsync(
    follower: tuple[RaftNode, FakeTransport],
) -> None:
    node, peers = follower
    # n2 hands its lead to n3 (a transfer's vote is not refused for n2's lease)
    peers.answer(Message(T.VOTE, "n3", "n1", 2, log_term=1, index=1, context=TRANSFER_CONTEXT))
    assert peers.last(T.VOTE_RESP, "n3") is None and node._wake.is_set()
    await until(lambda: peers.last(T.VOTE_RESP, "n3") is not None, "the vote answered")
    assert node.term == 2


async def test_under_always_an_append_waits_for_the_loop_and_its_fsync(tmp_path: Path) -> None:
    node, peers = await started(tmp_path, always=True)
    try:
        peers.answer(append(1, 0))
        await until(lambda: peers.last(T.APPEND_RESP, "n2") is not None, "entry 1 answered")
        await parked(node)
        peers.answer(append(2, 1))
        assert node._wake.is_set() and peers.last(T.APPEND_RESP, "n2").index == 1  # type: ignore[union-attr]
        await until(lambda: node.applied == 1, "entry 1 applied")
        assert peers.last(T.APPEND_RESP, "n2").index == 2  # type: ignore[union-attr]
    finally:
        await node.close()


@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[tuple[RaftNode, FakeTransport]]:
    """n1 leading term 1 with its no-op (entry 1) applied, the loop waiting."""
    node, peers = await started(tmp_path)
    try:
        node.campaign()
        for ask, answer in ((T.PRE_VOTE, T.PRE_VOTE_RESP), (T.VOTE, T.VOTE_RESP)):
            await until(lambda ask=ask: peers.last(ask, "n2") is not None, f"{ask.name}")
            peers.answer(Message(answer, "n2", "n1", peers.last(ask, "n2").term))  # type: ignore[union-attr]
        await until(lambda: node.role == Role.LEADER, "n1 leading")
        noop = peers.last(T.APPEND, "n2")
        assert noop is not None
        peers.answer(Message(T.APPEND_RESP, "n2", "n1", noop.term, index=1))
        await until(lambda: node.applied == 1, "the leader's no-op applied")
        await parked(node)
        yield node, peers
    finally:
        await node.close()


async def proposed(node: RaftNode, peers: FakeTransport) -> None:
    """Once entry 2 is sent to n2 and the loop waits again."""
    await until(lambda: peers.last(T.APPEND, "n2").index == 1, "entry 2 sent")  # type: ignore[union-attr]
    await parked(node)
    peers.events.clear()


async def test_a_leaders_commit_applies_and_answers_the_proposer_in_the_callers_turn(
    leader: tuple[RaftNode, FakeTransport],
) -> None:
    node, peers = leader
    done: list[BaseException | None] = []
    node.propose([b"publish"], done.append)
    await proposed(node, peers)
    peers.answer(Message(T.APPEND_RESP, "n2", "n1", node.term, index=2))
    assert done == [None]  # committed on n1 and n2, applied, the proposer answered
    assert peers.events == ["apply 2-2", "flush"]
    assert not node._wake.is_set()


async def test_an_early_answer_is_sent_at_the_commit_before_the_apply(
    leader: tuple[RaftNode, FakeTransport],
) -> None:
    """A PubAck needs the quorum, not this node's store: it leaves before the apply, and
    what reads the store (a consumer woken) runs after it."""
    node, peers = leader
    node.propose(
        [b"publish"],
        lambda error: peers.events.append(f"stored {error}"),
        early=lambda error: peers.events.append(f"answered {error}"),
    )
    await proposed(node, peers)
    peers.answer(Message(T.APPEND_RESP, "n2", "n1", node.term, index=2))
    assert peers.events == ["answered None", "flush", "apply 2-2", "stored None", "flush"]


async def test_a_proposal_that_cannot_commit_fails_both_callbacks_early_first(
    leader: tuple[RaftNode, FakeTransport],
) -> None:
    node, peers = leader
    heard: list[str] = []
    node.propose(
        [b"publish"],
        lambda error: heard.append(f"stored {type(error).__name__}"),
        early=lambda error: heard.append(f"answered {type(error).__name__}"),
    )
    await proposed(node, peers)
    await node.close()
    assert heard == ["answered NodeClosedError", "stored NodeClosedError"]
    node.propose([b"late"], early=lambda error: heard.append(f"late {type(error).__name__}"))
    assert heard[-1] == "late NodeClosedError"


async def test_a_barriers_early_callback_runs_with_its_apply(
    leader: tuple[RaftNode, FakeTransport],
) -> None:
    """A barrier answers a reader, who needs what came before it applied."""
    node, peers = leader
    node.propose([b"publish"])
    node.propose(
        [], lambda _: peers.events.append("stored"), early=lambda _: peers.events.append("answered")
    )
    await proposed(node, peers)
    peers.answer(Message(T.APPEND_RESP, "n2", "n1", node.term, index=2))
    assert peers.events == ["apply 2-2", "answered", "stored", "flush"]


async def test_a_plain_heartbeat_is_taken_in_place_without_a_message_while_the_loop_waits(
    follower: tuple[RaftNode, FakeTransport],
) -> None:
    node, peers = follower
    assert peers.beat is not None
    assert peers.beat(T.HEARTBEAT, "n2", 1, 0) == 1  # its answer: log at 1
    assert peers.events == [] and not node._wake.is_set()
    assert peers.beat(T.HEARTBEAT, "n2", 1, 1) is None  # entry 1 committed: news
    assert peers.beat(T.HEARTBEAT, "n2", 2, 0) is None  # a new term
    node._wake.set()  # the loop has work queued: the beat waits behind it
    assert peers.beat(T.HEARTBEAT, "n2", 1, 0) is None


async def test_a_plain_answer_is_taken_in_place_and_a_lagging_one_is_not(
    leader: tuple[RaftNode, FakeTransport],
) -> None:
    node, peers = leader
    peers.events.clear()
    assert peers.beat is not None
    assert peers.beat(T.HEARTBEAT_RESP, "n2", node.term, 1) == 0
    assert peers.beat(T.HEARTBEAT_RESP, "n3", node.term, 0) is None  # n3 lacks the no-op
    assert peers.events == [] and not node._wake.is_set()


async def test_a_commit_alone_is_written_once_a_tick_and_the_newest_at_close(
    follower: tuple[RaftNode, FakeTransport], tmp_path: Path
) -> None:
    node, peers = follower
    store = peers.store
    assert store is not None
    peers.answer(append(2, 1))  # commit 1: this tick's write went to the term
    assert store._hs.commit == 0
    node.on_tick()  # a follower's tick only counts here: its timeout is far
    peers.answer(append(3, 2))
    peers.answer(append(4, 3))
    assert store._hs.commit == 2  # the first commit after the tick, not the next
    assert [m.index for m in peers.sent[-3:]] == [2, 3, 4]  # each answered all the same
    await node.close()
    _, restored = LogStore.open(tmp_path / "n1", name="n1")
    assert restored.hard_state.commit == 3
