"""One segment: an Arrow IPC stream file plus a sidecar index of checksummed batch entries.

Layout in a stream folder:
    <first seq, 20 digits>.<generation>.arrows   IPC stream: schema, then one batch per append
    <first seq, 20 digits>.<generation>.idx      one 56-byte entry per batch (below)

Why a sidecar rather than batch custom_metadata: a checksum must cover the
exact bytes on disk, flatbuffer header included, and a message cannot carry the
checksum of itself. The entry (offset, length, first/last seq, rows, min/max
ts, crc32 of the message bytes, crc32 of the entry) also gives random access
and the seq range of every batch without decoding anything.

The file stays an IPC *stream* when sealed (no rewrite into the file format):
with the sidecar we already have random access, the file is valid after every
whole batch, and sealing costs one fsync instead of a copy. Segments are
immutable once sealed; space reclaim writes generation g+1 beside g, renames
both into place and only then unlinks g, so a crash leaves one complete pair.

A merge (filestore.py) rewrites a run of adjacent sealed segments as one: it is
named after the run's first base with a generation above every absorbed one,
and it is durable under its final names before any old file is unlinked. A
crash in between leaves old segments whose bases lie inside the merged one's
range; `discover` drops them (see there), so every seq is read exactly once.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from consensus.durability import fsync_dir
from log.segments.api import CorruptSegmentError, Overhead
from log.segments.ipc import decode_batch
from log.segments.reads import BatchRef
from log.segments.rebuild import Keys, keys_of
from log.segments.schema import SCHEMA, TS, seq_view, stream_header
from log.segments.summary import SUFFIX as SUMMARY
from log.segments.summary import identity, read_summary

log = logging.getLogger("jetlake.segments")

HEADER = stream_header()
_ENTRY = struct.Struct("<QIQQIqqI")
_ENTRY_SIZE = _ENTRY.size + 4
SUFFIX = ".arrows"
_IDX = ".idx"
_LIST_ATTEMPTS = 5  # listings racing a live rewrite or merge in the server


class SegRef(BatchRef):
    __slots__ = ("crc", "length", "offset", "seg")

    def __init__(
        self,
        seg: Segment,
        offset: int,
        length: int,
        crc: int,
        first: int,
        last: int,
        rows: int,
        max_ts: int,
    ) -> None:
        super().__init__(first, last, rows, max_ts)
        self.seg = seg
        self.offset = offset
        self.length = length
        self.crc = crc


def segment_paths(directory: Path, base: int, gen: int) -> tuple[Path, Path]:
    stem = f"{base:020d}.{gen}"
    return directory / f"{stem}{SUFFIX}", directory / f"{stem}{_IDX}"


def summary_path(arrows: Path) -> Path:
    """The segment's key-column summary (`summary.py`), beside its data file."""
    return arrows.with_suffix(SUMMARY)


def discover(directory: Path, *, clean: bool) -> list[tuple[int, int]]:
    """(base, generation) of every complete segment, ascending, each seq in one of them.

    Leftovers of an interrupted rewrite or merge are left out: temp files, an
    older generation, a newer one missing its pair, and a segment whose base is
    at or below the last seq of the kept segment before it. Only a merge makes
    such an overlap (its output is durable before the old files go), and the
    merged one is always the earlier base: it took the run's first base and a
    generation above every absorbed one, so the later, lower-generation files
    are the old copies. The merged one's index tells where it ends; it is read
    only where the generation drops from one file to the next (every old copy
    is such a drop), a handful of small reads in a folder of merged segments,
    so the compactor's frequent listing stays cheap. Old rows past that index's
    last seq were all deleted before the merge (deletes are fsynced first), so
    keeping such a file loses nothing and duplicates nothing; a merge drops it.

    With `clean` (the server's open) the leftovers are removed. Readers in
    other processes list while the server rewrites or merges: a file that
    vanishes between listing and reading its index means a newer state
    exists, so the folder is listed again.
    """
    for _ in range(_LIST_ATTEMPTS - 1):
        try:
            return _discover(directory, clean=clean)
        except FileNotFoundError:
            continue
    return _discover(directory, clean=clean)


