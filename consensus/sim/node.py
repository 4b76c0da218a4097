"""One simulated server: a RaftCore, its disk model and its state machine.

The node carries out each Ready exactly as the contract orders (persist, sync,
send, apply, advance) and can be killed between any two of those steps, which
is where real implementations lose acknowledged writes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import Enum

from consensus.core import TRANSFER_CONTEXT, Config, RaftCore
from consensus.sim.app import StateMachine, value_ok
from consensus.sim.disk import SimDisk
from consensus.sim.invariants import Checker
from consensus.sim.network import SimNetwork
from consensus.types import (
    EntryKind,
    Message,
    MessageType,
    NodeId,
    Ready,
    Role,
    Snapshot,
    SnapshotMeta,
)


class Step(Enum):
    """The parts of carrying out a Ready, in the order the contract requires."""

    PERSIST = "persist"
    SEND = "send"
    APPLY = "apply"


# Readies drained in a row before the core counts as stuck (it owes one per input at most).
READY_LIMIT = 100

# A mutation test reorders this (acknowledging before persisting) to prove the checker notices.
READY_ORDER = (Step.PERSIST, Step.SEND, Step.APPLY)


@dataclass(slots=True)
class PendingRead:
    before: set[bytes]  # values acknowledged when the read began
    index: int | None = None  # set once the core handed out its ReadState


@dataclass(slots=True)
class SimNode:
    id: NodeId
    disk: SimDisk
    rate: float  # ticks per simulated tick: clocks drift
    seed: int
    net: SimNetwork
    checker: Checker
    snapshot_every: int  # applied entries between the app's snapshots; 0: never
    limits: tuple[int, int]  # the core's max_append_entries and max_inflight
    core: RaftCore | None = None
    sm: StateMachine = field(default_factory=StateMachine)
    proposed: set[bytes] = field(default_factory=set)  # by clients, this process lifetime
    reads: dict[bytes, PendingRead] = field(default_factory=dict)
    snapshot_index: int = 0
    floor: int = 0  # the vote floor it restarted with, until its log reaches it
    damaged: bool = False  # its disk has damage the next restart will find
    crash_after: int | None = None  # kill -9 part way through the next Ready
    # For the lease check: this process's ticks, when it last heard its leader (and
    # that leader's term), and who asked for a vote the lease must refuse.
    ticks: int = 0
    heard: tuple[int, int] | None = None
    leased: NodeId | None = None
    election_ticks: int = 0
    restarts: int = 0
    installed: int = 0  # snapshots received from a leader
    _clock: float = 0.0
    # Ticks held back while the core said they only advance counters (`idle_ticks`),
    # handed over before its next input, as the driver does for an idle group.
    held: int = 0
    # On seeds with bit 16 set, a hard state that only moved the commit is written on the first
    # Ready after each tick, as the driver writes it (`RaftNode._write`): a crash leaves
    # the commit on disk behind the one the node had.
    commit_due: bool = True

    @property
    def up(self) -> bool:
        return self.core is not None

    @property
    def leader(self) -> bool:
        return self.core is not None and self.core.role is Role.LEADER

    def start(self, bootstrap: tuple[NodeId, ...]) -> None:
        """Start (or restart) from what the disk recovers, as a real process would."""
        restored, snapshot = self.disk.recover()
        self.sm = StateMachine.restore(snapshot) if snapshot else StateMachine()
        self.snapshot_index = self.sm.index
        self.floor = restored.vote_floor
        self.damaged = False
        batch, inflight = self.limits
        config = Config(
            id=self.id,
            seed=self.seed * 7919 + self.restarts,
            max_append_entries=batch,
            max_inflight=inflight,
            lazy_commit=bool(self.seed & 1),  # either way, mixed in one cluster
            # so are quiet heartbeats, two heartbeats or three to an election timeout
            quiet_heartbeat_ticks=(5 if self.seed & 4 else 3) if self.seed & 2 else 0,
            # followers past a quorum's batched, on half the nodes: the seed's parity,
            # independent of each bit above
            spare_batch=3 if self.seed.bit_count() & 1 else 0,
        )
        self.restarts += 1
        self.core = RaftCore(config, bootstrap, restored)
        self.core.align_clock(self.ticks)  # as the driver does, to its timer's count
        self.election_ticks = config.election_ticks
        self.heard = None
        if snapshot is not None:
            meta = snapshot.meta
            self.checker.on_apply(self.id, meta.index, meta.term, self.sm.digest)
            self.core.compact(snapshot)  # the core keeps the bytes to send to laggards
        self.handle_ready()

    def stop(self) -> None:
        """The process dies: memory (the core, the state machine, pending work) is gone."""
        self.core = None
        self.held = 0
        self.crash_after = None
        self.proposed.clear()
        self.reads.clear()

    def tick(self) -> None:
        assert self.core is not None
        self._clock += self.rate
        while self._clock >= 1.0:
            self._clock -= 1.0
            self.ticks += 1
            self.commit_due = True
            if self.held < self.core.idle_ticks():
                self.held += 1
                continue
            self.catch_up()
            self.core.tick()

    def catch_up(self) -> None:
        """Hand the core the ticks held back; each must change nothing it would report."""
        core = self.core
        assert core is not None
        for _ in range(self.held):
            core.tick()
            if core.has_ready():
                self.checker.fail(f"{self.id}: a tick held back as idle had work to report")
        self.held = 0

    def deliver(self, msg: Message) -> None:
        core = self.core
        assert core is not None
        self.leased = None
        self.catch_up()
        if msg.type in (MessageType.VOTE, MessageType.PRE_VOTE) and self.heard is not None:
            at, term = self.heard
            if (
                msg.term > core.term == term
                and core.leader is not None
                and self.ticks - at < self.election_ticks
                and msg.context != TRANSFER_CONTEXT
            ):
                self.leased = msg.src  # check-quorum's lease: this request must be ignored
        ready = core.in_order(msg) if self.seed & 32 else None
        if ready is not None:  # on half the seeds, as the driver takes a plain APPEND or answer
            if not self._carry_out(ready):
                return
            self._maybe_compact()
        elif not (self.seed & 8 and self._quiet(core, msg)):
            core.step(msg)
        from_leader = msg.type in (MessageType.APPEND, MessageType.HEARTBEAT, MessageType.SNAPSHOT)
        if from_leader and core.leader == msg.src and core.term == msg.term:
            self.heard = (self.ticks, msg.term)
        self.handle_ready()

    def _quiet(self, core: RaftCore, msg: Message) -> bool:
        """A plain heartbeat or answer taken by the core's quiet path where it takes it, as
        the driver does for the routes' beats (`RaftNode._beat`), on half the seeds."""
        if msg.context or msg.dst != self.id:
            return False
        if msg.type == MessageType.HEARTBEAT_RESP:
            return core.quiet_answer(msg.src, msg.term, msg.index)
        if msg.type != MessageType.HEARTBEAT:
            return False
        index = core.quiet_heartbeat(msg.src, msg.term, msg.commit)
        if index is None:
            return False
        answer = Message(MessageType.HEARTBEAT_RESP, self.id, msg.src, msg.term, index=index)
        self.checker.on_send(self.id, answer, self.disk, self.floor)
        self.net.send(answer, self.checker.now)
        return True

    def _check_lease(self, msg: Message) -> None:
        """Check-quorum's other half: a follower that heard its leader within an election
        timeout grants no (pre-)vote for a later term, except to a transfer's candidate."""
        granted = msg.type in (MessageType.VOTE_RESP, MessageType.PRE_VOTE_RESP) and not msg.reject
        if granted and msg.dst == self.leased:
            self.checker.fail(
                f"lease: {self.id} granted {msg.dst} a {msg.type.name} for term {msg.term} "
                "while hearing from its leader"
            )

    def handle_ready(self) -> None:
        """Drain the core's Ready; a pending `crash_after` k kills it after k steps of one."""
        for _ in range(READY_LIMIT):
            if self.core is None or not self.core.has_ready():
                break
            io = self.core.needs_io()
            rd = self.core.ready()
            if not io and (
                rd.hard_state or rd.entries or rd.snapshot or rd.committed or rd.read_states
            ):
                # the driver sends such a Ready from its transport's callback, unpersisted
                self.checker.fail(f"{self.id}: a Ready said to need no I/O holds {rd}")
            if not self._carry_out(rd):
                return
            self.core.advance(rd)
            self._maybe_compact()
        else:
            self.checker.fail(f"{self.id}: the core still has a Ready after {READY_LIMIT} in a row")
        if self.floor and self.core is not None and self.core.last_index >= self.floor:
            self.floor = 0
        whole = self.core is not None and not self.core.held_back
        if whole and (self.disk.power_held or self.disk.lost):
            self.disk.release_hold()  # as the driver does: a restart may vote again

    def _carry_out(self, rd: Ready) -> bool:
        """Persist, send and apply in `READY_ORDER`; False if `crash_after` killed it."""
        for done, step in enumerate(READY_ORDER):
            if done == self.crash_after:
                self.crash_after = None
                self.stop()
                return False
            if step is Step.PERSIST:
                self._persist(rd)
            elif step is Step.SEND:
                # By destination (stable): the core may walk its peers in set order,
                # which varies with PYTHONHASHSEED; a seed must replay in any process.
                for msg in sorted(rd.messages, key=lambda m: m.dst):
                    self.checker.on_send(self.id, msg, self.disk, self.floor)
                    self._check_lease(msg)
                    self.net.send(msg, self.checker.now)
            else:
                self._apply(rd)
        return True

    def _persist(self, rd: Ready) -> None:
        checker = self.checker
        if rd.snapshot is not None:
            self.disk.install(rd.snapshot)
        if rd.entries:
            checker.on_write(self.id, self.disk, rd.entries)
            self.disk.append(rd.entries)
        if rd.hard_state is not None and (not self.seed & 16 or rd.must_sync or self.commit_due):
            self.disk.write_hard_state(rd.hard_state)
            self.commit_due = False
        if self.disk.sync_window == 0 or rd.must_sync:
            self.disk.sync()

    def _apply(self, rd: Ready) -> None:
        checker = self.checker
        if rd.snapshot is not None:
            self.installed += 1
            self.sm = StateMachine.restore(rd.snapshot)
            self.snapshot_index = self.sm.index
            meta = rd.snapshot.meta
            checker.on_apply(self.id, meta.index, meta.term, self.sm.digest)
        for entry in rd.committed:
            if entry.index != self.sm.index + 1:
                checker.fail(
                    f"{self.id} was handed entry {entry.index} to apply after {self.sm.index}"
                )
            if entry.kind is EntryKind.NORMAL and not value_ok(entry.data):
                checker.fail(f"{self.id} applied damaged entry {entry.index}: {entry.data!r}")
            self.sm.apply(entry)
            checker.on_apply(self.id, entry.index, entry.term, self.sm.digest)
            if entry.data in self.proposed:
                self.proposed.discard(entry.data)
                checker.on_ack(entry.data, entry.index, entry.term)
        for rs in rd.read_states:
            read = self.reads.get(rs.context)
            if read is not None:
                read.index = rs.index
        for ctx, read in list(self.reads.items()):
            if read.index is not None and self.sm.index >= read.index:
                del self.reads[ctx]
                checker.on_read(self.id, read.index, self.sm.values, read.before)

    def _maybe_compact(self) -> None:
        """The app snapshots its state every `snapshot_every` applied entries."""
        assert self.core is not None
        every = self.snapshot_every
        if not every or self.sm.index - self.snapshot_index < every:
            return
        term = self.disk.term_at(self.sm.index)
        assert term is not None, f"{self.id} applied {self.sm.index} but its log lacks it"
        meta = SnapshotMeta(self.sm.index, term, self.core.conf)
        snapshot = Snapshot(meta, self.sm.encode())
        self.core.compact(snapshot)
        self.disk.compact(snapshot)
        self.snapshot_index = self.sm.index


def drift(rng: random.Random) -> float:
    return rng.uniform(0.85, 1.15)
