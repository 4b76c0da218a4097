"""Durable consumer state on disk: `<stream dir>/obs/<consumer>/{meta.json,state.json,acks.log}`.

Rewriting the whole state for every loop turn of acks costs O(pending) bytes
and a rename per turn, so the state is a snapshot (`state.json`, replaced
whole: write a temporary file, rename it over the old one) plus an append-only
log of what changed since (`acks.log`). The owner appends one frame per loop
turn that changed anything: the deliveries and acks of that turn as int64
records, then the position scalars. When the log outgrows `COMPACT_BYTES` it is
renamed aside (`acks.log.old`) and a new one started; a worker thread folds the
aside log into a fresh snapshot (replayed over the last one, or the owner's
memory as it stood at the rename), writes it durably and removes the aside
log. On a replicated stream every member compacts at about the same entry, so
the replay (20-50 ms a MiB at a high load) and its fsyncs on the event loop
stalled every server at once; on the worker they do not. A reader takes the
aside log before the snapshot: either the worker has not renamed its snapshot
in yet (the aside log completes the old one) or it has (replaying the aside log
again changes nothing, see below).

A kill -9 loses nothing the OS was handed: every frame is written before the
turn ends and before a confirmed ack is answered. A frame carries its length
and CRC, so a torn tail (power loss mid-append) ends the replay instead of
corrupting it. Replaying a log over a snapshot that already contains it (a
crash between the snapshot's rename and the log's truncation) yields the same
state, because every record sets or removes a value rather than adjusting one.
The background thread fsyncs the log within `sync_interval`
(`consensus.durability`); with `always` a confirmed ack is also synced inline
before it is answered, so it survives a power cut too.

On a replicated stream the same files are written on every member by
`log.consumers.replicated.ConsumerFiles` as the stream's log commits the
leader's ops; the runner then drives a `ReplicatedStore` (a `StateStore`
like this one) that proposes instead of writing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import struct
import zlib
from array import array
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from consensus.commits import OnCommit
from consensus.durability import SYNCER, fsync_dir, sync_delay
from log.state_file import StateFileError, read_state, set_aside, write_state

log = logging.getLogger("jetlake.consumers")

OBS_DIR = "obs"
META_FILE = "meta.json"
STATE_FILE = "state.json"
LOG_FILE = "acks.log"
ASIDE_FILE = "acks.log.old"  # a full log renamed aside, being folded into the snapshot
COMPACT_BYTES = 1 << 20
# One thread for every consumer's compactions: they are rare (a MiB of log each) and
# a queue behind one another only delays removing an aside log, never a write.
_COMPACTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="consumer-compact")

# Record tags and their int64 fields (the tag included), as the consumer appends them.
DELIVERED = 1  # sseq, dseq, delivery count, ts: pending now (again), redelivered if count > 1
ACKED = 2  # sseq: no longer pending, nor counted as redelivered
GAVE_UP = 3  # sseq: no longer pending (max_deliver reached); still counted as redelivered
POSITION = 4  # dseq, sseq, adflr, asflr, last_delivered, last_acked
RESET = 5  # sseq: nothing pending or redelivered, no last-per-subject list (CONSUMER.RESET)
WIDTH = {DELIVERED: 5, ACKED: 2, GAVE_UP: 2, POSITION: 7, RESET: 2}
_POSITION_KEYS = ("dseq", "sseq", "adflr", "asflr", "last_delivered", "last_acked")
_FRAME = struct.Struct("<II")  # payload length, crc32 of the payload


@dataclass(frozen=True, slots=True)
class Saved:
    name: str
    config: dict[str, Any]
    created: str
    state: dict[str, Any] | None


class StateStore(Protocol):
    """Where a running consumer's durable state goes: files here, or its stream's log
    (`log.consumers.replicated`); the runner drives both the same way."""

    def save_meta(self, config: dict[str, Any], created: str) -> None: ...

    def save_state(self, state: dict[str, Any]) -> None: ...

    def record(self, records: Sequence[int], snapshot: Callable[[], dict[str, Any]]) -> None:
        """One loop turn's records; `snapshot` is asked for the whole state to compact."""

    def confirm(self, done: OnCommit) -> None:
        """`done` once every record so far is as durable as a confirmed ack promises."""

    def close(self) -> None: ...

    def delete(self) -> None: ...


