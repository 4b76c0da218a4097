"""The leader's pending linearizable reads (ReadIndex), waiting for a heartbeat quorum.

A read is safe at the commit index the leader had when the read arrived, once
a quorum has confirmed the leader is still the leader after that moment: a
heartbeat reply echoing the read's context is such a confirmation, and it also
confirms every read queued before it (they arrived earlier still).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from consensus.types import NodeId


@dataclass(slots=True)
class PendingRead:
    context: bytes
    index: int  # the leader's commit when the read arrived
    requester: NodeId  # the leader itself or the follower that forwarded it
    acks: set[NodeId] = field(default_factory=set)


class ReadQueue:
    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: list[PendingRead] = []

    def add(self, read: PendingRead) -> None:
        self._queue.append(read)

    def latest_context(self) -> bytes:
        return self._queue[-1].context if self._queue else b""

    def acknowledge(
        self, context: bytes, peer: NodeId, is_quorum: Callable[[set[NodeId]], bool]
    ) -> list[PendingRead]:
        """Record that `peer` confirmed the round `context`; pop and return the reads
        (in arrival order) that a quorum has now confirmed."""
        last = -1
        for pos, read in enumerate(self._queue):
            if read.context == context:
                last = pos
        done = 0
        for pos in range(last + 1):
            read = self._queue[pos]
            read.acks.add(peer)
            if is_quorum(read.acks):
                done = pos + 1
        resolved, self._queue = self._queue[:done], self._queue[done:]
        return resolved

    def clear(self) -> None:
        self._queue.clear()
