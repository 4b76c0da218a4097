"""`storage: memory` streams: the shared batch store with batches kept in RAM.

Nothing is persisted, so sync is a no-op; space is reclaimed batch by batch
(dropped when empty, filtered when less than half live) so a long-lived
memory stream under limits does not keep every message it ever held.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left

import pyarrow as pa
import pyarrow.compute as pc

from log.segments.api import MEMORY_OVERHEAD
from log.segments.core import BatchStore
from log.segments.ipc import decode_batch
from log.segments.reads import BatchRef
from log.segments.tombstones import Erasure

_MIN_ROWS_TO_COMPACT = 32


class _MemRef(BatchRef):
    __slots__ = ("batch",)

    def __init__(self, batch: pa.RecordBatch, first: int, last: int, max_ts: int) -> None:
        super().__init__(first, last, len(batch), max_ts)
        self.batch = batch


class MemoryStore(BatchStore):
    overhead = MEMORY_OVERHEAD

    def __init__(self, *, name: str) -> None:
        super().__init__(name)

    def _write(
        self, payload: bytes, first: int, last: int, rows: int, min_ts: int, max_ts: int
    ) -> BatchRef:
        return _MemRef(decode_batch(payload), first, last, max_ts)

    def _fetch(self, ref: BatchRef) -> pa.RecordBatch:
        assert isinstance(ref, _MemRef)
        return ref.batch

    def _persist_deletes(self, seqs: array) -> None:
        """Nothing outlives the process."""

    def _persist_explicit(self, erasures: list[Erasure]) -> None:
        """Memory streams never reach the lake."""

    def explicit_size(self) -> int:
        return 0

    def explicit_log(self, start: int, end: int) -> bytes:
        return b""

    def extend_explicit(self, data: bytes) -> None:
        """Memory streams never reach the lake: there is no log to extend."""

    def _reclaim(self, refs: list[BatchRef]) -> None:
        for ref in refs:
            assert isinstance(ref, _MemRef)
            if not ref.live:
                i = bisect_left(self._firsts, ref.first)
                if i < len(self._refs) and self._refs[i] is ref:
                    del self._refs[i]
                    del self._firsts[i]
            elif ref.rows >= _MIN_ROWS_TO_COMPACT and ref.live * 2 <= ref.rows:
                mask = self._live_mask(ref.batch, ref.first, ref.last)
                ref.batch = pc.filter(ref.batch, mask)
                ref.rows = ref.live

    def set_compression(self, codec: str | None) -> None:
        """Nothing is sealed in memory, so there is nothing to compress."""

    def sync(self) -> None:
        """Nothing to make durable."""

    def close(self) -> None:
        """Nothing to release."""

    def delete(self) -> None:
        BatchStore.__init__(self, self.name)
