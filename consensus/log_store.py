"""The durable log of one Raft group: entries, hard state and snapshots in a directory.

Layout of the group's directory:
    <first index, 20 digits>.wal   entry frames (wal_format), rolled at `max_file_bytes`
    hardstate                       two checksummed slots, written alternately
    <index, 20 digits>.snap         snapshots: the newest, and the one before it
    hold                            the vote floor and reboot term while recovery's
                                    hold on voting lasts, so a second restart keeps it
    running                         the boot id while the log is open (gone after a
                                    clean close), and whether acknowledgements
                                    run ahead of fsync (a sync window)

A leftover `running` from another boot means the machine went down under the
open log (consensus.power_loss): under a sync window it may have acknowledged
entries that did not survive, and a clean truncation leaves no trace of them,
so recovery hands out `Restored.reboot_term` (the highest term the log knew)
and the node is held until its log holds an entry of a later term. A leftover
record of this boot is a kill -9: the page cache kept every write, nothing is
held. A clean close syncs everything first, so it leaves no record.

This WAL is separate from the stream's Arrow segments: a replicated message is
written twice, here and (once committed) into its segment. The lead chose two
writes for now; the WAL is kept lean so the second write stays cheap: one
write(2) per `append` call whatever the batch size, no user-space buffer, no
per-entry index on disk (positions are rebuilt by the scan at open), fsync
only in `sync()`. Measured on the 2-core dev VM (tests/consensus/bench_log_store.py,
128-byte entries, other jobs running): 3-10 µs an append of one entry and
50-130 µs of 64 (~1 µs an entry is Python framing) without fsync; with an fsync
after each append, 0.2-3 ms (the disk's), i.e. batching is what buys throughput.

Compaction drops whole files, never rewrites one: `save_snapshot` unlinks the
files wholly at or below the *previous* snapshot's index. One older snapshot
and the log since it stay on disk, so a newest snapshot found damaged at open
falls back to the older one and the entries after it; the price is up to two
snapshot intervals of log on disk. Damage among those older entries costs
nothing: recovery skips to the entry after the snapshot (wal_recovery).

Threading rule: every call but `sync()` comes one at a time, from any thread
(the driver appends on its event loop, and runs `save_snapshot` and `close`
in a worker thread while the loop waits); `sync()` may run at any moment on
another thread (the process's `SYNCER`, or an executor), even after `close`.
`_lock` guards only what the two sides share: which descriptors are
unsynced (the active file, files rolled or truncated since the last sync,
the hard-state file), whether the directory changed, and the written/synced
counters. Writes themselves run outside it: `sync` fsyncs descriptors it
took under the lock (duplicated, or handed over by a roll), so a roll, a
truncation or `close` never pulls a descriptor from under an fsync in
flight. A failed fsync fails the store for good: the kernel may have
dropped the pages, and a later fsync that succeeds proves nothing about
them (every call then raises the first error).

Accounting for the driver: `last_index` is what was handed to the OS (a kill
-9 keeps it); `synced_index` is what a finished `sync` covered (a power cut
keeps it); `needs_sync` says whether anything (entries, hard state, a file
created or dropped) was written since the last sync began.
"""

from __future__ import annotations

import contextlib
import os
import threading
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from consensus.power_loss import SyncRecorder, boot_id
from consensus.types import Entry, HardState, Restored, Snapshot
from consensus.wal_format import (
    FRAME_OVERHEAD,
    SLOT_SIZE,
    decode_snapshot,
    encode_frames,
    encode_slot,
    encode_snapshot,
    read_head,
)
from consensus.wal_recovery import (
    HARD_STATE,
    SNAP_SUFFIX,
    LogStoreError,
    WalFile,
    fsync_dir,
    numbered,
    recover,
    replace_durably,
    replace_unsynced,
    snap_path,
    wal_path,
    write_all,
)

