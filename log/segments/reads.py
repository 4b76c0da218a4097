"""The read side of the batch stores: lookups by seq and by subject, state, counts.

`BatchStore` (log/segments/core.py) inherits this and keeps the writes; both work on
the state declared below, which `BatchStore.__init__` sets up, and on the batches its
subclasses keep (`_fetch`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from itertools import chain

import pyarrow as pa
import pyarrow.compute as pc

from ingest.parser.subjects import is_literal
from log.segments.api import Overhead, StoredMsg, StoreState, SubjectState
from log.segments.index import SeqList, SubjectIndex
from log.segments.schema import (
    HDR,
    SEQ,
    SUBJECT,
    TS,
    TS_TYPE,
    msg_at,
    row_of,
    rows_between,
    seq_view,
    u64,
)
from log.segments.subjects import filter_regex, matches_all

# Above this many matching subjects a filtered lookup scans batches with a regex
# in C instead of bisecting every subject's sequence list.
_FANOUT = 64


class BatchRef:
    """Where one batch's sequences are; `live` counts its rows not yet deleted.

    `headers` is False only for a batch known to hold no headers (seen at open),
    so a restart's dedup and TTL scans skip it instead of reading it again.
    """

    __slots__ = ("first", "headers", "last", "live", "max_ts", "rows")

    def __init__(self, first: int, last: int, rows: int, max_ts: int) -> None:
        self.first = first
        self.last = last
        self.rows = rows
        self.live = rows
        self.max_ts = max_ts
        self.headers = True

    @property
    def dense_first(self) -> int | None:
        """The first seq when rows are consecutive (row = seq - first), else None."""
        return self.first if self.rows == self.last - self.first + 1 else None


class BatchReads(ABC):
    overhead: Overhead
    _refs: list[BatchRef]
    _firsts: list[int]
    _subjects: SubjectIndex
    _deleted: SeqList
    _first: int
    _last: int
    _last_ts: int
    _first_ts_at: tuple[int, int]
    _msgs: int
    _bytes: int

    @abstractmethod
    def _fetch(self, ref: BatchRef) -> pa.RecordBatch:
        """The batch behind ref."""

    # -- reads ---------------------------------------------------------------

    def load(self, seq: int) -> StoredMsg | None:
        if not self._is_live(seq):
            return None
        ref = self._locate(seq)
        batch = self._fetch(ref)
        return msg_at(batch, row_of(batch, seq, ref.dense_first))

    def load_run(self, start_seq: int, upto: int, limit: int) -> list[StoredMsg]:
        """Up to `limit` live messages from start_seq on, none above upto, from one batch.

        Converting a slice of one Arrow batch column by column costs a few calls,
        where `load` pays five scalar conversions per message: readers that walk
        the log in order (consumers) take their next messages this way.
        """
        start = self._deleted.next_absent(max(start_seq, self._first))
        hi = min(upto, self._last)
        if start > hi or limit <= 0:
            return []
        ref = self._locate(start)
        batch = self._fetch(ref)
        lo_row = row_of(batch, start, ref.dense_first)
        assert lo_row is not None, start
        hi = min(hi, ref.last)
        gaps = self._deleted.between(start, hi)
        view = seq_view(batch)
        hi_row = bisect_right(view, hi, lo_row)
        hi_row = min(hi_row, lo_row + limit + len(gaps))
        msgs = rows_between(batch, view, lo_row, hi_row)
        if gaps:
            dead = set(gaps)
            msgs = [m for m in msgs if m.seq not in dead]
        return msgs[:limit]

    def load_many(self, seqs: Sequence[int]) -> list[StoredMsg]:
        """The live messages among ascending seqs, converted a batch at a time (see load_run)."""
        out: list[StoredMsg] = []
        live = [s for s in seqs if self._is_live(s)]
        i = 0
        while i < len(live):
            ref = self._locate(live[i])
            j = bisect_right(live, ref.last, i)
            batch = self._fetch(ref)
            rows = [row_of(batch, s, ref.dense_first) for s in live[i:j]]
            if rows[-1] - rows[0] == j - i - 1:  # consecutive rows: a slice, no gather
                out += rows_between(batch, seq_view(batch), rows[0], rows[-1] + 1)
            else:
                part = batch.take(pa.array(rows, pa.int64()))
                out += rows_between(part, seq_view(part), 0, len(part))
            i = j
        return out

    def retained(self, start_seq: int, upto: int, max_bytes: int) -> tuple[list[StoredMsg], int]:
        """The rows still kept from start_seq to upto, retired ones too (the lake may yet
        want them), up to about max_bytes, and the seq they account for up to: a replica
        catching up copies them, so it can serve the lake as this store does."""
        out: list[StoredMsg] = []
        size, end = 0, min(upto, self._last)
        i = max(bisect_right(self._firsts, start_seq) - 1, 0)
        for ref in self._refs[i:]:
            if ref.first > end:
                break
            if ref.last < start_seq:
                continue
            batch = self._fetch(ref)
            view = seq_view(batch)
            lo, hi = bisect_left(view, start_seq), bisect_right(view, end)
            for msg in rows_between(batch, view, lo, hi):
                out.append(msg)
                size += len(msg.data) + len(msg.hdr or b"") + len(msg.subject)
                if size >= max_bytes:
                    return out, msg.seq
        return out, end

    def load_next(self, start_seq: int, subject_filter: str = ">") -> StoredMsg | None:
        start = max(start_seq, self._first)
        if start > self._last:
            return None
        if matches_all(subject_filter):
            seq = self._deleted.next_absent(start)
            return self.load(seq) if seq <= self._last else None
        names = self._subjects.matching(subject_filter)
        if len(names) > _FANOUT:
            return self._scan(start, subject_filter, forward=True)
        found = [s for n in names if (s := self._list(n).first_ge(start)) is not None]
        return self.load(min(found)) if found else None

    def with_header(self, name: str, *, since_ts: int = 0) -> list[StoredMsg]:
        """Filtered a batch at a time in Arrow: what a restart reads (dedup ids, TTLs)
        would cost a load per message, seconds for a million."""
        out: list[list[StoredMsg]] = []
        for ref in reversed(self._refs):
            if ref.max_ts < since_ts:
                break  # timestamps grow with seqs: every older batch is older still
            if not ref.live or not ref.headers:
                continue
            batch = self._fetch(ref)
            named = pc.match_substring(batch.column(HDR), name, ignore_case=True)
            if not pc.any(named).as_py():
                continue  # no message here carries the header (none at all without msg-ids)
            mask = pc.and_(
                self._live_mask(batch, ref.first, ref.last),
                pc.and_(pc.greater_equal(batch.column(TS), pa.scalar(since_ts, TS_TYPE)), named),
            )
            hits = batch.filter(pc.fill_null(mask, False))
            if len(hits):
                out.append(rows_between(hits, seq_view(hits), 0, len(hits)))
        return [msg for part in reversed(out) for msg in part]

    def load_last(self, subject_filter: str = ">") -> StoredMsg | None:
        if not self._msgs:
            return None
        if matches_all(subject_filter):
            return self.load(self._deleted.prev_absent(self._last))
        names = self._subjects.matching(subject_filter)
        if len(names) > _FANOUT:
            return self._scan(self._last, subject_filter, forward=False)
        return self.load(max(self._list(n).last() for n in names)) if names else None

    def state(self, *, with_deleted: bool = False) -> StoreState:
        return StoreState(
            msgs=self._msgs,
            bytes=self._bytes,
            first_seq=self._first,
            first_ts=self._first_ts() if self._msgs else 0,
            last_seq=self._last,
            last_ts=self._last_ts,
            num_subjects=len(self._subjects),
            num_deleted=len(self._deleted),
            deleted=list(self._deleted) if with_deleted else [],
        )

    def totals(self) -> tuple[int, int]:
        return self._msgs, self._bytes

    def subject_state(self, subject: str) -> SubjectState | None:
        seqs = self._subjects.get(subject)
        if seqs is None:
            return None
        return SubjectState(msgs=len(seqs), first_seq=seqs.first(), last_seq=seqs.last())

    def subjects(self, subject_filter: str = ">") -> dict[str, int]:
        return {n: len(self._list(n)) for n in self._subjects.matching(subject_filter)}

    def seqs_for(self, subject_filter: str, start_seq: int) -> Iterable[int]:
        start = max(start_seq, self._first)
        if matches_all(subject_filter):
            return self._live_between(start, self._last)
        if is_literal(subject_filter):
            seqs = self._subjects.get(subject_filter)
            return seqs.since(start) if seqs else array("Q")
        runs = [self._list(n).since(start) for n in self._subjects.matching(subject_filter)]
        return array("Q", sorted(chain.from_iterable(runs)))

    # -- lookups -------------------------------------------------------------

    def _first_ts(self) -> int:
        """The first live message's time, remembered by its seq (a message's time never
        changes): the publish rules read the state for every message of a stream with
        limits (a KV bucket), and the oldest message's batch is rarely cached."""
        seq = self._first
        if self._first_ts_at[0] != seq:
            ref = self._locate(seq)
            batch = self._fetch(ref)
            row = row_of(batch, seq, ref.dense_first)
            self._first_ts_at = (seq, batch.column(TS)[row].value)
        return self._first_ts_at[1]

    def _list(self, subject: str) -> SeqList:
        seqs = self._subjects.get(subject)
        assert seqs is not None, subject
        return seqs

    def _is_live(self, seq: int) -> bool:
        return self._first <= seq <= self._last and seq not in self._deleted

    def _ref_index(self, seq: int) -> int:
        return max(bisect_right(self._firsts, seq) - 1, 0)

    def _locate(self, seq: int) -> BatchRef:
        """The batch holding a live seq (callers check liveness first)."""
        return self._refs[bisect_right(self._firsts, seq) - 1]

    def _live_between(self, lo: int, hi: int) -> array:
        out = array("Q")
        for gap in self._deleted.since(lo):
            if gap > hi:
                break
            out.extend(range(lo, gap))
            lo = gap + 1
        out.extend(range(lo, hi + 1))
        return out

    def _live_mask(self, batch: pa.RecordBatch | pa.Table, lo: int, hi: int) -> pa.BooleanArray:
        """Rows of batch that are live and within [lo, hi]."""
        seq = batch.column(SEQ)
        mask = pc.and_(pc.greater_equal(seq, max(lo, self._first)), pc.less_equal(seq, hi))
        gaps = self._deleted.between(lo, hi)
        if gaps:
            mask = pc.and_(mask, pc.invert(pc.is_in(seq, value_set=u64(gaps))))
        return mask

    def _scan(self, start: int, subject_filter: str, *, forward: bool) -> StoredMsg | None:
        """Filtered lookup by regex over subject columns, for filters matching many subjects."""
        pattern = filter_regex(subject_filter)
        i = self._ref_index(start)
        refs = self._refs[i:] if forward else reversed(self._refs[: i + 1])
        for ref in refs:
            if not ref.live:
                continue
            batch = self._fetch(ref)
            lo, hi = (start, self._last) if forward else (self._first, start)
            mask = pc.and_(
                self._live_mask(batch, lo, hi),
                pc.match_substring_regex(batch.column(SUBJECT), pattern),
            )
            rows = pc.indices_nonzero(mask)
            if len(rows):
                return msg_at(batch, rows[0 if forward else -1].as_py())
        return None
