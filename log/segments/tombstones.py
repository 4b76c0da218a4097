"""The per-stream delete logs: append-only files of checksummed records.

Two logs, because the lake must know *why* a message went. `tombstones.log`
holds every delete (the store's liveness) and is compacted to the live delete
set. `explicit.log` holds only what a client deleted on purpose (message
delete, purge), as seq runs, and is never compacted: the compactor replays it
from a byte offset to carry those deletes into the Delta table, while deletes
by limits, max_age and rollups (retention) stay out of it, so the lake keeps
that history.

Segments are immutable once written, so deletes live beside them. Every
record carries the whole small state (floor = first live seq, last seq, last
ts) plus the interior seqs deleted by one operation; replaying is "take the
newest floor, union the seqs above it". `last_seq` is here because a full
purge may leave no segment to say where numbering stopped, and sequences must
never repeat. Records are written with the appends' group commit (fsynced by
`sync()`); the log is rewritten as one record when it has grown well past the
live delete set.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path

log = logging.getLogger("jetlake.segments")

# count of seqs, crc32 of everything after this field, floor, last seq, last ts
_HEAD = struct.Struct("<IIQQq")
_COMPACT_MIN_BYTES = 64 * 1024


_RUNS_HEAD = struct.Struct("<II")  # count of runs, crc32 of the runs


def _record(floor: int, last: int, last_ts: int, seqs: array) -> bytes:
    body = struct.pack("<QQq", floor, last, last_ts) + seqs.tobytes()
    return struct.pack("<II", len(seqs), zlib.crc32(body)) + body


def _frames(data: bytes, head: struct.Struct, item_size: int) -> Iterator[tuple[tuple, int, int]]:
    """(head fields, body start, end) of each whole record whose crc matches; stops at the first
    torn or bad one. Every record is `count, crc32(rest), fixed fields..., count items`."""
    off = 0
    while off + head.size <= len(data):
        fields = head.unpack_from(data, off)
        end = off + head.size + item_size * fields[0]
        if end > len(data) or zlib.crc32(data[off + 8 : end]) != fields[1]:
            return
        yield fields, off + head.size, end
        off = end


def replay(path: Path) -> tuple[int, int, int, array, int]:
    """(floor, last seq, last ts, deleted seqs above the floor, good byte length).

    Side-effect free, so readers outside the server (inspect, the lake) use it too.
    """
    floor, last, last_ts = 1, 0, 0
    seqs: set[int] = set()
    data = path.read_bytes() if path.exists() else b""
    off = 0
    for (_n, _crc, rec_floor, last_rec, ts_rec), start, end in _frames(data, _HEAD, 8):
        chunk = array("Q")
        chunk.frombytes(data[start:end])
        seqs.update(chunk)
        floor, last, last_ts = max(floor, rec_floor), last_rec, ts_rec
        off = end
    return floor, last, last_ts, array("Q", sorted(s for s in seqs if s >= floor)), off


def replay_explicit(
    path: Path, offset: int = 0, end: int | None = None
) -> tuple[list[tuple[int, int]], int]:
    """Runs (first, last seq, inclusive) of explicit deletes between byte offsets, and the
    byte length read up to: the compactor keeps that length as its progress in this log."""
    data = path.read_bytes()[offset:end] if path.exists() else b""
    runs: list[tuple[int, int]] = []
    good = 0
    for _fields, start, good in _frames(data, _RUNS_HEAD, 16):
        flat = array("Q")
        flat.frombytes(data[start:good])
        runs.extend(zip(flat[0::2], flat[1::2], strict=True))
    return runs, offset + good


def seq_runs(seqs: Iterable[int]) -> list[tuple[int, int]]:
    """Ascending seqs as inclusive (first, last) runs: a purge of a million is one run."""
    runs: list[tuple[int, int]] = []
    for seq in seqs:
        if runs and runs[-1][1] + 1 == seq:
            runs[-1] = (runs[-1][0], seq)
        else:
            runs.append((seq, seq))
    return runs


class Tombstones:
    """Replayed at open; torn tails (a crash mid-record) are cut and logged."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.floor, self.last, self.last_ts, self.seqs, good = replay(path)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        if os.fstat(self._fd).st_size > good:
            log.warning("%s: torn delete record at byte %d; cut the tail there", path, good)
            os.ftruncate(self._fd, good)
        self.size = good

    def fileno(self) -> int:
        return self._fd

    def append(self, floor: int, last: int, last_ts: int, seqs: array) -> None:
        rec = _record(floor, last, last_ts, seqs)
        os.write(self._fd, rec)
        self.size += len(rec)

    def wants_rewrite(self, live_deletes: int) -> bool:
        return self.size > max(_COMPACT_MIN_BYTES, 4 * (_HEAD.size + 8 * live_deletes))

    def rewrite(self, floor: int, last: int, last_ts: int, seqs: array) -> None:
        """Replace the log by one record, atomically (temp file, fsync, rename)."""
        rec = _record(floor, last, last_ts, seqs)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, rec)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        self.size = len(rec)

    def close(self) -> None:
        os.close(self._fd)


class ExplicitDeletes:
    """The append-only log of deletes a client asked for; opened lazily, on the first one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def append(self, runs: list[tuple[int, int]]) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            _runs, good = replay_explicit(self.path)
            if os.fstat(self._fd).st_size > good:
                log.warning("%s: torn record at byte %d; cut the tail there", self.path, good)
                os.ftruncate(self._fd, good)
        flat = array("Q", [seq for run in runs for seq in run])
        body = flat.tobytes()
        os.write(self._fd, _RUNS_HEAD.pack(len(runs), zlib.crc32(body)) + body)

    def fileno(self) -> int | None:
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def fsync_dir(path: Path) -> None:
    """Make creations and renames in a directory durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