class ConsumerStore:
    def __init__(self, folder: Path, *, sync_interval_ns: int | None) -> None:
        self.folder = folder
        self.sync_delay = sync_delay(sync_interval_ns)  # for the background thread
        self.fsync_confirmed = sync_interval_ns is None  # `always`: before a confirmation
        self.sync_queued = False  # waiting for the Syncer's thread
        self._fd: int | None = None
        self._log_bytes = 0
        self._dir_unsynced = False  # the log was renamed aside and a new one created
        self._compacting: Future[None] | None = None

    def save_meta(self, config: dict[str, Any], created: str) -> None:
        self._replace(META_FILE, {"config": config, "created": created})

    def save_state(self, state: dict[str, Any]) -> None:
        """A full snapshot; the log restarts empty after it (a compaction under way is
        waited for first: its older snapshot must not land over this one)."""
        self.settle()
        self._replace(STATE_FILE, state)
        fd = self._log()
        os.ftruncate(fd, 0)
        self._log_bytes = 0
        (self.folder / ASIDE_FILE).unlink(missing_ok=True)  # a crashed compaction's

    def record(self, records: Sequence[int], snapshot: Callable[[], dict[str, Any]]) -> None:
        """Append one turn's frame, compacting when the log is long.

        Written now (a kill -9 keeps it); fsynced by the background thread within
        sync_interval, one fsync serving many turns. Confirmed acks sync at once."""
        self.record_payload(array("q", records).tobytes(), snapshot)

    def record_payload(self, payload: bytes, snapshot: Callable[[], dict[str, Any]] | None) -> None:
        """`record` of a turn already packed (a replicated RECORDS op's payload).
        `snapshot`: the whole state after this turn, asked on this thread when the log
        is compacted; None: the worker replays the log over the files' snapshot (a
        member with no consumer in memory)."""
        if self.append_payload(payload):
            self._compact(snapshot)
        SYNCER.request(self, self.sync_delay)

    def confirm(self, done: OnCommit) -> None:
        if self.fsync_confirmed:
            self.sync()
        done(None)

    def append(self, records: Sequence[int]) -> bool:
        """One frame of records (int64, see the tags); True once it is time to compact."""
        return self.append_payload(array("q", records).tobytes())

    def append_payload(self, payload: bytes) -> bool:
        """`append` of records already packed as native int64."""
        frame = _FRAME.pack(len(payload), zlib.crc32(payload)) + payload
        os.write(self._log(), frame)
        self._log_bytes += len(frame)
        return self._log_bytes >= COMPACT_BYTES

    def sync(self) -> None:
        """Make appended frames survive a power cut (safe in a worker thread)."""
        if self._dir_unsynced:  # the new log's name, and the old one's move aside
            self._dir_unsynced = False
            with contextlib.suppress(FileNotFoundError):  # deleted meanwhile
                fsync_dir(self.folder)
        fd = self._fd
        if fd is not None:
            with contextlib.suppress(OSError):  # closed meanwhile: close synced it
                os.fdatasync(fd)

    def settle(self) -> None:
        """Wait for a compaction under way (before the files are replaced or read whole)."""
        job, self._compacting = self._compacting, None
        if job is not None:
            with contextlib.suppress(Exception):  # reported by the job; the files stay whole
                job.result()

    def __str__(self) -> str:
        return f"consumer state {self.folder}"

    def close(self) -> None:
        self.settle()
        fd, self._fd = self._fd, None
        if fd is not None:
            os.fdatasync(fd)
            os.close(fd)

    def delete(self) -> None:
        self.settle()
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        shutil.rmtree(self.folder, ignore_errors=True)

    def _compact(self, snapshot: Callable[[], dict[str, Any]] | None) -> None:
        """Rename the full log aside, start a new one, and fold the aside log into the
        snapshot on the worker. While a compaction is under way (or an aside log is
        left by a crash, which the worker folds in first) the log keeps growing."""
        if self._compacting is not None and not self._compacting.done():
            return
        self.settle()
        aside = self.folder / ASIDE_FILE
        state = snapshot() if snapshot is not None else None
        full: int | None = None  # the aside log's descriptor, for the worker to sync
        if not aside.exists():
            full, self._fd = self._log(), None
            if self.fsync_confirmed:  # a confirmation syncs the new log only
                os.fdatasync(full)
            os.rename(self.folder / LOG_FILE, aside)
            self._dir_unsynced = True
            self._log()
        elif state is not None:  # the memory holds more than the aside log: fold it later
            state = None
        self._compacting = _COMPACTOR.submit(_fold, self.folder, state, full)

    def _log(self) -> int:
        if self._fd is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / LOG_FILE
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._log_bytes = os.fstat(self._fd).st_size
        return self._fd

    def _replace(self, name: str, doc: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_state(self.folder / name, doc)


def _fold(folder: Path, state: dict[str, Any] | None, full: int | None) -> None:
    """On the worker: the aside log synced (its descriptor `full`, when it was just
    renamed aside; the Syncer now syncs the new one) and closed, then the snapshot
    replaced durably by `state` (the memory at the rename) or by the aside log replayed
    over it, then the aside log removed. A failure leaves both files, which every
    reader replays."""
    aside = folder / ASIDE_FILE
    try:
        if full is not None:
            try:
                os.fdatasync(full)
            finally:
                os.close(full)
        if state is None:
            state = replay(_read_state(folder), aside.read_bytes())
        write_state(folder / STATE_FILE, state)
        aside.unlink()  # if a power cut undoes this, replaying it again changes nothing
    except Exception:
        log.exception("consumer state %s: compaction failed; its log is kept", folder)
        raise


def consumers_dir(stream_folder: Path) -> Path:
    return stream_folder / OBS_DIR


def load_all(stream_folder: Path) -> list[Saved]:
    """Every consumer persisted for a stream; a folder without meta is skipped (torn create).

    Damage is reported and set aside, never raised: the other consumers start. A
    consumer whose meta is damaged is lost here (a replicated stream's log or
    snapshot rebuilds it before this is read); one whose state is damaged starts
    over from its deliver policy, so messages may come again but none is lost."""
    root = consumers_dir(stream_folder)
    if not root.is_dir():
        return []
    found: list[Saved] = []
    for folder in sorted(root.iterdir()):
        try:
            doc = read_meta(folder)
        except StateFileError as err:
            log.error("consumer %s not recovered, its config is lost: %s", folder.name, err)
            set_aside(err.path)
            continue
        if doc is None:
            continue
        try:
            state = load_state(folder)
        except StateFileError as err:
            log.error(
                "consumer %s: %s; its acks and deliveries are lost: it starts over from its "
                "deliver policy (messages may be delivered again)",
                folder.name,
                err,
            )
            set_aside(err.path)
            (folder / LOG_FILE).unlink(missing_ok=True)  # changes to a state no longer there
            (folder / ASIDE_FILE).unlink(missing_ok=True)
            state = None
        found.append(Saved(folder.name, doc["config"], doc["created"], state))
    return found


def read_meta(folder: Path) -> dict[str, Any] | None:
    """{"config", "created"} of a consumer folder; None without meta (torn create);
    `StateFileError` when damaged."""
    path = folder / META_FILE
    try:
        doc = read_state(path)
    except FileNotFoundError:
        return None
    if not isinstance(doc, dict) or not {"config", "created"} <= doc.keys():
        raise StateFileError(path, 0, "not a consumer's config")
    return doc


def load_state(folder: Path) -> dict[str, Any] | None:
    """A consumer's snapshot with its logs replayed over it (None: no snapshot yet);
    `StateFileError` when the snapshot is damaged. The aside log is read before the
    snapshot, which a compaction may replace meanwhile (see the module's docstring)."""
    try:
        aside = (folder / ASIDE_FILE).read_bytes()
    except FileNotFoundError:
        aside = b""
    try:
        state = _read_state(folder)
    except FileNotFoundError:
        return None
    log_file = folder / LOG_FILE
    path = folder / STATE_FILE
    try:
        state = replay(state, aside) if aside else state
        return replay(state, log_file.read_bytes()) if log_file.is_file() else state
    except (KeyError, TypeError, ValueError) as exc:
        raise StateFileError(path, 0, f"not a consumer's state: {exc!r}") from None


def _read_state(folder: Path) -> dict[str, Any]:
    path = folder / STATE_FILE
    state = read_state(path)
    if not isinstance(state, dict):
        raise StateFileError(path, 0, "not a consumer's state")
    return state


def replay(state: dict[str, Any], log: bytes) -> dict[str, Any]:
    """The snapshot with every whole frame of the log applied, in the snapshot's format."""
    pending = {int(s): (int(d), int(ts)) for s, d, ts in state["pending"]}
    redelivered = {int(s): int(n) for s, n in state["redelivered"]}
    lps = state.get("lps", [])
    out = dict(state)
    pos = 0
    while pos + _FRAME.size <= len(log):
        size, crc = _FRAME.unpack_from(log, pos)
        payload = log[pos + _FRAME.size : pos + _FRAME.size + size]
        if len(payload) < size or zlib.crc32(payload) != crc or size % 8:
            break  # a torn tail: what follows was never whole
        pos += _FRAME.size + size
        records = array("q")
        records.frombytes(payload)
        for tag, i, stop in record_runs(records):
            if tag == DELIVERED:
                seqs, counts = records[i + 1 : stop : 5], records[i + 3 : stop : 5]
                at = zip(records[i + 2 : stop : 5], records[i + 4 : stop : 5], strict=True)
                pending.update(zip(seqs, at, strict=True))
                if max(counts) > 1:
                    redelivered.update((s, n) for s, n in zip(seqs, counts, strict=True) if n > 1)
            elif tag == ACKED:
                for seq in records[i + 1 : stop : 2]:
                    pending.pop(seq, None)
                    redelivered.pop(seq, None)
            elif tag == GAVE_UP:
                for seq in records[i + 1 : stop : 2]:
                    pending.pop(seq, None)
            elif tag == RESET:
                pending.clear()
                redelivered.clear()
                lps, out["lps_resume"] = [], 0
            else:  # the last position of the run is the one that stands
                out.update(zip(_POSITION_KEYS, records[stop - 6 : stop], strict=True))
    out["pending"] = [[s, d, ts] for s, (d, ts) in sorted(pending.items())]
    out["redelivered"] = [[s, n] for s, n in redelivered.items()]
    out["lps"] = [s for s in lps if s >= out["sseq"]]
    return out


def record_runs(records: Sequence[int]) -> Iterator[tuple[int, int, int]]:
    """(tag, start, stop) of each run of consecutive records with one tag, in order.

    A turn's frame is hundreds of deliveries or acks in a row, and every member reads
    every frame (and replays it again at compaction): a run's length is found by
    counting tags in slices, in C, instead of a Python step per record. ValueError
    names an unknown tag or a record cut short by its index."""
    i, n = 0, len(records)
    while i < n:
        tag = records[i]
        width = WIDTH.get(tag)
        if width is None:
            raise ValueError(f"unknown record tag {tag} at {i}")
        whole = (n - i) // width
        if whole == 0:
            raise ValueError(f"record at {i} cut short")
        good = 1  # records [i, i + good * width) all carry `tag`
        if records[i : i + whole * width : width].count(tag) == whole:
            good = whole
        else:  # the first other tag lies in [good, bad): halve the interval
            bad = whole
            while bad - good > 1:
                mid = (good + bad) // 2
                if records[i + good * width : i + mid * width : width].count(tag) == mid - good:
                    good = mid
                else:
                    bad = mid
        stop = i + good * width
        yield tag, i, stop
        i = stop
