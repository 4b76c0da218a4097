"""`storage: file` streams: the shared batch store over Arrow segment files.

Defaults (`SegmentConfig`), and why:
- 64 MiB a segment: the lake gets files of a useful size (one Delta append
  each), a whole-segment reclaim rewrite or verify stays well under a second,
  and retention drops whole files at a fine enough grain.
- 1M messages a segment: bounds rows (and index entries) for tiny messages.
- 1 hour of message time a segment: a slow stream still seals, so its history
  reaches the lake and max_age can drop files, within an hour.
- 256 cached batches: a few consumers reading near the head hit memory.
- reclaim when at most half a sealed segment is live (the reference does the
  same for its blocks): each rewrite at least halves the file.

Threading: `append`, reads and deletes run on the event-loop thread; `sync()`
may run on a worker thread at the same time. Writes go straight to the files
with os.write (no user-space buffer, so readers and `sync` see them), and the
lock only guards swapping the active segment or the delete log, which `sync`
guards against by fsyncing duplicates of the file descriptors it took under
the lock.

The lake (`log/compactor`) reads sealed segments from another process. Two
hooks serve it: `seal()` seals a young active segment on a timer (freshness:
the lake only takes sealed, fsynced segments, whose seqs can never be reused by
a crash), and `hold_for_lake(seq)` forbids reclaim from destroying rows after
the lake's watermark; segments skipped for that are reclaimed once the
watermark passes them.

Corruption policy: a sealed segment that fails verification at open is logged
(error, naming the file and byte offset), listed in `corrupt`, left on disk
untouched for an operator, and its whole range is treated as missing: served
as deleted, never read. It is re-verified (and reported again) at every open,
so restoring a good copy of the file brings the messages back.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from array import array
from bisect import bisect_left
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from log.segments.api import CorruptSegmentError
from log.segments.core import BatchRef, BatchStore
from log.segments.schema import SEQ, TS
from log.segments.segment import Segment, SegRef, discover, open_segment, write_segment
from log.segments.tombstones import ExplicitDeletes, Tombstones

log = logging.getLogger("jetlake.segments")

# Shared by every stream: fsyncs block in the kernel, so a few threads suffice.
_FSYNC_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="fsync")

TOMBSTONES = "tombstones.log"
EXPLICIT = "explicit.log"


@dataclass(frozen=True, slots=True)
class SegmentConfig:
    max_bytes: int = 64 * 1024 * 1024
    max_msgs: int = 1_000_000
    max_age_ns: int = 3600 * 10**9
    cache_batches: int = 256
    reclaim_live_ratio: float = 0.5
    rewrite_batch_rows: int = 65536


class FileStore(BatchStore):
    def __init__(
        self, stream_dir: str | os.PathLike[str], *, name: str, config: SegmentConfig | None = None
    ) -> None:
        super().__init__(name)
        self.dir = Path(stream_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = config or SegmentConfig()
        self.corrupt: list[CorruptSegmentError] = []
        self._missing: list[tuple[int, int]] = []
        self._lock = threading.Lock()
        self._cache: OrderedDict[BatchRef, pa.RecordBatch] = OrderedDict()
        self._tomb = Tombstones(self.dir / TOMBSTONES)
        self._explicit = ExplicitDeletes(self.dir / EXPLICIT)
        # Delete logs written since the last sync, each apart: the explicit log is
        # rarely written and an fsync of a clean file still costs a journal check.
        self._tomb_dirty = False
        self._explicit_dirty = False
        self._lake_mark: int | None = None  # rows above it are not in the lake yet
        self._held: dict[int, Segment] = {}  # reclaim deferred for the lake, by base
        self._segments: list[Segment] = []
        self._open_segments()

    def _open_segments(self) -> None:
        found = discover(self.dir, clean=True)
        refs: list[BatchRef] = []
        batches: list[pa.RecordBatch] = []
        for k, (base, gen) in enumerate(found):
            active = k == len(found) - 1
            try:
                seg, got = open_segment(self.dir, base, gen, active=active)
            except CorruptSegmentError as err:
                log.error("stream %s: %s; its messages are not served", self.name, err)
                self.corrupt.append(err)
                self._missing.append((base, found[k + 1][0] - 1))
                continue
            if not active:
                seg.release()
            self._segments.append(seg)
            refs.extend(seg.refs)
            batches.extend(got)
        tomb = self._tomb
        # The delete log's last seq covers deletes whose data never reached disk
        # and full purges that left no segment: numbering resumes after all of it.
        data_last = refs[-1].last if refs else 0
        cut_last = self._segments[-1].cut_last if self._segments else 0
        self._last = max(data_last, tomb.last, cut_last, found[-1][0] - 1 if found else 0)
        self._last_ts = tomb.last_ts
        if batches and data_last == self._last:
            self._last_ts = batches[-1].column(TS)[-1].value
        self._install(refs, batches, tomb.seqs, tomb.floor)
        if cut_last > max(data_last, tomb.last):
            log.warning(
                "stream %s: seqs %d..%d were cut with a damaged tail; they stay unused",
                self.name,
                data_last + 1,
                cut_last,
            )
            self._persist_deletes(array("Q"))  # records the new last seq durably
            self.sync()
        if not found:
            self._segments.append(Segment.create(self.dir, self._last + 1))

    # -- hooks ---------------------------------------------------------------

    def _write(
        self, batch: pa.RecordBatch, first: int, last: int, min_ts: int, max_ts: int
    ) -> BatchRef:
        with self._lock:
            seg = self._segments[-1]
            if seg.refs and self._is_full(seg, min_ts):
                seg = self._roll(first)
            ref = seg.append(batch, first, last, min_ts, max_ts)
        self._remember(ref, batch)
        return ref

    def _fetch(self, ref: BatchRef) -> pa.RecordBatch:
        batch = self._cache.get(ref)
        if batch is None:
            assert isinstance(ref, SegRef)
            batch = ref.seg.read(ref)
            self._remember(ref, batch)
        else:
            self._cache.move_to_end(ref)
        return batch

    def _persist_deletes(self, seqs: array) -> None:
        with self._lock:
            self._tomb.append(self._persisted_floor(), self._last, self._last_ts, seqs)
            self._tomb_dirty = True
        if self._tomb.wants_rewrite(len(self._deleted)):
            self._rewrite_tombstones()

    def _persist_explicit(self, runs: list[tuple[int, int]]) -> None:
        with self._lock:
            self._explicit.append(runs)
            self._explicit_dirty = True

    def _reclaim(self, refs: list[BatchRef]) -> None:
        active = self._segments[-1]
        segs = {id(r.seg): r.seg for r in refs if isinstance(r, SegRef) and r.seg is not active}
        for seg in segs.values():
            if self._lake_mark is not None and seg.refs[-1].last > self._lake_mark:
                self._held[seg.base] = seg
                continue
            live = sum(r.live for r in seg.refs)
            if live > seg.rows * self.config.reclaim_live_ratio:
                continue
            # The deletes must be durable before the data that contradicts them goes.
            os.fsync(self._tomb.fileno())
            if live:
                self._rewrite(seg)
            else:
                self._replace(seg, None)

    # -- the lake's hooks ------------------------------------------------------

    def hold_for_lake(self, seq: int | None) -> None:
        """Keep rows with seqs above `seq` on disk (None: no lake, reclaim freely)."""
        self._lake_mark = seq
        held = [s for s in self._held.values() if seq is None or s.refs[-1].last <= seq]
        for seg in held:
            del self._held[seg.base]
        live = [s for s in held if s in self._segments]
        self._reclaim([ref for seg in live for ref in seg.refs])

    def seal(self, *, older_than_ns: int) -> bool:
        """Seal the active segment if it has rows and its first is older than the bound."""
        with self._lock:
            seg = self._segments[-1]
            if not seg.refs or seg.min_ts > older_than_ns:
                return False
            self._roll(seg.refs[-1].last + 1)
        return True

    @property
    def sealed_last_seq(self) -> int:
        """Last seq of the newest sealed segment (0 if none): what the lake could take now."""
        for seg in reversed(self._segments[:-1]):
            if seg.refs:
                return seg.refs[-1].last
        return 0

    def ts_after(self, seq: int) -> int | None:
        """Time of the first stored row after seq, deleted or not: the oldest the lake lacks.

        Rows above the lake's watermark are never reclaimed, so they are all still here.
        """
        i = bisect_left(self._firsts, seq + 1)
        if i > 0 and self._refs[i - 1].last > seq:
            i -= 1
        if i >= len(self._refs):
            return None
        ref = self._refs[i]
        batch = self._fetch(ref)
        row = pc.index(pc.greater(batch.column(SEQ), seq), True).as_py()
        return batch.column(TS)[row].value if row >= 0 else None

    # -- durability ----------------------------------------------------------

    def sync(self) -> None:
        with self._lock:
            owned = list(self._segments[-1].fds())
            if self._tomb_dirty:
                owned.append(self._tomb.fileno())
            if self._explicit_dirty:
                owned.append(self._explicit.fileno())
            self._tomb_dirty = self._explicit_dirty = False
            fds = [os.dup(fd) for fd in owned if fd is not None]
        try:
            # Issued together, the fsyncs of the segment, its index and the delete
            # logs share journal commits instead of waiting for one another.
            waits = [_FSYNC_POOL.submit(os.fsync, fd) for fd in fds[1:]]
            if fds:
                os.fsync(fds[0])
            for wait in waits:
                wait.result()
        finally:
            for fd in fds:
                os.close(fd)

    def close(self) -> None:
        self.sync()
        for seg in self._segments:
            seg.close()
        self._tomb.close()
        self._explicit.close()
        self._segments = []
        self._held.clear()
        self._cache.clear()

    def delete(self) -> None:
        self.close()
        shutil.rmtree(self.dir)

    # -- internals -----------------------------------------------------------

    def _is_full(self, seg: Segment, min_ts: int) -> bool:
        cfg = self.config
        return (
            seg.size >= cfg.max_bytes
            or seg.rows >= cfg.max_msgs
            or min_ts - seg.min_ts >= cfg.max_age_ns
        )

    def _roll(self, first: int) -> Segment:
        """Seal the active segment: durable before its successor exists (see segment.py)."""
        for fd in self._segments[-1].fds():
            os.fsync(fd)
        self._segments[-1].release()
        seg = Segment.create(self.dir, first)
        self._segments.append(seg)
        return seg

    def _remember(self, ref: BatchRef, batch: pa.RecordBatch) -> None:
        self._cache[ref] = batch
        if len(self._cache) > self.config.cache_batches:
            self._cache.popitem(last=False)

    def _rewrite(self, seg: Segment) -> None:
        live = []
        for ref in seg.refs:
            if ref.live:
                batch = self._fetch(ref)
                live.append(batch.filter(self._live_mask(batch, ref.first, ref.last)))
        table = pa.Table.from_batches(live).combine_chunks()
        write_segment(
            self.dir, seg.base, seg.gen + 1, table.to_batches(self.config.rewrite_batch_rows)
        )
        fresh, _ = open_segment(self.dir, seg.base, seg.gen + 1, active=False)
        fresh.release()
        self._replace(seg, fresh)

    def _replace(self, seg: Segment, fresh: Segment | None) -> None:
        """Swap a sealed segment's refs for its rewrite's (or for nothing) and unlink it."""
        i = bisect_left(self._firsts, seg.refs[0].first)
        assert self._refs[i] is seg.refs[0]
        new_refs = fresh.refs if fresh else []
        self._refs[i : i + len(seg.refs)] = new_refs
        self._firsts[i : i + len(seg.refs)] = [r.first for r in new_refs]
        k = self._segments.index(seg)
        self._segments[k : k + 1] = [fresh] if fresh else []
        for ref in seg.refs:
            self._cache.pop(ref, None)
        seg.unlink()

    def _advance_floor(self, bound: int) -> int:
        """An explicit floor (purge, limits, max_age) also retires unreadable ranges below it."""
        self._missing = [(max(a, bound), b) for a, b in self._missing if b >= bound]
        return super()._advance_floor(bound)

    def _persisted_floor(self) -> int:
        """The floor written to disk never passes an unreadable range.

        Skipping it in memory is right (nothing there can be served), but on
        disk it would turn "unreadable" into "deleted" and a restored segment
        file would stay hidden.
        """
        return min([self._first, *(a for a, _ in self._missing)])

    def _rewrite_tombstones(self) -> None:
        """Compact the delete log to the live delete set (never the unreadable ranges)."""
        floor = self._persisted_floor()
        seqs = array("Q", range(floor, self._first))
        seqs.extend(self._deleted.between(0, self._last))
        if self._missing:
            seqs = array("Q", (s for s in seqs if not any(a <= s <= b for a, b in self._missing)))
        with self._lock:
            self._tomb.rewrite(floor, self._last, self._last_ts, seqs)
