"""Durable consumer state on disk: `<stream dir>/obs/<consumer>/{meta.json,state.json,acks.log}`.

Rewriting the whole state for every loop turn of acks costs O(pending) bytes
and a rename per turn, so the state is a snapshot (`state.json`, replaced
whole: write a temporary file, rename it over the old one) plus an append-only
log of what changed since (`acks.log`). The owner appends one frame per loop
turn that changed anything: the deliveries and acks of that turn as int64
records, then the position scalars. When the log outgrows `COMPACT_BYTES` the
owner writes a fresh snapshot and the log starts over.

A kill -9 loses nothing the OS was handed: every frame is written before the
turn ends and before a confirmed ack is answered. A frame carries its length
and CRC, so a torn tail (power loss mid-append) ends the replay instead of
corrupting it. Replaying a log over a snapshot that already contains it (a
crash between the snapshot's rename and the log's truncation) yields the same
state, because every record sets or removes a value rather than adjusting one.
Whether writes are also fsynced follows the stream's `sync_interval`: with
`always` they are (`sync`, which the `Syncer` thread runs off the event loop, and inline
before a confirmed ack is answered), so acks survive a power cut too; with a
deferred interval the page cache carries them, which a process crash cannot lose.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import struct
import threading
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from queue import SimpleQueue
from typing import Any

log = logging.getLogger("jetlake.jetstream")

OBS_DIR = "obs"
META_FILE = "meta.json"
STATE_FILE = "state.json"
LOG_FILE = "acks.log"
COMPACT_BYTES = 1 << 20

# Record tags and their int64 fields (the tag included), as the consumer appends them.
DELIVERED = 1  # sseq, dseq, delivery count, ts: pending now (again), redelivered if count > 1
ACKED = 2  # sseq: no longer pending, nor counted as redelivered
GAVE_UP = 3  # sseq: no longer pending (max_deliver reached); still counted as redelivered
POSITION = 4  # dseq, sseq, adflr, asflr, last_delivered, last_acked
_WIDTH = {DELIVERED: 5, ACKED: 2, GAVE_UP: 2, POSITION: 7}
_POSITION_KEYS = ("dseq", "sseq", "adflr", "asflr", "last_delivered", "last_acked")
_FRAME = struct.Struct("<II")  # payload length, crc32 of the payload


@dataclass(frozen=True, slots=True)
class Saved:
    name: str
    config: dict[str, Any]
    created: str
    state: dict[str, Any] | None


class ConsumerStore:
    def __init__(self, folder: Path, *, fsync: bool) -> None:
        self.folder = folder
        self.fsync = fsync
        self.sync_queued = False  # waiting for the Syncer's thread
        self._fd: int | None = None
        self._log_bytes = 0

    def save_meta(self, config: dict[str, Any], created: str) -> None:
        self._replace(META_FILE, {"config": config, "created": created})

    def save_state(self, state: dict[str, Any]) -> None:
        """A full snapshot; the log restarts empty after it."""
        self._replace(STATE_FILE, state)
        fd = self._log()
        os.ftruncate(fd, 0)
        self._log_bytes = 0

    def append(self, records: Sequence[int]) -> bool:
        """One frame of records (int64, see the tags); True once it is time to compact."""
        payload = array("q", records).tobytes()
        frame = _FRAME.pack(len(payload), zlib.crc32(payload)) + payload
        os.write(self._log(), frame)
        self._log_bytes += len(frame)
        return self._log_bytes >= COMPACT_BYTES

    def sync(self) -> None:
        """Make appended frames survive a power cut (safe in a worker thread)."""
        fd = self._fd
        if fd is not None:
            with contextlib.suppress(OSError):  # closed meanwhile: close synced it
                os.fdatasync(fd)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            if self.fsync:
                os.fdatasync(fd)
            os.close(fd)

    def delete(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        shutil.rmtree(self.folder, ignore_errors=True)

    def _log(self) -> int:
        if self._fd is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / LOG_FILE
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._log_bytes = os.fstat(self._fd).st_size
        return self._fd

    def _replace(self, name: str, doc: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / (name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(json.dumps(doc, separators=(",", ":")).encode())
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, self.folder / name)
        if self.fsync:
            dir_fd = os.open(self.folder, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


class Syncer:
    """One thread that syncs consumer logs off the event loop, in the order asked.

    An executor round trip per fsync (a future, a wake-up, a callback back on the
    loop) cost tens of µs of CPU, up to 100 times a second per busy consumer; a
    queue drained by one blocked thread costs a fraction. A store waits in the
    queue at most once: what is written while its sync runs is left for the next.
    """

    def __init__(self) -> None:
        self._queue: SimpleQueue[ConsumerStore] = SimpleQueue()
        self._thread: threading.Thread | None = None

    def request(self, store: ConsumerStore) -> None:
        if store.sync_queued:
            return
        store.sync_queued = True
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="consumer-sync", daemon=True)
            self._thread.start()
        self._queue.put(store)

    def _run(self) -> None:
        while True:
            store = self._queue.get()
            store.sync_queued = False  # before the sync: later writes queue it again
            try:
                store.sync()
            except Exception:  # a bug must not silently end syncing for every consumer
                log.exception("consumer state sync failed: %s", store.folder)


SYNCER = Syncer()  # one per process: consumers of every stream share its thread


def consumers_dir(stream_folder: Path) -> Path:
    return stream_folder / OBS_DIR


def load_all(stream_folder: Path) -> list[Saved]:
    """Every consumer persisted for a stream; a folder without meta is skipped (torn create)."""
    root = consumers_dir(stream_folder)
    if not root.is_dir():
        return []
    found: list[Saved] = []
    for folder in sorted(root.iterdir()):
        meta = folder / META_FILE
        if not meta.is_file():
            continue
        doc = json.loads(meta.read_bytes())
        state_file = folder / STATE_FILE
        state = json.loads(state_file.read_bytes()) if state_file.is_file() else None
        log_file = folder / LOG_FILE
        if state is not None and log_file.is_file():
            state = replay(state, log_file.read_bytes())
        found.append(Saved(folder.name, doc["config"], doc["created"], state))
    return found


def replay(state: dict[str, Any], log: bytes) -> dict[str, Any]:
    """The snapshot with every whole frame of the log applied, in the snapshot's format."""
    pending = {int(s): (int(d), int(ts)) for s, d, ts in state["pending"]}
    redelivered = {int(s): int(n) for s, n in state["redelivered"]}
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
        i = 0
        while i < len(records):
            tag = records[i]
            seq = records[i + 1] if tag != POSITION else 0
            if tag == DELIVERED:
                pending[seq] = (records[i + 2], records[i + 4])
                if records[i + 3] > 1:
                    redelivered[seq] = records[i + 3]
            elif tag == ACKED:
                pending.pop(seq, None)
                redelivered.pop(seq, None)
            elif tag == GAVE_UP:
                pending.pop(seq, None)
            else:
                out.update(zip(_POSITION_KEYS, records[i + 1 : i + 7], strict=True))
            i += _WIDTH[tag]
    out["pending"] = [[s, d, ts] for s, (d, ts) in sorted(pending.items())]
    out["redelivered"] = [[s, n] for s, n in redelivered.items()]
    out["lps"] = [s for s in state.get("lps", []) if s >= out["sseq"]]
    return out
