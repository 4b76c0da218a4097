"""A hand-driven network of Raft cores for interaction scripts.

Nothing happens unless the script says so: `tick` advances one node's clock,
`deliver` hands over queued messages (all, or those a filter picks), `drop`
loses them. After every input the node's `Ready` is carried out exactly as the
contract orders it (persist, send, apply, advance), into a per-node `Disk` and
`Machine`, so a script can restart a node from what it really persisted and
can check what every node applied. Each script reads as a sequence of steps
with the expected state asserted after each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from consensus.core import Config, RaftCore
from consensus.types import (
    ConfChange,
    Entry,
    EntryKind,
    HardState,
    Message,
    MessageType,
    NodeId,
    ReadState,
    Restored,
    Role,
    Snapshot,
    SnapshotMeta,
)

Filter = Callable[[Message], bool]


@dataclass
class Disk:
    """What a node persisted: the only thing a restart may rebuild from."""

    hard_state: HardState = field(default_factory=HardState)
    snapshot: SnapshotMeta | None = None
    snapshot_data: bytes = b""
    entries: list[Entry] = field(default_factory=list)
    syncs: int = 0  # Ready batches persisted with must_sync

    def restored(self, vote_floor: int = 0, reboot_term: int = 0) -> Restored:
        return Restored(
            self.hard_state, self.snapshot, tuple(self.entries), vote_floor, reboot_term
        )

    def write(self, entries: list[Entry]) -> None:
        first = self.snapshot.index + 1 if self.snapshot else 1
        cut = entries[0].index - first
        assert 0 <= cut <= len(self.entries), "an entry beyond the end of the log"
        del self.entries[cut:]
        self.entries.extend(entries)


@dataclass
class Machine:
    """The state machine: the payloads of NORMAL entries applied, in order."""

    items: list[bytes] = field(default_factory=list)
    applied: list[Entry] = field(default_factory=list)  # every committed entry, any kind

    def apply(self, entries: list[Entry]) -> None:
        self.applied += entries
        self.items += [e.data for e in entries if e.kind == EntryKind.NORMAL]

    def snapshot(self) -> bytes:
        return b"\n".join(self.items)

    def restore(self, data: bytes) -> None:
        self.items = data.split(b"\n") if data else []


class Net:
    def __init__(self, ids: Iterable[NodeId], **config: object) -> None:
        self.ids = list(ids)
        self.config = config
        self.nodes: dict[NodeId, RaftCore] = {}
        self.disks: dict[NodeId, Disk] = {}
        self.machines: dict[NodeId, Machine] = {}
        self.reads: dict[NodeId, list[ReadState]] = {}
        self.queue: list[Message] = []  # sent, not yet delivered
        self.cut: set[frozenset[NodeId]] = set()  # links that lose everything
        self.sent: list[Message] = []  # every message ever sent, for counting
        for node in self.ids:
            self.add(node, voters=self.ids)

    # ------------------------------------------------------------------ setup

    def add(self, node: NodeId, voters: Iterable[NodeId], restored: Restored | None = None) -> None:
        seed = self.ids.index(node) if node in self.ids else len(self.nodes)
        config = Config(id=node, seed=seed, **self.config)  # type: ignore[arg-type]
        self.nodes[node] = RaftCore(config, voters, restored or Restored())
        self.disks.setdefault(node, Disk())
        self.machines.setdefault(node, Machine())
        self.reads.setdefault(node, [])
        self.process(node)

    def restart(
        self,
        node: NodeId,
        voters: Iterable[NodeId] = (),
        vote_floor: int = 0,
        reboot_term: int = 0,
    ) -> None:
        """Crash `node` (losing nothing it persisted) and start it from its disk."""
        self.queue = [m for m in self.queue if node not in (m.src, m.dst)]
        disk = self.disks[node]
        machine = self.machines[node] = Machine()
        machine.restore(disk.snapshot_data)
        self.add(node, voters or self.ids, disk.restored(vote_floor, reboot_term))
        if disk.snapshot is not None:
            self.nodes[node].compact(Snapshot(disk.snapshot, disk.snapshot_data))

    # ------------------------------------------------------------------ I/O loop

    def process(self, node: NodeId) -> None:
        core = self.nodes[node]
        disk, machine = self.disks[node], self.machines[node]
        while core.has_ready():
            rd = core.ready()
            if rd.snapshot is not None:
                disk.snapshot, disk.snapshot_data = rd.snapshot.meta, rd.snapshot.data
                disk.entries = []
            if rd.entries:
                disk.write(rd.entries)
            if rd.hard_state is not None:
                disk.hard_state = rd.hard_state
            disk.syncs += rd.must_sync
            for msg in rd.messages:
                self.sent.append(msg)
                if frozenset((msg.src, msg.dst)) not in self.cut:
                    self.queue.append(msg)
            if rd.snapshot is not None:
                machine.restore(rd.snapshot.data)
            machine.apply(rd.committed)
            self.reads[node] += rd.read_states
            core.advance(rd)

    def tick(self, node: NodeId, times: int = 1) -> None:
        for _ in range(times):
            self.nodes[node].tick()
            self.process(node)

    def tick_all(self, times: int = 1) -> None:
        for _ in range(times):
            for node in self.nodes:
                self.tick(node)

    def step(self, msg: Message) -> None:
        self.nodes[msg.dst].step(msg)
        self.process(msg.dst)

    def take(self, pick: Filter | None = None) -> list[Message]:
        """Remove and return the queued messages `pick` selects (all by default)."""
        taken = [m for m in self.queue if pick is None or pick(m)]
        self.queue = [m for m in self.queue if not (pick is None or pick(m))]
        return taken

    def deliver(self, pick: Filter | None = None) -> int:
        """Deliver the currently queued messages `pick` selects, once; returns how many."""
        msgs = self.take(pick)
        for msg in msgs:
            if msg.dst in self.nodes and frozenset((msg.src, msg.dst)) not in self.cut:
                self.step(msg)
        return len(msgs)

    def drop(self, pick: Filter | None = None) -> int:
        return len(self.take(pick))

    def stabilize(self, limit: int = 10_000) -> None:
        """Deliver until nothing is in flight (no ticks: time stands still)."""
        for _ in range(limit):
            if not self.deliver():
                return
        raise AssertionError("messages kept flowing: livelock")

    def heartbeat(self) -> None:
        """Stabilize, then one tick on each leader and stabilize again: followers learn
        a commit from the next APPEND or heartbeat, not from an APPEND of its own."""
        self.stabilize()
        for node, core in self.nodes.items():
            if core.role == Role.LEADER:
                self.tick(node)
        self.stabilize()

    def isolate(self, node: NodeId) -> None:
        for other in self.nodes:
            if other != node:
                self.cut.add(frozenset((node, other)))

    def heal(self) -> None:
        self.cut.clear()

    # ------------------------------------------------------------------ conveniences

    def elect(self, node: NodeId) -> None:
        self.nodes[node].campaign()
        self.process(node)
        self.stabilize()
        assert self.nodes[node].role == Role.LEADER, self.nodes[node].status()

    def propose(self, node: NodeId, *payloads: bytes) -> int:
        index = self.nodes[node].propose(list(payloads))
        self.process(node)
        return index

    def change(self, node: NodeId, change: ConfChange) -> int:
        index = self.nodes[node].propose_conf_change(change)
        self.process(node)
        return index

    def run_until_leader(self, among: Iterable[NodeId] | None = None, rounds: int = 200) -> NodeId:
        """Tick the (non-cut) nodes in turn, delivering after each round, until one leads."""
        group = list(among or self.nodes)
        for _ in range(rounds):
            for node in group:
                self.tick(node)
            self.stabilize()
            leader = self.leader()
            if leader in group:
                return leader
        raise AssertionError(f"no leader among {group} within {rounds} rounds")

    def status_peers(self, node: NodeId) -> dict[NodeId, int]:
        """The leader `node`'s view of each peer's match index."""
        peers = self.nodes[node].status()["peers"]
        return {peer: info["match"] for peer, info in peers.items()}  # type: ignore[attr-defined]

    def leader(self) -> NodeId | None:
        leaders = [n for n, c in self.nodes.items() if c.role == Role.LEADER]
        return max(leaders, key=lambda n: self.nodes[n].term) if leaders else None

    def items(self, node: NodeId) -> list[bytes]:
        return self.machines[node].items


def of(kind: MessageType, src: NodeId | None = None, dst: NodeId | None = None) -> Filter:
    """A filter for messages of one type, optionally on one link."""
    return lambda m: (
        m.type == kind and (src is None or m.src == src) and (dst is None or m.dst == dst)
    )


def between(*nodes: NodeId) -> Filter:
    members = set(nodes)
    return lambda m: m.src in members and m.dst in members
