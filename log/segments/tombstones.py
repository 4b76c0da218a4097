"""The per-stream delete logs: append-only files of checksummed records.

Two logs, because the lake must know *why* a message went. `tombstones.log`
holds every delete (the store's liveness) and is compacted to the live delete
set. `explicit.log` holds only what a client erased on purpose, as `Erasure`s,
and is never compacted: the compactor replays it from a byte offset to carry
them into the Delta table, while deletes by limits, max_age and rollups
(retention) stay out of it, so the lake keeps that history. A message delete
erases one seq; a purge erases every seq below its bound that its subject
filter matches, history the limits retired included, so a purged subject (a
KV key after `purge_deletes`) cannot come back in the lake from older rows.

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from consensus.durability import fsync_dir

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


@dataclass(frozen=True, slots=True)
class Erasure:
    """Rows a client erased: seqs first..last (inclusive) whose subject matches the filter."""

    first: int
    last: int
    subject_filter: str = ">"


# A record of runs: count | crc32 of the body, then `count` (first, last) pairs (any subject).
# A filtered record: FILTERED | length of the filter, crc32, then first, last, the filter.
_FILTERED = 0x8000_0000
_RUN = struct.Struct("<QQ")


def replay_explicit(
    path: Path, offset: int = 0, end: int | None = None
) -> tuple[list[Erasure], int]:
    """The erasures logged between byte offsets, and the byte length read up to: the
    compactor keeps that length as its progress in this log. Stops at a torn record."""
    data = path.read_bytes()[offset:end] if path.exists() else b""
    out: list[Erasure] = []
    good = 0
    while good + _RUNS_HEAD.size <= len(data):
        count, crc = _RUNS_HEAD.unpack_from(data, good)
        start = good + _RUNS_HEAD.size
        stop = start + (_RUN.size + count - _FILTERED if count & _FILTERED else _RUN.size * count)
        if stop > len(data) or zlib.crc32(data[start:stop]) != crc:
            break
        if count & _FILTERED:
            first, last = _RUN.unpack_from(data, start)
            text = data[start + _RUN.size : stop].decode("utf-8", "surrogateescape")
            out.append(Erasure(first, last, text))
        else:
            flat = array("Q")
            flat.frombytes(data[start:stop])
            out.extend(Erasure(a, b) for a, b in zip(flat[0::2], flat[1::2], strict=True))
        good = stop
    return out, offset + good


def _explicit_records(erasures: list[Erasure]) -> bytes:
    """Runs over every subject share one record; each filtered erasure gets its own."""
    runs = array("Q", [n for e in erasures if e.subject_filter == ">" for n in (e.first, e.last)])
    out = []
    if runs:
        body = runs.tobytes()
        out.append(_RUNS_HEAD.pack(len(runs) // 2, zlib.crc32(body)) + body)
    for e in erasures:
        if e.subject_filter != ">":
            text = e.subject_filter.encode("utf-8", "surrogateescape")
            body = _RUN.pack(e.first, e.last) + text
            out.append(_RUNS_HEAD.pack(_FILTERED | len(text), zlib.crc32(body)) + body)
    return b"".join(out)


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

    def append(self, erasures: list[Erasure]) -> None:
        self.append_raw(_explicit_records(erasures))

    def append_raw(self, records: bytes) -> None:
        """Whole records, as `append` writes them (another replica's, copied)."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            _logged, good = replay_explicit(self.path)
            if os.fstat(self._fd).st_size > good:
                log.warning("%s: torn record at byte %d; cut the tail there", self.path, good)
                os.ftruncate(self._fd, good)
        os.write(self._fd, records)

    def fileno(self) -> int | None:
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
