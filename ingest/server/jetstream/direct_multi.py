"""Store lookups behind direct get's `multi_last` and time-based requests.

Both answer from the per-subject index and a binary search over sequences, so
a `multi_last` costs what its filters match (subjects, not messages) and a
time lookup costs O(log n) message loads, however long the stream is.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence, Sized

from ingest.parser.subjects import is_valid_subject
from log.segments.api import MsgStore

MAX_RESULTS = 1024  # the reference's cap on subjects one multi_last may return


class TooManyResults(Exception):
    """More subjects match than one multi_last may answer (the reference's 413)."""


def seq_at_time(store: MsgStore, ts: int) -> int:
    """The first live sequence stored at or after ts; last_seq + 1 when there is none.

    A binary search for the first position whose next live message is recent
    enough: deleted sequences are stepped over, never returned, because a
    single (non-batch) get loads exactly the sequence this answers.
    """
    state = store.state()
    lo, hi = max(state.first_seq, 1), state.last_seq + 1
    while lo < hi:
        mid = (lo + hi) // 2
        msg = store.load_next(mid)
        if msg is None or msg.ts >= ts:
            hi = mid
        else:
            lo = msg.seq + 1
    found = store.load_next(lo) if lo <= state.last_seq else None
    return found.seq if found is not None else state.last_seq + 1


def last_seqs(store: MsgStore, filters: Iterable[str], up_to: int) -> list[int]:
    """The last sequence at or below up_to of each subject any filter matches, ascending.

    Invalid filters (and "", which stores read as "everything") match nothing,
    as in the reference. Raises TooManyResults past MAX_RESULTS subjects.
    """
    seen: set[str] = set()
    found: list[int] = []
    for subject_filter in filters:
        if not is_valid_subject(subject_filter):
            continue
        for subject in store.subjects(subject_filter):
            if subject in seen:
                continue
            seen.add(subject)
            seq = _last_at_or_below(store, subject, up_to)
            if seq:
                found.append(seq)
                if len(found) > MAX_RESULTS:
                    raise TooManyResults
    found.sort()
    return found


def count(seqs: Iterable[int]) -> int:
    """How many sequences a store lookup returned, without iterating an array in Python."""
    return len(seqs) if isinstance(seqs, Sized) else sum(1 for _ in seqs)


def _last_at_or_below(store: MsgStore, subject: str, up_to: int) -> int:
    state = store.subject_state(subject)
    if state is None or state.first_seq > up_to:
        return 0
    if state.last_seq <= up_to:
        return state.last_seq
    found = store.seqs_for(subject, state.first_seq)
    seqs = found if isinstance(found, Sequence) else list(found)
    return seqs[bisect_right(seqs, up_to) - 1]