def _discover(directory: Path, *, clean: bool) -> list[tuple[int, int]]:
    names = {p.name for p in directory.iterdir()} if directory.exists() else set()
    best: dict[int, int] = {}
    for name in names:
        parts = name.split(".")
        if len(parts) == 3 and "." + parts[2] == SUFFIX and parts[0].isdigit():
            base, gen = int(parts[0]), int(parts[1])
            if f"{parts[0]}.{parts[1]}{_IDX}" in names and gen >= best.get(base, -1):
                best[base] = gen
    found: list[tuple[int, int]] = []
    covered: int | None = None  # last seq of found[-1]'s index, read when first needed
    for base, gen in sorted(best.items()):
        if found and gen < found[-1][1]:
            if covered is None:
                entries = read_entries(segment_paths(directory, *found[-1])[1])
                covered = entries[-1][3] if entries else found[-1][0] - 1
            if base <= covered:
                continue  # an old copy of rows the merged segment before it holds
        found.append((base, gen))
        covered = None
    if clean:
        keep = {p.name for b, g in found for p in segment_paths(directory, b, g)}
        keep |= {summary_path(segment_paths(directory, b, g)[0]).name for b, g in found}
        gone = [
            n
            for n in names
            if n.endswith((SUFFIX, _IDX, SUMMARY, ".tmp")) and n not in keep and n[0].isdigit()
        ]
        for name in gone:
            (directory / name).unlink()
        if gone:
            # Durable before anything new is written: once a reclaim has shrunk the merged
            # segment, an old copy a crash brought back could lie past its end and be kept
            # (harmless, its rows are all deleted, but a stray file).
            fsync_dir(directory)
    return found


def _write_all(fd: int, data: bytes) -> None:
    """One `write` is the rule for a regular file; a view of the rest only after a short one
    (every replicated publish writes twice here, on every member)."""
    written = os.write(fd, data)
    if written < len(data):
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]


class Segment:
    """An open segment; only the newest one of a stream is appended to."""

    def __init__(self, arrows: Path, idx: Path, base: int, gen: int, size: int) -> None:
        self.path = arrows
        self.idx_path = idx
        self.base = base
        self.gen = gen
        self.size = size
        self.refs: list[SegRef] = []
        self.rows = 0
        self.min_ts = 0  # of its first batch: the age that seals it
        # The highest seq its index recorded before a tail cut (0: no cut). Those
        # seqs were acknowledged once; numbering must never hand them out again.
        self.cut_last = 0
        self._fd: int | None = os.open(arrows, os.O_RDWR | os.O_APPEND)
        self._idx_fd: int | None = os.open(idx, os.O_RDWR | os.O_APPEND)

    @classmethod
    def create(cls, directory: Path, base: int) -> Segment:
        """A new empty segment; its directory entry is the caller's to make durable
        (a roll fsyncs it at once, a new store with its first sync)."""
        arrows, idx = segment_paths(directory, base, 0)
        with open(arrows, "wb") as f:
            f.write(HEADER)
        idx.touch()
        return cls(arrows, idx, base, 0, len(HEADER))

    @property
    def batches(self) -> int:
        return len(self.refs)

    def fds(self) -> tuple[int, int]:
        assert self._fd is not None and self._idx_fd is not None, f"{self.path} is sealed"
        return self._fd, self._idx_fd

    def append(
        self, payload: bytes, first: int, last: int, rows: int, min_ts: int, max_ts: int
    ) -> SegRef:
        """Write a batch's IPC message, then its entry: an entry never points past written bytes."""
        crc = zlib.crc32(payload)
        size = len(payload)
        entry = _ENTRY.pack(self.size, size, first, last, rows, min_ts, max_ts, crc)
        fd, idx_fd = self.fds()
        _write_all(fd, payload)
        _write_all(idx_fd, entry + zlib.crc32(entry).to_bytes(4, "little"))
        ref = SegRef(self, self.size, size, crc, first, last, rows, max_ts)
        if not self.refs:
            self.min_ts = min_ts
        self.rows += rows
        self.size += size
        self.refs.append(ref)
        return ref

    def read(self, ref: SegRef) -> pa.RecordBatch:
        if self._fd is not None:
            data = os.pread(self._fd, ref.length, ref.offset)
        else:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                data = os.pread(fd, ref.length, ref.offset)
            finally:
                os.close(fd)
        if zlib.crc32(data) != ref.crc:
            raise CorruptSegmentError(f"{self.path}: batch at byte {ref.offset} fails its checksum")
        return decode_batch(data)

    def read_span(self, refs: Sequence[SegRef]) -> pa.Table:
        """Adjacent batches (ascending, no gap), verified, in one read and one decode.

        A merge reads every batch of hundreds of small segments, often one
        message each (a sync publish is its own batch): one `pread` and the IPC
        stream reader in C cost a fraction of a `read` per batch.
        """
        start, end = refs[0].offset, refs[-1].offset + refs[-1].length
        buf = bytearray(len(HEADER) + end - start)
        buf[: len(HEADER)] = HEADER
        body = memoryview(buf)[len(HEADER) :]
        fd = self._fd if self._fd is not None else os.open(self.path, os.O_RDONLY)
        try:
            got = os.preadv(fd, [body], start)
        finally:
            if fd != self._fd:
                os.close(fd)
        for ref in refs:
            at = ref.offset - start
            if at + ref.length > got or zlib.crc32(body[at : at + ref.length]) != ref.crc:
                raise CorruptSegmentError(
                    f"{self.path}: batch at byte {ref.offset} fails its checksum"
                )
        return pa.ipc.open_stream(pa.py_buffer(buf)).read_all()

    def release(self) -> None:
        """Hold no descriptors once sealed: a lake stream seals every few seconds, so it may
        have thousands of sealed segments; reads past the batch cache reopen the file."""
        for fd in (self._fd, self._idx_fd):
            if fd is not None:
                os.close(fd)
        self._fd = self._idx_fd = None

    def close(self) -> None:
        self.release()

    def unlink(self) -> None:
        self.close()
        summary_path(self.path).unlink(missing_ok=True)
        self.path.unlink()
        self.idx_path.unlink()


