"""When a Ready's messages leave: before its apply, and what the apply answered right after.

A sync publish waits on four hops in a row (client to leader, APPEND, its answer,
PubAck); a follower that applied before its answer left, or a leader whose
PubAck waited for the end of the loop's turn, added that work to every hop.
One follower node over a transport that records sends, flushes and applies."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from consensus.core import Config
from consensus.driver import RaftNode
from consensus.log_store import LogStore
from consensus.types import Entry, EntryKind, Message, MessageType
from tests.consensus.cluster import until
from tests.consensus.fake_transport import FakeTransport

T = MessageType


@pytest.fixture
async def follower(tmp_path: Path) -> AsyncIterator[FakeTransport]:
    store, restored = LogStore.open(tmp_path / "n2", name="n2")
    peers = FakeTransport("n2")
    config = Config("n2", election_ticks=10, seed=2)
    node = RaftNode(
        config, ("n1", "n2", "n3"), store, restored, peers, apply=peers.apply, tick_seconds=3600
    )
    node.start()
    try:
        yield peers
    finally:
        await node.close()


def append(index: int, commit: int) -> Message:
    """n1's APPEND of entry `index` (term 1) after `index - 1`, committing up to `commit`."""
    kind = EntryKind.NOOP if index == 1 else EntryKind.NORMAL
    entry = Entry(1, index, kind, b"" if index == 1 else f"m{index}".encode())
    log_term = 1 if index > 1 else 0
    return Message(T.APPEND, "n1", "n2", 1, log_term, index - 1, (entry,), commit)


async def test_the_answer_leaves_before_the_apply_and_the_apply_is_flushed(
    follower: FakeTransport,
) -> None:
    assert follower.handler is not None
    follower.handler(append(1, 0))
    await until(lambda: "send APPEND_RESP to n1" in follower.events, "the first answer")
    await until(lambda: follower.events[-1] == "flush", "the first answer flushed")
    follower.events.clear()
    follower.handler(append(2, 1))  # entry 2, and entry 1 committed: one Ready holds both
    await until(lambda: any(e.startswith("apply") for e in follower.events), "entry 1 applied")
    await until(lambda: follower.events[-1] == "flush", "the turn's last flush")
    assert follower.events == ["send APPEND_RESP to n1", "flush", "apply 1-1", "flush"]
