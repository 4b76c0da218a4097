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
- merge runs of 16+ small sealed segments (or fewer making a full merge)
  into one of at most 16 MiB, 8192 batches or 256 files (see `plan_merge`):
  2-s lake seals would otherwise leave ~43,000 files a day per stream, each
  index read at every start, and those bounds keep one merge near 0.1 s of
  event-loop time.

Threading: `append`, reads and deletes run on the event-loop thread; `sync()`
may run on a worker thread at the same time. Writes go straight to the files
with os.write (no user-space buffer, so readers and `sync` see them), and the
lock only guards swapping the active segment or the delete log, which `sync`
guards against by fsyncing duplicates of the file descriptors it took under
the lock.

The lake (`log/compactor`) reads sealed segments from another process. Three
hooks serve it: `seal()` seals a young active segment on a timer (freshness:
the lake only takes sealed, fsynced segments, whose seqs can never be reused by
a crash), `hold_for_lake(seq)` forbids reclaim from destroying rows after
the lake's watermark (segments skipped for that are reclaimed once the
watermark passes them), and `merge_small()` folds the small segments those
timed seals make into bigger ones, only at or below the watermark.

Opening: each sealed segment has a summary (`summary.py`: every row's seq,
subject and size) written on a worker thread once it is sealed, so an open
checks the sealed segments' checksums and reads their summaries instead of
decoding them (1M messages: 0.47 s → 0.09 s); only the active segment, the one a
crash may have torn, is read whole. A missing, torn or stale summary costs a
read of its segment, and is written again.

Corruption policy: a sealed segment that fails verification at open is logged
(error, naming the file and byte offset), listed in `corrupt`, left on disk
untouched for an operator, and its whole range is treated as missing: served
as deleted, never read. It is re-verified (and reported again) at every open,
so restoring a good copy of the file brings the messages back.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import threading
from array import array
from bisect import bisect_left
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from consensus.durability import fsync_dir
from log.segments.api import CorruptSegmentError
from log.segments.core import BatchStore
from log.segments.ipc import decode_batch
from log.segments.merging import plan_merge
from log.segments.reads import BatchRef
from log.segments.rebuild import Keys, keys_of
from log.segments.schema import SCHEMA, SEQ, TS
from log.segments.segment import (
    Segment,
    SegRef,
    discover,
    open_sealed,
    open_segment,
    summary_path,
    write_segment,
)
from log.segments.summary import identity, write_summary
from log.segments.tombstones import Erasure, ExplicitDeletes, Tombstones

log = logging.getLogger("jetlake.segments")