def _parse_entries(index: bytes) -> tuple[list[tuple], bool]:
    """Entries with a good checksum up to the first bad one; and whether none was bad."""
    entries = []
    for pos in range(0, len(index) - _ENTRY_SIZE + 1, _ENTRY_SIZE):
        raw = index[pos : pos + _ENTRY.size]
        if zlib.crc32(raw) != int.from_bytes(
            index[pos + _ENTRY.size : pos + _ENTRY_SIZE], "little"
        ):
            return entries, False
        entries.append(_ENTRY.unpack(raw))
    return entries, len(index) % _ENTRY_SIZE == 0


def read_entries(idx: Path) -> list[tuple]:
    """The index entries of a segment, without reading or verifying its data."""
    return _parse_entries(idx.read_bytes())[0]


def read_batches(arrows: Path, idx: Path) -> tuple[list[tuple], list[pa.RecordBatch], int, str]:
    """Verify a segment pair: (good entries, their batches, good byte length, problem or "").

    Reading stops at the first entry or batch that fails: a bad entry
    checksum, a gap between batches, bytes missing, a bad batch checksum, a
    batch that does not decode, or seqs that disagree with the entry.
    """
    candidates, clean = _parse_entries(idx.read_bytes())  # first: batches precede entries
    data = pa.py_buffer(arrows.read_bytes())
    entries: list[tuple] = []
    batches: list[pa.RecordBatch] = []
    if data.size < len(HEADER) or data[: len(HEADER)].to_pybytes() != HEADER:
        return entries, batches, 0, "bad or missing schema header"
    off = len(HEADER)
    for entry in candidates:
        offset, length, first, last, rows, _min_ts, _max_ts, crc = entry
        if offset != off or off + length > data.size:
            return entries, batches, off, "batch missing or misplaced"
        body = data.slice(off, length)
        if zlib.crc32(body) != crc:
            return entries, batches, off, "batch checksum mismatch"
        try:
            batch = decode_batch(body)
        except (pa.ArrowInvalid, OSError):
            return entries, batches, off, "batch does not decode"
        seqs = seq_view(batch)
        if len(batch) != rows or not rows or seqs[0] != first or seqs[-1] != last:
            return entries, batches, off, "batch seqs disagree with index"
        entries.append(entry)
        batches.append(batch)
        off += length
    if not clean:
        return entries, batches, off, "bad index entry"
    if data.size > off:
        return entries, batches, off, "bytes past the last indexed batch"
    return entries, batches, off, ""


def open_segment(
    directory: Path, base: int, gen: int, *, active: bool
) -> tuple[Segment, list[pa.RecordBatch]]:
    """Open and verify a segment; an active one is repaired, a sealed one must be whole.

    The active segment's tail may be torn by a crash (it was being written):
    it is cut at the last good batch and the cut is logged. A sealed segment
    was fsynced before its successor existed, so any failure is corruption.
    """
    arrows, idx = segment_paths(directory, base, gen)
    entries, batches, good, problem = read_batches(arrows, idx)
    if problem:
        if not active:
            raise CorruptSegmentError(f"{arrows}: {problem} at byte {good}")
        log.warning("%s: %s at byte %d; cut the tail there", arrows, problem, good)
        cut_last = max((entry[3] for entry in read_entries(idx)), default=0)
        with open(arrows, "r+b") as f:
            if good == 0:
                f.truncate(0)
                f.write(HEADER)
                good = len(HEADER)
            f.truncate(good)
            os.fsync(f.fileno())
        with open(idx, "r+b") as f:
            f.truncate(len(entries) * _ENTRY_SIZE)
            os.fsync(f.fileno())
    seg = _segment(arrows, idx, base, gen, good, entries)
    if problem:
        seg.cut_last = cut_last
    return seg, batches


