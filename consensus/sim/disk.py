"""An in-memory model of a node's durable Raft log, with the faults real disks have.

Like `consensus.log_store`, the log is a file of checksummed entry records in
index order: an entry whose index is already present truncates the file there
first. A snapshot (the app's own, or one installed from the leader) is durable
the moment it is written and the entries it covers are dropped (all of them,
for an installed one). Hard state lives apart, in two checksummed copies.
What a fault loses follows from that layout:

- kill -9: the OS already holds every written byte, so nothing is lost;
- power loss: the synced prefix survives, plus some prefix of the unsynced
  records (the OS may have flushed part of them), the last of which may be torn;
  a truncation not yet synced counts as unsynced; the hard state falls back to
  its last synced value;
- a bit flip: one stored entry stops matching its checksum.

Recovery replays the records up to the first damaged one and truncates the file
there. When it cut anything it sets `Restored.vote_floor` to the highest index
the file says the node had written, because the node may have acknowledged
entries it no longer holds; so it does when the hard state's commit index is
past the log's end (as `consensus.wal_recovery` does). The floor stays on disk
until the log reaches it, so a second restart does not forget it.

Under a sync window a power loss also leaves a reboot hold (as
`consensus.log_store` does when the boot id changed under an open log): the
node may have acknowledged entries a clean truncation took without a trace, so
recovery hands out `Restored.reboot_term`, kept until the node says the core
let go of it (`release_hold`, as the driver does). The entries each power loss
or damage took are kept until then, so the simulator can tell which losses a
majority held back at once explains.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from enum import Enum

from consensus.types import Entry, HardState, Restored, Snapshot


class RecordKind(Enum):
    ENTRY = "entry"
    INSTALL = "install"  # a snapshot from the leader: the log restarts after it
    COMPACT = "compact"  # the app's own snapshot: entries up to it are dropped


@dataclass(slots=True)
class _Record:
    kind: RecordKind
    index: int  # what the record's header says: the entry's or the snapshot's index
    entry: Entry | None = None
    snapshot: Snapshot | None = None
    damaged: bool = False  # the checksum no longer matches


@dataclass(slots=True)
class _LogView:
    """The log as replaying the records yields it."""

    snapshot: Snapshot | None = None
    entries: list[Entry] | None = None

    def __post_init__(self) -> None:
        if self.entries is None:
            self.entries = []

    @property
    def first_index(self) -> int:
        return (self.snapshot.meta.index if self.snapshot else 0) + 1

    def apply(self, record: _Record) -> None:
        assert self.entries is not None
        if record.kind is RecordKind.ENTRY:
            assert record.entry is not None
            keep = record.entry.index - self.first_index
            if keep < 0 or keep > len(self.entries):
                raise SimDiskError(f"entry {record.entry.index} does not extend the log")
            del self.entries[keep:]
            self.entries.append(record.entry)
        elif record.kind is RecordKind.INSTALL:
            self.snapshot = record.snapshot
            self.entries = []
        else:
            drop = record.index - self.first_index + 1
            self.snapshot = record.snapshot
            del self.entries[: max(drop, 0)]


class SimDiskError(Exception):
    """The caller wrote something the log's contract forbids (a gap in the log)."""