# Compaction's grain. A full file of 128-byte entries takes ~1.5 s to scan at open;
# only the files since the older kept snapshot are scanned.
MAX_FILE_BYTES = 64 * 1024 * 1024


HOLD = "hold"
RUNNING = "running"


class LogStore:
    """Open with `LogStore.open(path, name=...)`; see the module docstring for the rules."""

    def __init__(
        self, directory: Path, name: str, max_file_bytes: int, recovered_files: list[WalFile]
    ) -> None:
        self.dir = directory
        self.name = name
        self.max_file_bytes = max_file_bytes
        self.sync_queued = False  # the Syncer's flag (consensus.durability.Syncable)
        self._files = recovered_files
        self._lock = threading.Lock()
        self._fd: int | None = None  # the active (last) file's, opened on the first append
        self._unsynced: list[int] = []  # descriptors of rolled or truncated files, owned here
        self._hs_fd = os.open(directory / HARD_STATE, os.O_RDWR)
        self._hs_seq = 0
        self._hs = HardState()  # the newest term and vote written, in both slots
        self.held = False  # see `_hold`
        self._hs_dirty = False
        self._dir_dirty = False
        self._snap_index = 0
        self._snapshot: Path | None = None
        self._last = 0
        self._synced = 0
        self._epoch = 0  # bumped by a truncation: a sync begun before it covers nothing after
        self._closed = False
        self._failed: LogStoreError | None = None  # an fsync failed: nothing is trusted after
        self._recorder = SyncRecorder.from_env()  # tests' power-loss stand-in (power_loss)

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        name: str,
        max_file_bytes: int = MAX_FILE_BYTES,
        acks_unsynced: bool = True,
    ) -> tuple[LogStore, Restored]:
        """Recover the group's log (repairing a torn or damaged tail, see wal_recovery).

        `acks_unsynced`: this run acknowledges entries before they are fsynced (a sync
        window); False under `always`, where a power loss cannot take an acknowledged
        entry, so a reboot under this run's log will not hold the node back.
        """
        got = recover(Path(path), name)
        store = cls(Path(path), name, max_file_bytes, got.files)
        store._hs_seq = got.hs_seq
        store._hs = got.restored.hard_state
        store._snapshot = got.snapshot
        store._snap_index = got.restored.snapshot.index if got.restored.snapshot else 0
        store._last = store._synced = got.last
        if not got.new:
            store._make_recovered_durable()
        restored = store._hold(got.restored, store._lost_power())
        # "-": no boot id to read, so no later open can tell a kill -9 from a power loss
        record = f"{boot_id() or '-'} {int(acks_unsynced)}\n".encode()
        if got.new:
            store._start_lazily(record)
        else:
            replace_durably(store.dir / RUNNING, record)
        return store, restored

    def _make_recovered_durable(self) -> None:
        """Both slots get the recovered state (one may be damaged or older), so the vote
        it holds survives a flip in either from here on (see set_hard_state); and what a
        kill -9 left may be in the page cache only: make it what `synced` says."""
        self._write_slot(self._hs)
        os.fdatasync(self._hs_fd)
        self._write_slot(self._hs)
        for f in self._files:
            fd = os.open(f.path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        os.fdatasync(self._hs_fd)
        self._hs_dirty = False
        self._record_synced(hard_state=True)

    def _start_lazily(self, record: bytes) -> None:
        """A new log's hard state and `running` record, made durable by its first `sync`
        instead of now: a new group opens without an fsync (six before).

        Nothing can be said on them before that sync: the log starts at term 0, every
        message a node sends carries its term, and the first term change is fsynced
        (`Ready.must_sync`) before the message that follows it leaves. Until then a
        power loss can only take a log that said nothing, and the next open finds it
        new again (wal_recovery: a hard state missing or short, with no log).
        """
        path = self.dir / RUNNING
        replace_unsynced(path, record)
        fd = os.open(path, os.O_RDONLY)
        with self._lock:
            self._unsynced.append(fd)  # sync fsyncs and closes it, with the directory
            self._hs_dirty = self._dir_dirty = True
        self._record_synced(hard_state=False)  # power-loss tests: no WAL file is durable yet

    # -- what the driver reads -------------------------------------------------------

    @property
    def last_index(self) -> int:
        return self._last

    @property
    def synced_index(self) -> int:
        return self._synced

    @property
    def needs_sync(self) -> bool:
        return (
            self._synced < self._last or self._hs_dirty or self._dir_dirty or bool(self._unsynced)
        )

    def load_snapshot(self) -> Snapshot | None:
        """The newest snapshot with its data (read and verified again)."""
        if self._snapshot is None:
            return None
        snap = decode_snapshot(self._snapshot.read_bytes())
        if snap is None:
            raise LogStoreError(f"raft log {self.name}: snapshot {self._snapshot} is damaged")
        return snap

    # -- writes (the owner's thread) ---------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Write contiguous entries in one write(2); an index already stored replaces it
        and everything after it."""
        if not entries:
            return
        self._check_open()
        first = entries[0].index
        if entries[-1].index != first + len(entries) - 1:
            raise LogStoreError(f"raft log {self.name}: entries {first}.. are not contiguous")
        if first != self._last + 1:
            self._truncate(first)
        active = self._active(first)
        before = len(active.starts)
        data = encode_frames(entries, active.size, active.starts)
        assert self._fd is not None
        try:
            write_all(self._fd, data)
        except OSError as err:  # e.g. disk full: leave the file as it was, whole frames only
            del active.starts[before:]
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, active.size)
            raise LogStoreError(f"raft log {self.name}: writing {active.path}: {err}") from err
        active.size += len(data)
        self._last = entries[-1].index

    def set_hard_state(self, hs: HardState) -> None:
        """Overwrite the older slot: a torn write leaves the newer one intact.

        A new term or vote goes into both slots, the first fsynced before the
        second is written: once the vote is sent (after the caller's sync) each
        slot holds it, so a later bit flip in either cannot make the node forget
        the vote and grant a second one in the same term. Votes are rare; a
        commit-only change takes the cheap single write.
        """
        self._check_open()
        self._write_slot(hs)
        if (hs.term, hs.vote) != (self._hs.term, self._hs.vote):
            os.fdatasync(self._hs_fd)
            self._record_synced(hard_state=True)
            self._write_slot(hs)
        self._hs = hs

    def _lost_power(self) -> bool:
        """The previous run's log was open, under a sync window, when its machine went
        down (its `running` record names another boot)."""
        path = self.dir / RUNNING
        if not path.exists():
            return False  # a clean close, or a log that never ran
        words = path.read_bytes().split()
        if len(words) != 2 or words[1] not in (b"0", b"1"):
            return True  # replace_durably never leaves a torn one: a flipped one
        return words[1] == b"1" and words[0].decode(errors="replace") != boot_id()

    def _hold(self, restored: Restored, lost_power: bool) -> Restored:
        """Merge the hold a previous run left with this recovery's, and keep it on disk:
        the scan past damage that found a floor cannot find it again once the log was
        cut, and nothing at all shows what a power loss took."""
        path = self.dir / HOLD
        floor, reboot_term = restored.vote_floor, 0
        if lost_power:
            entries = restored.entries
            last_term = entries[-1].term if entries else 0
            snap_term = restored.snapshot.term if restored.snapshot else 0
            reboot_term = max(restored.hard_state.term, last_term, snap_term)
        if path.exists():
            try:
                old_floor, old_term = (int(word) for word in path.read_text().split())
                floor, reboot_term = max(floor, old_floor), max(reboot_term, old_term)
            except ValueError:  # replace_durably never leaves a torn one: a flipped one
                floor = max(floor, self._last + 1)
                reboot_term = max(reboot_term, restored.hard_state.term)
        # A floor the log already reaches holds nothing: it has all it ever acknowledged.
        self.held = floor > self._last or reboot_term > 0
        if self.held:
            replace_durably(path, f"{floor} {reboot_term}\n".encode())
        elif path.exists():
            path.unlink()
        return replace(restored, vote_floor=floor, reboot_term=reboot_term)

    def release_hold(self) -> None:
        """The core caught up (`RaftCore.held_back` is False): a restart may vote again."""
        self._check_open()
        (self.dir / HOLD).unlink(missing_ok=True)
        fsync_dir(self.dir)
        self.held = False

    def _write_slot(self, hs: HardState) -> None:
        seq = self._hs_seq + 1
        os.pwrite(self._hs_fd, encode_slot(seq, hs), (seq % 2) * SLOT_SIZE)
        self._hs_seq = seq
        self._hs_dirty = True

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Store it durably, then compact (see the module docstring).

        The log keeps the entries after the snapshot if it holds the snapshot's
        index with its term (the state machine's own snapshot, or a leader's
        that matches); otherwise (a leader's snapshot past or against this log)
        the whole log goes and the next append starts at index + 1.
        """
        self._check_open()
        meta = snapshot.meta
        if meta.index < self._snap_index:
            raise LogStoreError(
                f"raft log {self.name}: snapshot at {meta.index} is older than {self._snap_index}"
            )
        path = snap_path(self.dir, meta.index)
        replace_durably(path, encode_snapshot(snapshot))
        keeps_log = meta.index <= self._last and self._term_at(meta.index) == meta.term
        older = [i for i, _ in numbered(self.dir, SNAP_SUFFIX) if i < meta.index]
        previous = older[-1] if older else 0
        for i in older[:-1]:
            snap_path(self.dir, i).unlink()
        self._snapshot, self._snap_index = path, meta.index
        if keeps_log:
            self._drop_files_through(previous)
        else:
            self._drop_files_through(self._last)
            with self._lock:
                self._epoch += 1
                self._last = self._synced = meta.index  # durable: the snapshot is

    # -- durability (any thread) -------------------------------------------------------

    def sync(self) -> None:
        """fsync what was written before the call: entries, hard state, directory changes."""
        with self._lock:
            if self._closed:
                return
            if self._failed is not None:
                raise self._failed
            # Read before the descriptors: the owner opens a file before writing to it and
            # writes before it moves `_last`, so every index up to `written` is in one of them.
            written, epoch = self._last, self._epoch
            fds, self._unsynced = self._unsynced, []
            if self._fd is not None:
                fds.append(os.dup(self._fd))
            hs_dirty, self._hs_dirty = self._hs_dirty, False
            if hs_dirty:
                fds.append(os.dup(self._hs_fd))
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            record = self._synced_view(hs_dirty) if self._recorder else None
        try:
            for fd in fds:
                os.fdatasync(fd)
            if dir_dirty:
                fsync_dir(self.dir)
        except OSError as err:
            # After a failed fsync the kernel may have dropped the dirty pages: a retry
            # could "succeed" over lost writes, so the store refuses everything from now on.
            self._failed = LogStoreError(f"raft log {self.name}: fsync in {self.dir}: {err}")
            raise self._failed from err
        finally:
            for fd in fds:
                os.close(fd)
        with self._lock:
            if epoch == self._epoch:
                self._synced = max(self._synced, written)
        if self._recorder is not None and record is not None:
            self._recorder.record(self.dir, *record)

    def __str__(self) -> str:
        return f"raft log {self.name} ({self.dir})"

    def close(self) -> None:
        """Sync and release the files; a second call does nothing. After a clean sync
        the `running` record goes: the next open knows nothing unsynced was lost."""
        if self._closed:
            return
        try:
            if self._failed is None:
                self.sync()
                (self.dir / RUNNING).unlink(missing_ok=True)
                fsync_dir(self.dir)
        finally:
            with self._lock:  # a queued background sync sees the store open or closed, never half
                self._closed = True
                for fd in self._unsynced:
                    os.close(fd)
                self._unsynced = []
                if self._fd is not None:
                    os.close(self._fd)
                    self._fd = None
                os.close(self._hs_fd)

    # -- internals ---------------------------------------------------------------------

    def _synced_view(self, hard_state: bool) -> tuple[dict[str, int], bytes | None]:
        """For JETLAKE_SYNC_RECORD (under `_lock`, before the fsync): every WAL file's
        length, which covers at least what the sync covers, and the hard-state bytes."""
        wal = {f.path.name: f.size for f in self._files}
        hs = os.pread(self._hs_fd, 2 * SLOT_SIZE, 0) if hard_state else None
        return wal, hs

    def _record_synced(self, hard_state: bool) -> None:
        if self._recorder is not None:
            with self._lock:
                view = self._synced_view(hard_state)
            self._recorder.record(self.dir, *view)

    def _check_open(self) -> None:
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise LogStoreError(f"raft log {self.name} is closed")

    def _active(self, first: int) -> WalFile:
        """The file to append entries from `first` on: the last one, or a new one when it is
        full (a file that holds no entry yet is never full)."""
        files = self._files
        if files:
            cur = files[-1]
            assert cur.last + 1 == first, f"{cur.path} ends at {cur.last}, appending {first}"
            if cur.size < self.max_file_bytes or not cur.starts:
                if self._fd is None:
                    self._fd = os.open(cur.path, os.O_WRONLY | os.O_APPEND)
                return cur
        path = wal_path(self.dir, first)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        fresh = WalFile(path, first, array("Q"), 0)
        with self._lock:
            if self._fd is not None:
                self._unsynced.append(self._fd)  # sync fsyncs and closes it
            self._fd = fd
            files.append(fresh)
            self._dir_dirty = True
        return fresh

    def _truncate(self, index: int) -> None:
        """Drop entries from `index` on: later files are unlinked newest first, so a
        crash midway leaves a shorter but contiguous log, then the file holding
        `index` is cut at its frame."""
        if not self._snap_index < index <= self._last:
            raise LogStoreError(
                f"raft log {self.name}: cannot write index {index} after {self._last} "
                f"(snapshot at {self._snap_index})"
            )
        files = self._files
        k = bisect_right([f.first for f in files], index) - 1
        target = files[k]
        with self._lock:
            self._epoch += 1
            self._last = index - 1
            self._synced = min(self._synced, index - 1)
            if k < len(files) - 1:
                if self._fd is not None:
                    os.close(self._fd)
                    self._fd = None
                for f in reversed(files[k + 1 :]):
                    f.path.unlink()
                del files[k + 1 :]
                self._dir_dirty = True
            if self._fd is None:
                self._fd = os.open(target.path, os.O_WRONLY | os.O_APPEND)
            pos = index - target.first
            target.size = target.starts[pos]
            del target.starts[pos:]
            os.ftruncate(self._fd, target.size)

    def _term_at(self, index: int) -> int | None:
        files = self._files
        k = bisect_right([f.first for f in files], index) - 1
        if k < 0 or index > files[k].last:
            return None
        with open(files[k].path, "rb") as f:
            raw = os.pread(f.fileno(), FRAME_OVERHEAD, files[k].starts[index - files[k].first])
        head = read_head(raw, 0)
        if head is None or head.index != index:
            raise LogStoreError(
                f"raft log {self.name}: entry {index} in {files[k].path} is damaged"
            )
        return head.term

    def _drop_files_through(self, index: int) -> None:
        """Unlink the files whose entries all lie at or below `index` (an empty file too)."""
        files = self._files
        drop = 0
        while drop < len(files) and files[drop].last <= index:
            drop += 1
        if not drop:
            return
        with self._lock:
            if drop == len(files) and self._fd is not None:
                os.close(self._fd)
                self._fd = None
            for f in files[:drop]:
                f.path.unlink()
            del files[:drop]
            self._dir_dirty = True
