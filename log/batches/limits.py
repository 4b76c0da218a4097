"""How many batches one server holds open at once, all its streams together.

The reference refuses a new batch beyond 1,000 atomic batches being staged or
50,000 fast batches in flight per server (`streamDefaultMaxAtomicBatchInflightTotal`,
`streamDefaultMaxFastBatchInflightTotal`), with the same errors as its per-stream
limits (`log.batches.atomic.MAX_INFLIGHT`, `log.batches.fast.MAX_INFLIGHT`): 10210 and 10211.

The open batches are counted by asking each stream's stager rather than by a
counter kept in step with every way a batch ends (committed, broken, timed out,
leadership lost, batching switched off), so the count cannot drift. Like the
reference's counters the default is one per process, which is one server.
"""

from __future__ import annotations

import weakref
from collections.abc import Sized

MAX_ATOMIC_TOTAL = 1000
MAX_FAST_TOTAL = 50_000


class ServerBatches:
    """The open batches of every stream of a server, against the server-wide limits."""

    def __init__(self, *, atomic: int = MAX_ATOMIC_TOTAL, fast: int = MAX_FAST_TOTAL) -> None:
        self.atomic_limit = atomic
        self.fast_limit = fast
        # Weak: a deleted stream's batches stop counting once the stream is gone.
        self._atomic: weakref.WeakSet[Sized] = weakref.WeakSet()
        self._fast: weakref.WeakSet[Sized] = weakref.WeakSet()

    def track_atomic(self, stager: Sized) -> None:
        self._atomic.add(stager)

    def track_fast(self, batches: Sized) -> None:
        self._fast.add(batches)

    def atomic_full(self) -> bool:
        """Whether one more atomic batch would go beyond the server's limit."""
        return sum(len(s) for s in self._atomic) >= self.atomic_limit

    def fast_full(self) -> bool:
        """Whether one more fast batch would go beyond the server's limit."""
        return sum(len(b) for b in self._fast) >= self.fast_limit


SERVER = ServerBatches()