# Shared by every stream: fsyncs block in the kernel, so a few threads suffice.
_FSYNC_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="fsync")
# Opening sealed segments and writing their summaries: checksums, reads and Arrow
# kernels that release the GIL, one thread a core.
_BACKGROUND = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="segments")

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
    merge_target_bytes: int = 16 * 1024 * 1024
    merge_min_segments: int = 16
    merge_max_segments: int = 256
    merge_max_batches: int = 8192
    compression: str | None = None  # "zstd" or "lz4": sealed segments are rewritten compressed
    # A replicated stream's store: its Raft log, not this store, is the record of what
    # was acknowledged, and applying the log again refills whatever a crash cut. So a
    # cut tail's seqs are numbered again instead of staying unused, which would leave
    # the replica holes where the log has messages.
    refill_from_log: bool = False


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
        # A batch as written stays its IPC bytes until first read: decoding it costs
        # a few µs a commit, and a stream nobody reads at its head never pays it.
        self._cache: OrderedDict[BatchRef, pa.RecordBatch | bytes] = OrderedDict()
        self._tomb = Tombstones(self.dir / TOMBSTONES)
        self._explicit = ExplicitDeletes(self.dir / EXPLICIT)
        # Delete logs written since the last sync, each apart: the explicit log is
        # rarely written and an fsync of a clean file still costs a journal check.
        self._tomb_dirty = False
        self._explicit_dirty = False
        self._dir_dirty = False  # a segment created whose directory entry is not synced
        self.lake_mark: int | None = None  # rows above it are not in the lake yet
        self._held: dict[int, Segment] = {}  # reclaim deferred for the lake, by base
        self._segments: list[Segment] = []
        self._to_compress: list[Segment] = []  # sealed, awaiting their compressed rewrite
        self._quarantined: list[int] = []  # bases of corrupt files: no merge spans one
        self._no_merge: set[int] = set()  # bases whose batches failed a merge's read
        self._merge_seen: tuple[int | None, int, int] | None = None  # state with nothing to merge
        self._summaries: list[Future[None]] = []  # summaries being written, waited for by close
        self._open_segments()

    def _open_segments(self) -> None:
        """Sealed segments open on worker threads (checksums and decoding release the
        GIL) while this thread reads the active one, the only one that may be torn."""
        found = discover(self.dir, clean=True)
        sealed = [
            _BACKGROUND.submit(open_sealed, self.dir, base, gen, self.overhead)
            for base, gen in found[:-1]
        ]
        active = self._open_active(*found[-1]) if found else None
        refs: list[BatchRef] = []
        parts: list[Keys] = []
        for k, opening in enumerate(sealed):
            try:
                seg, keys, summarized = opening.result()
            except CorruptSegmentError as err:
                log.error("stream %s: %s; its messages are not served", self.name, err)
                self.corrupt.append(err)
                self._missing.append((found[k][0], found[k + 1][0] - 1))
                self._quarantined.append(found[k][0])
                continue
            if not summarized:
                self._summarize(seg, keys)
            self._segments.append(seg)
            refs.extend(seg.refs)
            parts.append(keys)
        if active is not None:
            self._segments.append(active[0])
            refs.extend(active[0].refs)
            parts.append(active[1])
        tomb = self._tomb
        # The delete log's last seq covers deletes whose data never reached disk
        # and full purges that left no segment: numbering resumes after all of it.
        data_last = refs[-1].last if refs else 0
        cut_last = self._segments[-1].cut_last if self._segments else 0
        if self.config.refill_from_log:
            cut_last = 0  # the log applies those seqs again (see SegmentConfig)
            numbered = max(data_last, found[-1][0] - 1 if found else 0)
        else:
            numbered = max(data_last, tomb.last)
        self._last = max(numbered, cut_last, found[-1][0] - 1 if found else 0)
        self._last_ts = tomb.last_ts
        if refs and data_last == self._last:
            self._last_ts = self._fetch(refs[-1]).column(TS)[-1].value
        self._install(refs, Keys.concat(parts), tomb.seqs, tomb.floor)
        if cut_last > numbered:
            log.warning(
                "stream %s: seqs %d..%d were cut with a damaged tail; they stay unused",
                self.name,
                data_last + 1,
                cut_last,
            )
            self._persist_deletes(array("Q"))  # records the new last seq durably
            self.sync()
        if not found:
            # No fsync of the directory here: a new stream's create fsyncs it with its
            # config file, and an empty segment lost to a power cut is made again.
            self._segments.append(Segment.create(self.dir, self._last + 1))
            self._dir_dirty = True

    def _open_active(self, base: int, gen: int) -> tuple[Segment, Keys]:
        """The newest segment, its torn tail cut (see `open_segment`), and its rows' keys."""
        seg, batches = open_segment(self.dir, base, gen, active=True)
        table = pa.Table.from_batches(batches, SCHEMA)
        return seg, keys_of(table, [ref.rows for ref in seg.refs], self.overhead)

    def _summarize(self, seg: Segment, keys: Keys | None = None) -> None:
        """Write a sealed segment's summary on a worker thread, reading it there if
        `keys` is None. Best effort: without a summary the next open reads the segment."""
        self._summaries = [f for f in self._summaries if not f.done()]
        self._summaries.append(_BACKGROUND.submit(self._write_summary, seg, keys))

    def _write_summary(self, seg: Segment, keys: Keys | None) -> None:
        if not seg.refs:
            return
        try:
            if keys is None:
                table = seg.read_span(seg.refs)
                keys = keys_of(table, [ref.rows for ref in seg.refs], self.overhead)
            ident = identity(seg.base, seg.gen, seg.size, seg.idx_path.read_bytes(), self.overhead)
            path = summary_path(seg.path)
            write_summary(path, keys, ident)
            if not seg.path.exists():  # rewritten or merged away meanwhile
                path.unlink(missing_ok=True)
        except (OSError, CorruptSegmentError, pa.ArrowException) as err:
            log.debug("stream %s: no summary for %s: %s", self.name, seg.path, err)

    # -- hooks ---------------------------------------------------------------

    def _write(
        self, payload: bytes, first: int, last: int, rows: int, min_ts: int, max_ts: int
    ) -> BatchRef:
        with self._lock:
            seg = self._segments[-1]
            if seg.refs and self._is_full(seg, min_ts):
                seg = self._roll(first)
            ref = seg.append(payload, first, last, rows, min_ts, max_ts)
        if self._to_compress:
            self._compress_sealed()
        self._remember(ref, payload)
        return ref

    def _fetch(self, ref: BatchRef) -> pa.RecordBatch:
        batch = self._cache.get(ref)
        if batch is None:
            assert isinstance(ref, SegRef)
            batch = ref.seg.read(ref)
            self._remember(ref, batch)
        elif isinstance(batch, bytes):
            batch = self._cache[ref] = decode_batch(batch)
            self._cache.move_to_end(ref)
        else:
            self._cache.move_to_end(ref)
        return batch

    def _persist_deletes(self, seqs: array) -> None:
        with self._lock:
            self._tomb.append(self._persisted_floor(), self._last, self._last_ts, seqs)
            self._tomb_dirty = True
        if self._tomb.wants_rewrite(len(self._deleted)):
            self._rewrite_tombstones()

    def _persist_explicit(self, erasures: list[Erasure]) -> None:
        with self._lock:
            self._explicit.append(erasures)
            self._explicit_dirty = True

    def explicit_size(self) -> int:
        path = self.dir / EXPLICIT
        return path.stat().st_size if path.exists() else 0

    def explicit_log(self, start: int, end: int) -> bytes:
        path = self.dir / EXPLICIT
        if end <= start or not path.exists():
            return b""
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(end - start)

    def extend_explicit(self, data: bytes) -> None:
        if data:
            with self._lock:
                self._explicit.append_raw(data)
                self._explicit_dirty = True

    def _reclaim(self, refs: list[BatchRef]) -> None:
        active = self._segments[-1]
        segs = {id(r.seg): r.seg for r in refs if isinstance(r, SegRef) and r.seg is not active}
        for seg in segs.values():
            if self.lake_mark is not None and seg.refs[-1].last > self.lake_mark:
                self._held[seg.base] = seg
                continue
            live = sum(r.live for r in seg.refs)
            if live > seg.rows * self.config.reclaim_live_ratio:
                continue
            # The deletes must be durable before the data that contradicts them goes.
            os.fsync(self._tomb.fileno())
            self._rewrite([seg])

    # -- the lake's hooks ------------------------------------------------------

    def set_compression(self, codec: str | None) -> None:
        self.config = dataclasses.replace(self.config, compression=codec)

    def hold_for_lake(self, seq: int | None) -> None:
        """Keep rows with seqs above `seq` on disk (None: no lake, reclaim freely)."""
        self.lake_mark = seq
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
        self._compress_sealed()
        return True

    def merge_small(self) -> int:
        """Merge one run of small sealed segments the lake has; returns the files removed.

        Called on the lake's tick right after `seal`, the only thing that makes
        small segments in bulk: one run a call bounds the time the event loop
        is held (a cascade of merges proceeds a tick at a time). Only rows at or
        below the lake's mark are merged: the compactor reads the newer files by
        name, and it skips these (wholly at or below its progress) unread. With
        no lake (mark None) every sealed segment is fair game. A run never spans
        a corrupt file, which stays for an operator to restore.
        """
        seen = (self.lake_mark, len(self._segments), self._segments[-1].base)
        if seen == self._merge_seen:
            return 0  # nothing sealed, merged or handed to the lake since the last look
        for stretch in self._merge_stretches():
            picked = plan_merge(stretch, self.config)
            if picked is not None:
                run = stretch[picked]
                break
        else:
            self._merge_seen = seen
            return 0
        try:
            os.fsync(self._tomb.fileno())  # deletes durable before the rows they drop go
            fresh = self._rewrite(run)
        except CorruptSegmentError as err:
            bad = [s for s in run if str(err).startswith(str(s.path))] or run
            self._no_merge.update(s.base for s in bad)
            log.error("stream %s: %s; not merged", self.name, err)
            return 0
        except OSError as err:  # e.g. disk full: merging is housekeeping, the store goes on
            self._merge_seen = seen
            log.error("stream %s: merging segments failed: %s", self.name, err)
            return 0
        return len(run) - (fresh is not None)

    def _merge_stretches(self) -> list[list[Segment]]:
        """Maximal lists of adjacent sealed segments the lake has, oldest first."""
        mark, half = self.lake_mark, self.config.merge_target_bytes // 2
        stretches: list[list[Segment]] = [[]]
        prev: Segment | None = None
        for seg in self._segments[:-1]:
            if mark is not None and seg.refs and seg.refs[-1].last > mark:
                break  # seqs ascend: no later segment is in the lake either
            # A run's largest member is at most half of it: bigger ones are walls, cut here
            # so a stream of thousands of full segments costs a glance per tick.
            mergeable = seg.size <= half and seg.base not in self._no_merge
            fenced = prev is not None and any(prev.base < q < seg.base for q in self._quarantined)
            if fenced or not mergeable:
                stretches.append([])
            if mergeable:
                stretches[-1].append(seg)
            prev = seg
        return [s for s in stretches if len(s) >= 2]

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
            if not self._segments:  # closed (and synced) while a background sync was queued
                return
            owned = list(self._segments[-1].fds())
            if self._tomb_dirty:
                owned.append(self._tomb.fileno())
            if self._explicit_dirty:
                owned.append(self._explicit.fileno())
            sync_dir, self._dir_dirty = self._dir_dirty, False
            self._tomb_dirty = self._explicit_dirty = False
            fds = [os.dup(fd) for fd in owned if fd is not None]
        try:
            # Issued together, the fsyncs of the segment, its index and the delete
            # logs share journal commits instead of waiting for one another.
            waits = [_FSYNC_POOL.submit(os.fsync, fd) for fd in fds[1:]]
            if sync_dir:
                waits.append(_FSYNC_POOL.submit(fsync_dir, self.dir))
            if fds:
                os.fsync(fds[0])
            for wait in waits:
                wait.result()
        finally:
            for fd in fds:
                os.close(fd)

    def close(self) -> None:
        for pending in self._summaries:
            pending.result()
        self.sync()
        with self._lock:  # a background sync sees the store open or closed, never half
            segments, self._segments = self._segments, []
            for seg in segments:
                seg.close()
            self._tomb.close()
            self._explicit.close()
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
        sealed = self._segments[-1]
        sealed.release()
        seg = Segment.create(self.dir, first)
        fsync_dir(self.dir)
        self._segments.append(seg)
        if self.config.compression:
            self._to_compress.append(sealed)
        else:
            self._summarize(sealed)
        return seg

    def _compress_sealed(self) -> None:
        """Rewrite just-sealed segments compressed, outside the lock (a background sync
        must not wait for it). A rewrite keeps live rows only, so a segment with rows
        deleted here that the lake has not taken yet stays as it is."""
        while self._to_compress:
            seg = self._to_compress.pop()
            whole = all(ref.live == ref.rows for ref in seg.refs)
            lake_has_it = self.lake_mark is None or seg.refs[-1].last <= self.lake_mark
            if seg in self._segments and (whole or lake_has_it):
                self._rewrite([seg])

    def _remember(self, ref: BatchRef, batch: pa.RecordBatch | bytes) -> None:
        self._cache[ref] = batch
        if len(self._cache) > self.config.cache_batches:
            self._cache.popitem(last=False)

    def _rewrite(self, segs: list[Segment]) -> Segment | None:
        """Replace adjacent sealed segments by one file of their live rows (None: none live).

        Reclaim passes one segment, a merge a run. The new file takes the first
        base and a generation above all of theirs, and is durable under its
        final names before any old file goes, so after a crash discovery
        prefers it and drops the old copies it covers (see segment.py).
        """
        live = [t for seg in segs if (t := self._live_rows(seg)) is not None]
        fresh = None
        if live:
            base, gen = segs[0].base, max(s.gen for s in segs) + 1
            table = pa.concat_tables(live).combine_chunks()
            write_segment(
                self.dir,
                base,
                gen,
                table.to_batches(self.config.rewrite_batch_rows),
                compression=self.config.compression,
            )
            fresh, _ = open_segment(self.dir, base, gen, active=False)
            fresh.release()
            self._summarize(fresh)
        self._replace(segs, fresh)
        return fresh

    def _live_rows(self, seg: Segment) -> pa.Table | None:
        """Its live rows (None: none), read from disk, never through the batch cache:
        a merge reads hundreds of cold segments and must not evict the consumers' batches."""
        live = [k for k, ref in enumerate(seg.refs) if ref.live]
        if not live:
            return None
        refs = seg.refs[live[0] : live[-1] + 1]
        table = seg.read_span(refs)
        if any(ref.live < ref.rows for ref in refs):
            table = table.filter(self._live_mask(table, refs[0].first, refs[-1].last))
        return table

    def _replace(self, old: list[Segment], fresh: Segment | None) -> None:
        """Swap adjacent sealed segments' refs for their rewrite's (or for nothing), unlink them."""
        refs = [r for seg in old for r in seg.refs]
        new_refs = fresh.refs if fresh else []
        if refs:
            i = bisect_left(self._firsts, refs[0].first)
            assert self._refs[i] is refs[0] and self._refs[i + len(refs) - 1] is refs[-1]
            self._refs[i : i + len(refs)] = new_refs
            self._firsts[i : i + len(refs)] = [r.first for r in new_refs]
        k = self._segments.index(old[0])
        assert self._segments[k : k + len(old)] == old
        self._segments[k : k + len(old)] = [fresh] if fresh else []
        for ref in refs:
            self._cache.pop(ref, None)
        for seg in old:
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
