"""The per-stream delete log: an append-only file of checksummed records.

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
from pathlib import Path

log = logging.getLogger("jetlake.segments")

# count of seqs, crc32 of everything after this field, floor, last seq, last ts
_HEAD = struct.Struct("<IIQQq")
_COMPACT_MIN_BYTES = 64 * 1024


def _record(floor: int, last: int, last_ts: int, seqs: array) -> bytes:
    body = struct.pack("<QQq", floor, last, last_ts) + seqs.tobytes()
    return struct.pack("<II", len(seqs), zlib.crc32(body)) + body


def replay(path: Path) -> tuple[int, int, int, array, int]:
    """(floor, last seq, last ts, deleted seqs above the floor, good byte length).

    Side-effect free, so readers outside the server (inspect, the lake) use it too.
    """
    floor, last, last_ts = 1, 0, 0
    seqs: set[int] = set()
    data = path.read_bytes() if path.exists() else b""
    off = 0
    while off + _HEAD.size <= len(data):
        n, crc, rec_floor, last_rec, ts_rec = _HEAD.unpack_from(data, off)
        end = off + _HEAD.size + 8 * n
        if end > len(data) or zlib.crc32(data[off + 8 : end]) != crc:
            break
        chunk = array("Q")
        chunk.frombytes(data[off + _HEAD.size : end])
        seqs.update(chunk)
        floor, last, last_ts = max(floor, rec_floor), last_rec, ts_rec
        off = end
    return floor, last, last_ts, array("Q", sorted(s for s in seqs if s >= floor)), off


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


def fsync_dir(path: Path) -> None:
    """Make creations and renames in a directory durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