class SimDisk:
    """One node's log file and hard-state copies; `sync_window` 0 means fsync on every Ready."""

    def __init__(self, node: str, sync_window: int) -> None:
        self.node = node
        self.sync_window = sync_window
        self._records: list[_Record] = []
        self._synced = 0  # records [0, _synced) are on the platter
        self._hard_state = HardState()  # both copies hold this (what the OS has)
        self._hard_state_synced = HardState()
        # The vote floor is kept (durably, beside the hard state) until the log reaches
        # it: a second restart before that must not forget what the first one found.
        self._floor = 0
        self._rebooted = False  # lost power under a window; recovery turns it into a hold
        self._reboot_term = 0
        self.lost: set[tuple[int, int]] = set()  # (index, term) lost since last whole
        self.view = _LogView()

    # -- the Ready contract ------------------------------------------------------

    def install(self, snapshot: Snapshot) -> None:
        record = _Record(RecordKind.INSTALL, snapshot.meta.index, snapshot=snapshot)
        self.view.apply(record)
        self._records = [record]
        self._synced = 1

    def compact(self, snapshot: Snapshot) -> None:
        record = _Record(RecordKind.COMPACT, snapshot.meta.index, snapshot=snapshot)
        self.view.apply(record)
        kept = [
            (pos < self._synced, r)
            for pos, r in enumerate(self._records)
            if r.kind is RecordKind.ENTRY and r.index > record.index
        ]
        self._records = [record, *(r for _, r in kept)]
        self._synced = 1 + sum(synced for synced, _ in kept)

    def append(self, entries: list[Entry]) -> None:
        for entry in entries:
            record = _Record(RecordKind.ENTRY, entry.index, entry=entry)
            self.view.apply(record)
            cut = len(self._records)
            if self._records and self._records[-1].index >= entry.index:  # a conflict
                cut = next(
                    (
                        pos
                        for pos, r in enumerate(self._records)
                        if r.kind is RecordKind.ENTRY and r.index >= entry.index
                    ),
                    cut,
                )
            del self._records[cut:]
            self._synced = min(self._synced, cut)
            self._records.append(record)
            if self._floor and entry.index >= self._floor:
                self._floor = 0  # a leader refilled the log: the floor's record goes too

    def write_hard_state(self, hard_state: HardState) -> None:
        self._hard_state = hard_state

    def sync(self) -> None:
        self._synced = len(self._records)
        self._hard_state_synced = self._hard_state

    @property
    def synced_hard_state(self) -> HardState:
        return self._hard_state_synced

    @property
    def synced_index(self) -> int:
        """The last index a power loss cannot take (the synced records reach it)."""
        return self._records[self._synced - 1].index if self._synced else 0

    # -- what the checker reads --------------------------------------------------

    @property
    def hard_state(self) -> HardState:
        return self._hard_state

    @property
    def last_index(self) -> int:
        assert self.view.entries is not None
        return self.view.first_index - 1 + len(self.view.entries)

    def term_at(self, index: int) -> int | None:
        """The term of the entry at `index` (the snapshot's at its index); None if absent."""
        assert self.view.entries is not None
        snap = self.view.snapshot
        if snap is not None and index == snap.meta.index:
            return snap.meta.term
        if index == 0:
            return 0
        pos = index - self.view.first_index
        if 0 <= pos < len(self.view.entries):
            return self.view.entries[pos].term
        return None

    # -- faults ------------------------------------------------------------------

    def power_loss(self, rng: random.Random, torn: bool) -> list[Entry]:
        """Keep the synced prefix and a random part of the rest; maybe tear the last kept write.

        Returns the entries lost (a torn one included).
        """
        keep = rng.randint(self._synced, len(self._records))
        tear = torn and keep > self._synced
        first_lost = keep - 1 if tear else keep
        lost = [r.entry for r in self._records[first_lost:] if r.entry is not None]
        del self._records[keep:]
        if tear:
            self._records[-1].damaged = True
        self._hard_state = self._hard_state_synced
        if self.sync_window:  # under `always` nothing acknowledged was unsynced
            self._rebooted = True
            self.lost.update((e.index, e.term) for e in lost)
        return lost

    @property
    def power_held(self) -> bool:
        """Lost power under a window, and the core has not let go of the hold since."""
        return self._rebooted or self._reboot_term > 0

    def release_hold(self) -> None:
        """The node is held back no more (its log is whole again)."""
        self._reboot_term = 0
        self.lost.clear()

    def flip(self, rng: random.Random) -> int | None:
        """Damage one stored entry (returns its index), or one hard-state copy (None): the
        node reads the other copy back, so that flip changes nothing it recovers."""
        entries = [r for r in self._records if r.kind is RecordKind.ENTRY and not r.damaged]
        if not entries or rng.random() < 0.2:
            return None
        record = rng.choice(entries)
        record.damaged = True
        return record.index

    def recover(self) -> tuple[Restored, Snapshot | None]:
        """What a restarting node reads back (the view is rebuilt from the records)."""
        view = _LogView()
        for pos, record in enumerate(self._records):
            if record.damaged:
                self._floor = max(self._floor, self._records[-1].index)
                self.lost.update(
                    (r.entry.index, r.entry.term) for r in self._records[pos:] if r.entry
                )
                del self._records[pos:]
                self._synced = min(self._synced, pos)
                break
            view.apply(record)
        self.view = view
        hs = self._hard_state
        if hs.commit > self.last_index:  # committed entries were lost: so says the real log
            self._floor = max(self._floor, hs.commit)
            hs = replace(hs, commit=self.last_index)
        if self._rebooted:
            last_term = self.term_at(self.last_index) or 0
            self._reboot_term = max(self._reboot_term, hs.term, last_term)
            self._rebooted = False
        restored = Restored(
            hard_state=hs,
            snapshot=view.snapshot.meta if view.snapshot else None,
            entries=tuple(view.entries or ()),
            vote_floor=self._floor,
            reboot_term=self._reboot_term,
        )
        return restored, view.snapshot
