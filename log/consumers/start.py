"""Where a consumer reads: its start, the count ahead of a position, the next run of messages.

All three answer from the store's per-subject index rather than from the
messages, so they cost what the filter matches, not the stream's size.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from itertools import chain

from log.consumers.config import ConsumerConfig
from log.consumers.wire import StoreReader
from log.segments.api import StoredMsg


def start_position(
    store: StoreReader, cfg: ConsumerConfig, committed: int
) -> tuple[int, deque[int]]:
    """The first stream sequence to look at and, for last_per_subject, the seqs to deliver first.

    Nothing above `committed` is chosen: a message is not revealed before its
    publisher could have been acknowledged.
    """
    policy = cfg.deliver_policy
    filters = cfg.filters or (">",)
    first = max(store.state().first_seq, 1)
    if policy == "all":
        return first, deque()
    if policy == "new":
        return committed + 1, deque()
    if policy == "last":
        lasts = [m.seq for m in (store.load_last(f) for f in filters) if m]
        return max([s for s in lasts if s <= committed], default=committed + 1), deque()
    if policy == "by_start_sequence":
        return max(cfg.opt_start_seq, 1), deque()
    if policy == "by_start_time":
        return seq_at_time(store, cfg.opt_start_time or 0, first, committed), deque()
    seqs = set()
    for f in filters:
        for subject in store.subjects(f):
            state = store.subject_state(subject)
            if state is not None and state.last_seq <= committed:
                seqs.add(state.last_seq)
    lps = deque(sorted(seqs))
    return (lps[0] if lps else committed + 1), lps


def seq_at_time(store: StoreReader, ts: int, first: int, committed: int) -> int:
    """The first sequence stored at or after ts: a binary search over sequences."""
    lo, hi = first, committed + 1
    while lo < hi:
        mid = (lo + hi) // 2
        msg = store.load_next(mid)
        if msg is None or msg.seq > committed or msg.ts >= ts:
            hi = mid
        else:
            lo = msg.seq + 1
    return lo


def count_from(store: StoreReader, filters: tuple[str, ...], start: int, committed: int) -> int:
    """Exact count of committed messages from `start` on that match any of the filters."""
    state = store.state()
    total = 0
    for f in filters:
        if start <= state.first_seq:
            total += state.msgs if f == ">" else sum(store.subjects(f).values())
            total -= sum(1 for _ in store.seqs_for(f, committed + 1))
        else:
            total += sum(1 for s in store.seqs_for(f, start) if s <= committed)
    return max(total, 0)


class ReadAhead:
    """The next committed messages, from a position on, that a consumer's filters select.

    Unfiltered, the store's next live sequence is O(1). Filtered, the matching
    sequences come from the subject index once (`seqs_for`) and commits append to
    that list, so a consumer never rescans the stream per message. Either way a run
    of messages is read at once (converting Arrow rows one by one costs more than
    delivering them); a run serves one pump only, as the store may change before
    the next (`clear`).
    """

    def __init__(self, store: StoreReader, filters: tuple[str, ...]) -> None:
        self.store = store
        self.run: deque[StoredMsg] = deque()  # read, not yet taken (the owner pops it)
        self.refilter(filters)

    def refilter(self, filters: tuple[str, ...]) -> None:
        """New filters, or messages committed without `committed` being called: re-read."""
        self.filters = filters
        self._seqs = array("Q")  # filtered: matching seqs known to the store, ascending
        self._pos = 0
        self._upto = 0  # the store's last seq when _seqs was read
        self._stale = True

    def committed(self, seq: int) -> None:
        """A message the filters select was committed."""
        if self.filters and not self._stale and seq > self._upto:
            self._seqs.append(seq)
            if self._pos > 4096:
                del self._seqs[: self._pos]
                self._pos = 0

    def clear(self) -> None:
        self.run.clear()

    def peek(self, start: int, committed: int, limit: int) -> StoredMsg | None:
        """The first message at or after `start` and not above `committed` (read up to `limit`)."""
        run = self.run
        if run:
            return run[0]
        if not self.filters:
            run.extend(self.store.load_run(start, committed, limit))
            return run[0] if run else None
        if self._stale:
            self._refill(start)
        seqs = self._seqs
        pos = bisect_left(seqs, start, self._pos)
        while pos < len(seqs):
            end = bisect_right(seqs, committed, pos, min(pos + limit, len(seqs)))
            if end == pos:
                break
            self._pos = pos
            first, last = seqs[pos], seqs[end - 1]
            if last - first == end - 1 - pos:  # every seq in between matches: read a slice
                run.extend(self.store.load_run(first, last, end - pos))
            else:
                run.extend(self.store.load_many(seqs[pos:end]))
            if run:
                return run[0]
            pos = end  # all deleted meanwhile
        self._pos = pos
        return None

    def _refill(self, start: int) -> None:
        self._stale = False
        runs = [self.store.seqs_for(f, start) for f in self.filters]
        merged = runs[0] if len(runs) == 1 else sorted(set(chain.from_iterable(runs)))
        self._seqs = array("Q", merged)  # machine words: a list cost 0.2 µs a seq to build
        self._pos = 0
        self._upto = self.store.state().last_seq
