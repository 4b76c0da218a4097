"""A seeded, lossy network between simulated Raft nodes.

Real networks drop, delay, reorder and duplicate packets, and partitions are
often one-way (a firewall rule, a half-dead NIC). Raft must stay safe under all
of it, so the simulator's network does all of it, driven by one seeded
`random.Random` so that a failing run replays exactly from its seed.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from consensus.types import Message, NodeId


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    drop: float = 0.02  # probability a message is lost
    duplicate: float = 0.02  # probability a message is delivered twice
    min_delay: int = 0  # ticks in flight; a random delay in between reorders messages
    max_delay: int = 2


@dataclass(slots=True)
class SimNetwork:
    rng: random.Random
    config: NetworkConfig = field(default_factory=NetworkConfig)
    # (src, dst) pairs whose messages are lost: a symmetric partition blocks both ways.
    _blocked: set[tuple[NodeId, NodeId]] = field(default_factory=set)
    _in_flight: list[tuple[int, int, Message]] = field(default_factory=list)
    _seq: int = 0

    def send(self, msg: Message, now: int) -> None:
        """Queue `msg`; the partition is checked again on delivery, like a link cut mid-flight."""
        if self.rng.random() < self.config.drop:
            return
        copies = 2 if self.rng.random() < self.config.duplicate else 1
        for _ in range(copies):
            delay = self.rng.randint(self.config.min_delay, self.config.max_delay)
            self._seq += 1
            heapq.heappush(self._in_flight, (now + delay, self._seq, msg))

    def due(self, now: int) -> list[Message]:
        """Messages arriving at tick `now`, in arrival order, minus those a partition ate."""
        out: list[Message] = []
        while self._in_flight and self._in_flight[0][0] <= now:
            _, _, msg = heapq.heappop(self._in_flight)
            if (msg.src, msg.dst) not in self._blocked:
                out.append(msg)
        return out

    def partition(self, side: set[NodeId], nodes: set[NodeId]) -> None:
        """Cut `side` off from the rest of `nodes`, both ways."""
        for a in side:
            for b in nodes - side:
                self._blocked.add((a, b))
                self._blocked.add((b, a))

    def cut(self, src: NodeId, dst: NodeId) -> None:
        """One-way: `src` can no longer reach `dst`, but still hears from it."""
        self._blocked.add((src, dst))

    def linked(self, a: NodeId, b: NodeId) -> bool:
        """Messages can go both ways between `a` and `b` (loss and delay aside)."""
        return (a, b) not in self._blocked and (b, a) not in self._blocked

    def heal(self) -> None:
        self._blocked.clear()

    @property
    def partitioned(self) -> bool:
        return bool(self._blocked)
