"""Raft's safety properties, checked by the simulator after every step.

The checker keeps a global record of what every node ever wrote, applied and
acknowledged, so a property broken for a moment is caught at that moment, not
only if the final state happens to show it. Each violation names the property,
the node and the index, which with the seed is enough to replay it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from consensus.sim.disk import SimDisk
from consensus.types import Entry, Message, MessageType, NodeId


class Violation(AssertionError):
    """A safety or liveness property failed; the message says which, where and when."""


class WindowLoss(Exception):
    """An acknowledged entry was lost where the promise allows it: a majority of the
    voters were held back at once (lost power under a sync window, or found a damaged
    disk, and had not caught up since), and the entry was among what they lost. The
    run's history has forked, so it ends here."""


@dataclass(slots=True)
class Ack:
    """A client was told its value committed."""

    index: int
    term: int
    tick: int


@dataclass(slots=True)
class Checker:
    now: int = 0
    leaders: dict[int, NodeId] = field(default_factory=dict)  # term -> its one leader
    # (index, term) -> (kind, data, previous entry's term): equal keys must agree,
    # which by induction over the index is the log matching property.
    written: dict[tuple[int, int], tuple[int, bytes, int]] = field(default_factory=dict)
    applied: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # index -> term, digest
    acked: dict[bytes, Ack] = field(default_factory=dict)
    reads_checked: int = 0
    # Entries (index, term) that power losses (under a sync window) or damage took
    # from nodes that were, at some moment, a majority held back at once. Losing one
    # of those is allowed; nothing else is (held nodes that stay a minority, however
    # many in a row, lose nothing).
    lost_by_majority: set[tuple[int, int]] = field(default_factory=set)
    _complete: set[int] = field(default_factory=set)  # terms whose leader was checked

    def fail(self, what: str, lost: list[tuple[int, int]] | None = None) -> None:
        """Raise a Violation, or WindowLoss if every entry `lost` is one the promise allows."""
        if lost and all(key in self.lost_by_majority for key in lost):
            raise WindowLoss(f"tick {self.now}: {what}")
        raise Violation(f"tick {self.now}: {what}")

    def on_write(self, node: NodeId, disk: SimDisk, entries: list[Entry]) -> None:
        """Log matching, checked on every entry any node writes (before it is written)."""
        prev = disk.term_at(entries[0].index - 1)
        if prev is None:
            self.fail(f"{node} wrote entry {entries[0].index} after a gap in its log")
        for entry in entries:
            key = (entry.index, entry.term)
            value = (int(entry.kind), entry.data, prev)
            seen = self.written.setdefault(key, value)
            if seen != value:
                self.fail(
                    f"log matching: {node} wrote entry {entry.index} of term {entry.term} "
                    f"as {value}, another node had {seen}"
                )
            prev = entry.term

    def on_send(self, node: NodeId, msg: Message, disk: SimDisk, floor: int) -> None:
        """Persist before send, checked on the message itself as it leaves."""
        granted = msg.type is MessageType.VOTE_RESP and not msg.reject
        if granted:
            hs = disk.synced_hard_state
            if hs.term < msg.term or (hs.term == msg.term and hs.vote != msg.dst):
                self.fail(
                    f"{node} granted its vote in term {msg.term} to {msg.dst} before it was "
                    f"synced (synced hard state: term {hs.term}, vote {hs.vote})"
                )
        if msg.type is MessageType.APPEND_RESP and not msg.reject:
            durable = disk.synced_index if disk.sync_window == 0 else disk.last_index
            if msg.index > durable:
                self.fail(
                    f"{node} acknowledged entries up to {msg.index} to {msg.dst} with only "
                    f"{durable} persisted"
                )
        ballot = granted or msg.type is MessageType.VOTE
        if floor and ballot and not msg.held and disk.last_index < floor:
            self.fail(
                f"{node} voted or campaigned ({msg.type.name} to {msg.dst}, term {msg.term}) "
                f"below its vote floor {floor} (its log ends at {disk.last_index}) "
                "without saying it is held"
            )

    def on_apply(self, node: NodeId, index: int, term: int, digest: bytes) -> None:
        """State machine safety: every node's state at an index is the same state."""
        seen = self.applied.setdefault(index, (term, digest))
        if seen[1] != digest:
            self.fail(
                f"state machine safety: {node} applied a different entry at index {index}",
                [(index, seen[0])],
            )

    def on_leader(self, node: NodeId, term: int, disk: SimDisk) -> None:
        """One leader per term; a new leader holds every entry applied anywhere before it won."""
        other = self.leaders.setdefault(term, node)
        if other != node:
            self.fail(f"two leaders in term {term}: {other} and {node}")
        if other is node and term not in self._complete:
            self._complete.add(term)
            top = max(self.applied, default=0)
            snap = disk.view.snapshot
            if top == 0 or (snap is not None and top <= snap.meta.index):
                return
            if disk.term_at(top) != self.applied[top][0]:
                self.fail(
                    f"leader completeness: {node} leads term {term} without entry {top}, "
                    f"applied before it won (its log ends at {disk.last_index})",
                    [(top, self.applied[top][0])],
                )

    def on_ack(self, value: bytes, index: int, term: int) -> None:
        self.acked.setdefault(value, Ack(index, term, self.now))

    def on_read(self, node: NodeId, index: int, values: set[bytes], before: set[bytes]) -> None:
        """Linearizability: a read sees every write acknowledged before it began."""
        self.reads_checked += 1
        missing = before - values
        if missing:
            self.fail(
                f"stale read on {node} at index {index}: misses acknowledged {sorted(missing)[:3]}"
            )