def _segment(arrows: Path, idx: Path, base: int, gen: int, size: int, entries: list) -> Segment:
    seg = Segment(arrows, idx, base, gen, size)
    for offset, length, first, last, rows, min_ts, max_ts, crc in entries:
        if not seg.refs:
            seg.min_ts = min_ts
        seg.rows += rows
        seg.refs.append(SegRef(seg, offset, length, crc, first, last, rows, max_ts))
    return seg


def open_sealed(
    directory: Path, base: int, gen: int, overhead: Overhead
) -> tuple[Segment, Keys, bool]:
    """Open and verify a sealed segment and describe its rows, from its summary when valid.

    With a summary only checksums are verified (every batch against its index
    entry, in C, the GIL released): nothing is decoded. Without one the segment
    is read as `open_segment` does, and the flag returned is False so the caller
    writes the summary. Raises CorruptSegmentError like `open_segment`.
    """
    arrows, idx = segment_paths(directory, base, gen)
    index = idx.read_bytes()
    entries, clean = _parse_entries(index)
    ident = identity(base, gen, arrows.stat().st_size, index, overhead)
    if clean and entries:
        keys = read_summary(summary_path(arrows), ident, sum(e[4] for e in entries))
        if keys is not None:
            good, problem = _verify(arrows, entries)
            if problem:
                raise CorruptSegmentError(f"{arrows}: {problem} at byte {good}")
            seg = _segment(arrows, idx, base, gen, good, entries)
            seg.release()
            return seg, keys, True
    seg, batches = open_segment(directory, base, gen, active=False)
    seg.release()
    table = pa.Table.from_batches(batches, SCHEMA)
    return seg, keys_of(table, [ref.rows for ref in seg.refs], overhead), False


def _verify(arrows: Path, entries: list[tuple]) -> tuple[int, str]:
    """`read_batches`' checks that need no decoding: (good byte length, problem or "")."""
    with open(arrows, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < len(HEADER) or f.read(len(HEADER)) != HEADER:
            return 0, "bad or missing schema header"
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            view = memoryview(data)
            try:
                off = len(HEADER)
                for offset, length, *_, crc in entries:
                    if offset != off or off + length > size:
                        return off, "batch missing or misplaced"
                    if zlib.crc32(view[off : off + length]) != crc:
                        return off, "batch checksum mismatch"
                    off += length
            finally:
                view.release()
    if size > off:
        return off, "bytes past the last indexed batch"
    return off, ""


def _compressed(batch: pa.RecordBatch, codec: str) -> pa.Buffer:
    """The batch's IPC message with its body compressed (Arrow's own LZ4/ZSTD buffers, which
    every IPC reader decodes): what a stream writer emits between the schema and the end."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=codec)
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    whole = sink.getvalue()
    return whole.slice(len(HEADER), whole.size - len(HEADER) - 8)


def write_segment(
    directory: Path,
    base: int,
    gen: int,
    batches: Iterable[pa.RecordBatch],
    *,
    compression: str | None = None,
) -> None:
    """Write a complete segment pair durably under its final names (reclaim, merge, seal)."""
    arrows, idx = segment_paths(directory, base, gen)
    tmp_arrows, tmp_idx = arrows.with_suffix(".tmp"), idx.with_suffix(".idx.tmp")
    with open(tmp_arrows, "wb") as fa, open(tmp_idx, "wb") as fi:
        fa.write(HEADER)
        off = len(HEADER)
        for batch in batches:
            payload = _compressed(batch, compression) if compression else batch.serialize()
            crc = zlib.crc32(payload)
            ts = batch.column(TS)
            seqs = seq_view(batch)
            entry = _ENTRY.pack(
                off,
                payload.size,
                seqs[0],
                seqs[-1],
                len(batch),
                pc.min(ts).value,
                pc.max(ts).value,
                crc,
            )
            fa.write(payload)
            fi.write(entry + zlib.crc32(entry).to_bytes(4, "little"))
            off += payload.size
        fa.flush()
        fi.flush()
        os.fsync(fa.fileno())
        os.fsync(fi.fileno())
    os.replace(tmp_arrows, arrows)
    os.replace(tmp_idx, idx)
    fsync_dir(directory)
