"""Where a new consumer starts reading, and how many messages lie ahead of a position.

Both answer from the store's per-subject index rather than from the messages,
so they cost what the filter matches, not the stream's size.
"""

from __future__ import annotations

from collections import deque

from log.consumer_config import ConsumerConfig
from log.consumer_wire import StoreReader


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
        return _seq_at_time(store, cfg.opt_start_time or 0, first, committed), deque()
    seqs = set()
    for f in filters:
        for subject in store.subjects(f):
            state = store.subject_state(subject)
            if state is not None and state.last_seq <= committed:
                seqs.add(state.last_seq)
    lps = deque(sorted(seqs))
    return (lps[0] if lps else committed + 1), lps


def _seq_at_time(store: StoreReader, ts: int, first: int, committed: int) -> int:
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
