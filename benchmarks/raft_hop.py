"""Thread CPU of the Raft part of one sync publish's hops, in one process.

A replicated sync publish crosses the driver, the core and the log store three
times on its path: a follower takes the APPEND (written, answered), and the
leader takes two answers, the first of which commits (hard state, the early
callback that would send the PubAck) and the second of which moves nothing.
This times each of those in the caller's turn (`RaftNode._in_place`), as the
routes hand them over, with a transport that drops what it is given and an
application that does nothing: no route read or write, no codec, no segment
apply, so what it shows is the Raft part alone, without the load's noise that
a three-server run carries (docs/cluster-performance.md). Medians of thread
CPU per call, in µs, printed as JSON.

    python -m benchmarks.raft_hop [--count 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from consensus.core import Config
from consensus.driver import RaftNode
from consensus.log_store import LogStore
from consensus.transport import BeatHandler, Handler
from consensus.types import Entry, EntryKind, Message, MessageType, NodeId, Role

T = MessageType
PAYLOAD = b"x" * 160  # a Run of one 128 B publish, about
DEADLINE = 5.0


class Dropping:
    """A transport that keeps the last message of each kind to each peer, and sends nothing."""

    def __init__(self, node: NodeId) -> None:
        self._node = node
        self.handler: Handler | None = None
        self.last: dict[tuple[MessageType, NodeId], Message] = {}

    @property
    def id(self) -> NodeId:
        return self._node

    def set_handler(self, handler: Handler, beat: BeatHandler | None = None) -> None:
        self.handler = handler

    def send(self, msg: Message) -> None:
        self.last[(msg.type, msg.dst)] = msg

    def flush(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def take(self, msg: Message) -> None:
        assert self.handler is not None
        self.handler(msg)


async def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("the node did not get there in time")
        await asyncio.sleep(0.0005)


def _node(root: Path, name: NodeId) -> tuple[RaftNode, Dropping]:
    store, restored = LogStore.open(root / name, name=name)
    peers = Dropping(name)
    config = Config(name, seed=1, lazy_commit=True)  # as a stream's group
    node = RaftNode(
        config, (name, "p2", "p3"), store, restored, peers, apply=lambda _: None, tick_seconds=3600
    )
    node.start()
    return node, peers


def _parked(node: RaftNode) -> bool:
    return node._parked and not node._wake.is_set()


def _timed(call: Callable[[], None]) -> int:
    start = time.thread_time_ns()
    call()
    return time.thread_time_ns() - start


async def follower(root: Path, count: int) -> float:
    """µs per APPEND of one entry that also commits the one before: appended, answered."""
    node, peers = _node(root, "f")

    def append(index: int) -> Message:
        entry = Entry(1, index, EntryKind.NORMAL, PAYLOAD)
        prev_term = 1 if index > 1 else 0
        return Message(T.APPEND, "p2", "f", 1, prev_term, index - 1, (entry,), index - 1)

    try:
        peers.take(append(1))  # a new term: fsynced by the loop
        await _until(lambda: (T.APPEND_RESP, "p2") in peers.last and _parked(node))
        appends = [append(index) for index in range(2, count + 2)]
        times = [_timed(lambda msg=msg: peers.take(msg)) for msg in appends]
        assert peers.last[(T.APPEND_RESP, "p2")].index == count + 1
    finally:
        await node.close()
    return statistics.median(times) / 1e3


async def leader(root: Path, count: int) -> tuple[float, float]:
    """µs per answer to a proposal: the first (commits), the second (moves nothing)."""
    node, peers = _node(root, "l")
    try:
        node.campaign()
        for ask, answer in ((T.PRE_VOTE, T.PRE_VOTE_RESP), (T.VOTE, T.VOTE_RESP)):
            await _until(lambda ask=ask: (ask, "p2") in peers.last)
            peers.take(Message(answer, "p2", "l", peers.last[(ask, "p2")].term))
        await _until(lambda: node.role == Role.LEADER)
        term = node.term
        for peer in ("p2", "p3"):
            peers.take(Message(T.APPEND_RESP, peer, "l", term, index=1))
        await _until(lambda: node.applied == 1 and _parked(node))
        first, second, acked = [], [], []
        for index in range(2, count + 2):
            node.propose([PAYLOAD], early=acked.append)

            def sent(index: int = index) -> bool:
                last = peers.last.get((T.APPEND, "p3"))
                return _parked(node) and last is not None and last.index == index - 1

            await _until(sent)
            for peer, times in (("p2", first), ("p3", second)):
                answer = Message(T.APPEND_RESP, peer, "l", term, index=index)
                times.append(_timed(lambda answer=answer: peers.take(answer)))
        assert len(acked) == count and node.applied == count + 1
    finally:
        await node.close()
    return statistics.median(first) / 1e3, statistics.median(second) / 1e3


async def measure(count: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as root:
        append = await follower(Path(root), count)
        first, second = await leader(Path(root), max(count // 5, 100))
    return {
        "follower_append_us": round(append, 1),
        "leader_first_answer_us": round(first, 1),
        "leader_second_answer_us": round(second, 1),
        "load": round(os.getloadavg()[0], 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=5000)
    opts = parser.parse_args(argv)
    print(json.dumps(asyncio.run(measure(opts.count))))


if __name__ == "__main__":
    main()
