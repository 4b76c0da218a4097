"""The nemesis: a seeded schedule of faults, and the code that inflicts and heals them.

Each fault lasts a bounded ``hold`` and is followed by a ``calm`` spell in which
the cluster may recover, so a run's length is known from its schedule. Hold
times are chosen against the reference's Raft timers: a partition outlasts an
election timeout (a few seconds), so an isolated leader is really deposed,
while a pause is sometimes shorter (the leader comes back still leading) and
sometimes longer.

A schedule is pure (seed in, list out), so a failing run's faults can be
replayed by seed; the timing of the writers around them cannot, which is why
every applied fault is also written to the run's timeline.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from consensus.power_loss import power_cut
from tests.jepsen.cluster import NodeSet


class FaultKind(StrEnum):
    KILL = "kill"  # SIGKILL a random node, restart it after the hold
    KILL_LEADER = "kill-leader"
    PAUSE = "pause"  # SIGSTOP a random node, SIGCONT after the hold
    PARTITION = "partition"  # blackhole a random node from every peer
    PARTITION_LEADER = "partition-leader"
    POWER_LOSS = "power-loss"  # SIGKILL and lose what was not fsynced: jetlake only


ALL_KINDS: tuple[FaultKind, ...] = tuple(FaultKind)
PORTABLE_KINDS = tuple(k for k in FaultKind if k is not FaultKind.POWER_LOSS)
"""What any server can suffer. A power loss needs the server's help: jetlake's log
store records what each fsync covered (consensus/power_loss.py); the reference has
no such hook, and a kill -9 alone keeps the page cache."""
HOLD_SECONDS: dict[FaultKind, tuple[float, float]] = {
    FaultKind.KILL: (1.0, 3.0),
    FaultKind.KILL_LEADER: (1.0, 3.0),
    FaultKind.PAUSE: (1.5, 5.0),
    FaultKind.PARTITION: (8.0, 12.0),
    FaultKind.PARTITION_LEADER: (8.0, 12.0),
    FaultKind.POWER_LOSS: (1.0, 3.0),
}
CALM_SECONDS = (2.0, 4.0)
LEADER_WAIT = 15.0  # seconds to wait for an election before picking a node at random
LEADER_POLL = 0.2
LEADER_KINDS = frozenset({FaultKind.KILL_LEADER, FaultKind.PARTITION_LEADER})


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault: ``node`` None means whichever node leads the stream when it starts."""

    kind: FaultKind
    node: int | None
    hold: float
    calm: float


def schedule(
    seed: int, kinds: Sequence[FaultKind], *, nodes: int, count: int | None = None
) -> list[Fault]:
    """``count`` faults (default: each kind once), every kind at least once when room allows.

    The first ``len(kinds)`` faults are the kinds in a shuffled order; any more
    are drawn at random, so a short run covers everything and a soak mixes.
    """
    rng = random.Random(seed)
    total = len(kinds) if count is None else count
    order = list(kinds)
    rng.shuffle(order)
    order += [rng.choice(kinds) for _ in range(total - len(order))]
    faults = []
    for kind in order[:total]:
        node = None if kind in LEADER_KINDS else rng.randrange(nodes)
        faults.append(
            Fault(kind, node, rng.uniform(*HOLD_SECONDS[kind]), rng.uniform(*CALM_SECONDS))
        )
    return faults


def duration(faults: Sequence[Fault]) -> float:
    """Seconds the schedule takes, not counting restarts and leader look-ups."""
    return sum(f.hold + f.calm for f in faults)


LeaderLookup = Callable[[], Awaitable[str | None]]


@dataclass
class Nemesis:
    """Applies faults to a ``NodeSet``; ``recover`` undoes whatever is still in effect."""

    nodes: NodeSet
    leader: LeaderLookup
    seed: int
    timeline: list[str] = field(default_factory=list)
    _paused: set[int] = field(default_factory=set, init=False)
    _started: float = field(default_factory=time.monotonic, init=False)

    def note(self, text: str) -> None:
        self.timeline.append(f"{time.monotonic() - self._started:7.2f}s {text}")

    async def run(self, faults: Sequence[Fault]) -> None:
        rng = random.Random(self.seed)
        for fault in faults:
            target = await self._target(fault, rng)
            name = self.nodes.names[target]
            self.note(f"{fault.kind} {name} for {fault.hold:.1f}s")
            await self._inflict(fault.kind, target, fault.hold, rng)
            self.note(f"healed {fault.kind} {name}; stream leader {await self.leader()}")
            await asyncio.sleep(fault.calm)

    async def _target(self, fault: Fault, rng: random.Random) -> int:
        if fault.node is not None:
            return fault.node
        deadline = time.monotonic() + LEADER_WAIT
        while (leader := await self.leader()) is None and time.monotonic() < deadline:
            await asyncio.sleep(LEADER_POLL)  # mid-election: the fault is meant for the winner
        if leader is None:
            fallback = rng.randrange(len(self.nodes.servers))
            self.note(f"no stream leader known; {fault.kind} falls on S{fallback}")
            return fallback
        return self.nodes.index(leader)

    async def _inflict(self, kind: FaultKind, node: int, hold: float, rng: random.Random) -> None:
        server = self.nodes.servers[node]
        if kind in (FaultKind.KILL, FaultKind.KILL_LEADER):
            await asyncio.to_thread(server.kill)
            await asyncio.sleep(hold)
            await asyncio.to_thread(server.start, port=server.port)
        elif kind is FaultKind.POWER_LOSS:
            if not self.nodes.power:
                raise ValueError("a power loss needs nodes started with power_loss=True")
            await asyncio.to_thread(server.kill)
            cut = power_cut(self.nodes.power[node].sync_record, self.nodes.power[node].boot_id)
            torn = tear_active_segments(self.nodes.stores[node], rng)
            self.note(
                f"power cut {self.nodes.names[node]}: {len(cut)} log dirs cut to synced, "
                f"{torn} active segments torn"
            )
            await asyncio.sleep(hold)
            await asyncio.to_thread(server.start, port=server.port)
        elif kind is FaultKind.PAUSE:
            server.send_signal(signal.SIGSTOP)
            self._paused.add(node)
            await asyncio.sleep(hold)
            server.send_signal(signal.SIGCONT)
            self._paused.discard(node)
        else:
            await asyncio.to_thread(self.nodes.lab.isolate, node)
            await asyncio.sleep(hold)
            await asyncio.to_thread(self.nodes.lab.heal)

    async def recover(self) -> None:
        """Heal partitions, resume paused nodes, restart dead ones: the state after a run."""
        await asyncio.to_thread(self.nodes.lab.heal)
        for node in sorted(self._paused):
            self.nodes.servers[node].send_signal(signal.SIGCONT)
        self._paused.clear()
        for server in self.nodes.servers:
            if not server.running:
                await asyncio.to_thread(server.start, port=server.port)
        self.note("recovered: no partition, no pause, every node running")


def tear_active_segments(store: Path, rng: random.Random) -> int:
    """What a power loss may do to a replicated stream's segments: nothing fsyncs an
    active segment after its creation (the Raft log is what is synced), so its data and
    index files may each lose any suffix. Cut both at random; the log refills them."""
    torn = 0
    for stream in store.glob("jetstream/*/streams/*"):
        data = sorted(stream.glob("*.arrows"))
        if not data:
            continue
        active = data[-1]
        for path in (active, active.with_suffix(".idx")):
            if path.exists():
                with open(path, "r+b") as f:
                    f.truncate(rng.randint(0, path.stat().st_size))
        torn += 1
    return torn
