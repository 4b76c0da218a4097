"""Read-only access to a stream folder for tools outside the server process.

`jetlake inspect`, the compactor and the lake's union read use these while a
server may be appending: nothing here writes, locks or repairs. The active
segment is read up to its last whole, verified batch; deletes are applied from
the delete log so every reader agrees with the server on what exists.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from log.segments.api import CorruptSegmentError
from log.segments.filestore import TOMBSTONES
from log.segments.schema import SCHEMA, SEQ, u64
from log.segments.segment import discover, read_batches, read_entries, segment_paths
from log.segments.tombstones import replay

log = logging.getLogger("jetlake.segments")

_ATTEMPTS = 3  # a reclaim may swap a file between listing and reading it


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    stream: str
    path: Path
    first_seq: int
    last_seq: int
    rows: int
    bytes: int
    sealed: bool


def list_segments(stream_dir: str | os.PathLike[str], *, after_seq: int = 0) -> list[SegmentInfo]:
    """Segments from their index entries alone (cheap: no batch is read or verified).

    With `after_seq`, segments whose successor starts at or below after_seq + 1 (so
    every seq they hold is <= after_seq) are skipped unread: the compactor polls
    streams of thousands of small sealed segments.
    """
    directory = Path(stream_dir)
    out = []
    for base, arrows, idx, sealed in _segments_after(directory, after_seq):
        try:
            entries = read_entries(idx)
            size = arrows.stat().st_size
        except FileNotFoundError:
            continue
        out.append(
            SegmentInfo(
                stream=directory.name,
                path=arrows,
                first_seq=entries[0][2] if entries else base,
                last_seq=entries[-1][3] if entries else base - 1,
                rows=sum(e[4] for e in entries),
                bytes=size,
                sealed=sealed,
            )
        )
    return out


def read_table(
    stream_dir: str | os.PathLike[str],
    *,
    include_deleted: bool = False,
    skip_corrupt: bool = False,
    after_seq: int = 0,
) -> pa.Table:
    """Every message in the folder as one table with the segment schema, in seq order.

    A corrupt sealed segment raises `CorruptSegmentError` unless `skip_corrupt`
    (then it is logged and left out): a silent hole would look like deletes.
    With `after_seq`, segments holding only seqs <= after_seq are not read (the
    lake has them); rows <= after_seq from a segment that straddles it remain.
    """
    directory = Path(stream_dir)
    for attempt in range(_ATTEMPTS):
        try:
            table = _read_all(directory, skip_corrupt=skip_corrupt, after_seq=after_seq)
            break
        except FileNotFoundError:
            if attempt == _ATTEMPTS - 1:
                raise
    if include_deleted:
        return table
    floor, _last, _ts, deleted, _good = replay(directory / TOMBSTONES)
    mask = pc.greater_equal(table.column(SEQ), floor)
    if deleted:
        mask = pc.and_(mask, pc.invert(pc.is_in(table.column(SEQ), value_set=u64(deleted))))
    return table.filter(mask)


def read_segment(info: SegmentInfo) -> pa.Table:
    """One sealed segment's rows, verified (deleted rows included: callers decide)."""
    idx = info.path.with_suffix(".idx")
    _entries, batches, good, problem = read_batches(info.path, idx)
    if problem:
        raise CorruptSegmentError(f"{info.path}: {problem} at byte {good}")
    return pa.Table.from_batches(batches, SCHEMA)


def _segments_after(directory: Path, after_seq: int) -> Iterator[tuple[int, Path, Path, bool]]:
    """Each segment's first seq, files (arrows, index) and whether it is sealed (any
    but the last), in seq order; one holding only seqs <= after_seq (its successor
    starts at or below after_seq + 1) is skipped unread."""
    found = discover(directory, clean=False)
    for k, (base, gen) in enumerate(found):
        if k + 1 < len(found) and found[k + 1][0] <= after_seq + 1:
            continue
        arrows, idx = segment_paths(directory, base, gen)
        yield base, arrows, idx, k < len(found) - 1


def _read_all(directory: Path, *, skip_corrupt: bool, after_seq: int) -> pa.Table:
    batches: list[pa.RecordBatch] = []
    for _base, arrows, idx, sealed in _segments_after(directory, after_seq):
        _entries, got, good, problem = read_batches(arrows, idx)
        if problem and sealed:
            err = CorruptSegmentError(f"{arrows}: {problem} at byte {good}")
            if not skip_corrupt:
                raise err
            log.error("%s; left out", err)
            continue
        batches.extend(got)
    return pa.Table.from_batches(batches, SCHEMA)
