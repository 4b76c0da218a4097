"""The store logic shared by the file and memory stores, over a list of record batches.

Both stores keep messages as Arrow record batches (one per `append`), so every
rule (liveness, deletes, subject index, filtered lookups) is written once here
against four hooks: write a batch, fetch a batch, persist deletes, reclaim
space. The subclasses differ only in where batches live.

Liveness is `first <= seq <= last and seq not in deleted`, where `deleted` holds
the interior gaps only: that keeps `num_deleted` exact for free and makes a
delete below the floor (limits, max_age, purge) a front trim, not a set insert.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from itertools import chain

import pyarrow as pa
import pyarrow.compute as pc

from ingest.parser.subjects import is_literal
from log.segments.api import (
    FILE_OVERHEAD,
    NewMsg,
    Overhead,
    Rows,
    StoredMsg,
    StoreError,
    StoreState,
    SubjectState,
    msg_size,
)
from log.segments.index import SeqList, SubjectIndex
from log.segments.ipc import encode_batch
from log.segments.rebuild import Keys, rebuild
from log.segments.schema import (
    HDR,
    SEQ,
    SUBJECT,
    TS,
    TS_TYPE,
    msg_at,
    row_of,
    row_size,
    rows_between,
    seq_view,
    sizes,
    u64,
)
from log.segments.subjects import filter_regex, matches_all
from log.segments.tombstones import Erasure

# Above this many matching subjects a filtered lookup scans batches with a regex
# in C instead of bisecting every subject's sequence list.
_FANOUT = 64
# Up to this many deletes in one batch are sized row by row: per-subject limits
# (a KV put retires the key's oldest revision) delete one message at a time, and
# a dozen Arrow kernel calls over the whole batch cost far more than that.
_FEW_ROWS = 8
# Batches whose per-row byte counts are kept from their append: the newest, where
# per-subject limits (a KV put retiring the key's previous revision) delete.
_COUNTED_BATCHES = 4096
_NONE_COUNTED = array("Q")


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


class BatchStore(ABC):
    """`MsgStore` over batches; subclasses say where the batches are kept."""

    overhead: Overhead = FILE_OVERHEAD  # how the reference's matching store counts bytes
    lake_mark: int | None = None  # rows above it are kept for the lake (`hold_for_lake`)

    def __init__(self, name: str) -> None:
        self.name = name
        self._refs: list[BatchRef] = []
        self._firsts: list[int] = []
        self._subjects = SubjectIndex()
        # ref -> (its first seq then, bytes of each seq from it): a seq's size never changes
        self._counted: OrderedDict[BatchRef, tuple[int, array]] = OrderedDict()
        self._deleted = SeqList()
        self._first = 1
        self._last = 0
        self._last_ts = 0
        self._first_ts_at = (0, 0)  # (seq, its time): see `_first_ts`
        self._msgs = 0
        self._bytes = 0

    # -- hooks ---------------------------------------------------------------

    @abstractmethod
    def _write(
        self, payload: bytes, first: int, last: int, rows: int, min_ts: int, max_ts: int
    ) -> BatchRef:
        """Keep a new batch (its IPC message; buffered write for files) and return its reference."""

    @abstractmethod
    def _fetch(self, ref: BatchRef) -> pa.RecordBatch:
        """The batch behind ref."""

    @abstractmethod
    def _persist_deletes(self, seqs: array) -> None:
        """Record deleted seqs and the current floor (`_first`) so they survive restart."""

    @abstractmethod
    def _reclaim(self, refs: list[BatchRef]) -> None:
        """Give back the space of batches whose rows were just deleted, if worth it."""

    @abstractmethod
    def _persist_explicit(self, erasures: list[Erasure]) -> None:
        """Record what a client erased, for the lake to erase too."""

    # -- writes --------------------------------------------------------------

    def append(self, msgs: Sequence[NewMsg]) -> int:
        first = self._last + 1
        if not msgs:
            return first
        payload = encode_batch(first, msgs)
        # In Python: compute calls cost more than a group commit's few rows.
        stamps = [m.ts for m in msgs]
        counted = array("Q", [msg_size(m.subject, m.hdr, m.data, self.overhead) for m in msgs])
        subjects = [m.subject for m in msgs]
        span = (min(stamps), max(stamps), msgs[-1].ts)
        self._keep(payload, first, subjects, counted, sum(counted), span)
        return first

    def append_rows(self, rows: Rows) -> None:
        if rows.first != self._last + 1:
            raise StoreError(
                f"stream {self.name}: rows from seq {rows.first}, "
                f"the store's next is {self._last + 1}"
            )
        counted = array("Q")
        counted.frombytes(rows.sizes)
        span = (rows.min_ts, rows.max_ts, rows.last_ts)
        self._keep(rows.payload, rows.first, rows.subjects, counted, rows.total, span)

    def _keep(
        self,
        payload: bytes,
        first: int,
        subjects: list[str],
        counted: array,
        total: int,
        span: tuple[int, int, int],
    ) -> None:
        """Write a batch and index it; `span` is its least, greatest and last timestamp."""
        min_ts, max_ts, last_ts = span
        last = first + len(subjects) - 1
        ref = self._write(payload, first, last, len(subjects), min_ts, max_ts)
        self._counted[ref] = (first, counted)
        if len(self._counted) > _COUNTED_BATCHES:
            self._counted.popitem(last=False)
        self._refs.append(ref)
        self._firsts.append(first)
        self._subjects.add(subjects, first)
        self._last = last
        self._last_ts = last_ts
        self._msgs += len(subjects)
        self._bytes += total

    def remove(self, seq: int, *, explicit: bool = False) -> bool:
        if not self._unindex(seq):
            return False
        if explicit:
            self._persist_explicit([Erasure(seq, seq)])
        self._forget(array("Q", [seq]))
        return True

    def remove_many(self, seqs: Iterable[int]) -> int:
        victims = array("Q", (seq for seq in sorted(set(seqs)) if self._unindex(seq)))
        if victims:
            self._forget(victims)
        return len(victims)

    def _unindex(self, seq: int) -> bool:
        """Take a live message out of the subject index (the first half of a delete)."""
        if not self._is_live(seq):
            return False
        ref = self._locate(seq)
        batch = self._fetch(ref)
        row = row_of(batch, seq, ref.dense_first)
        self._subjects.remove(batch.column(SUBJECT)[row].as_py(), seq)
        return True

    def purge(
        self,
        subject_filter: str = ">",
        *,
        upto_seq: int = 0,
        keep: int = 0,
        explicit: bool = False,
    ) -> int:
        """Victims match the filter, are not among the newest `keep` matches, and are < upto_seq.

        An explicit purge is logged for the lake as what it covers (every seq below
        its bound the filter matches), not as the victims: the lake also holds rows
        the limits retired from here, and they are purged too.
        """
        bound = upto_seq if upto_seq else self._last + 1
        if matches_all(subject_filter):
            if keep:
                if keep >= self._msgs:
                    return 0
                newest = self._last + 1
                for _ in range(keep):
                    newest = self._deleted.prev_absent(newest - 1)
                bound = min(bound, newest)
            if explicit:
                self._log_purge(bound, ">")
            return self._advance_floor(bound)
        names = self._subjects.matching(subject_filter)
        if keep:
            counts = [len(self._list(n)) for n in names]
            if keep >= sum(counts):
                return 0
            newest = sorted(chain.from_iterable(self._list(n).since(0) for n in names))
            bound = min(bound, newest[len(newest) - keep])
        if explicit:
            self._log_purge(bound, subject_filter)
        runs = []
        for name in names:
            below = self._list(name).below(bound)
            if below:
                runs.append(below)
                self._subjects.drop_below(name, bound)
        victims = array("Q", sorted(chain.from_iterable(runs)))
        if victims:
            self._forget(victims)
        return len(victims)

    def _log_purge(self, bound: int, subject_filter: str) -> None:
        """What a purge covers, for the lake: every seq below its bound the filter matches."""
        if bound > 1:
            self._persist_explicit([Erasure(1, min(bound - 1, self._last), subject_filter)])

    def trim_subjects(self, subjects: Iterable[str], keep: int) -> int:
        """Straight from the subject index, one delete-log record and reclaim for all.

        A KV put retires its key's previous revision: a filtered purge per subject
        (matching, sorting, its own delete record) cost more than the put itself.
        """
        assert keep > 0, keep  # so no subject's list empties here
        victims = array("Q")
        for subject in subjects:
            victims += self._subjects.trim(subject, keep)
        if victims:
            self._forget(array("Q", sorted(victims)))
        return len(victims)

    @abstractmethod
    def set_compression(self, codec: str | None) -> None:
        """Codec for segments sealed from now on (see the MsgStore protocol)."""

    def compact(self, first_seq: int) -> int:
        """Past the end, the empty log's bounds move and are persisted like a purge's floor."""
        if first_seq <= self._last + 1:
            return self._advance_floor(first_seq)
        removed = self._advance_floor(self._last + 1)
        self._last = first_seq - 1
        self._first = first_seq
        self._deleted = SeqList()
        self._persist_deletes(array("Q"))
        return removed

    def skip(self, next_seq: int) -> None:
        """Only the new last seq is persisted: at open, seqs missing below a stored message
        are gaps (deleted) anyway, and a skip is always followed by that message."""
        if next_seq <= self._last + 1:
            return
        if not self._msgs:
            self.compact(next_seq)
            return
        self._deleted.add_sorted(range(self._last + 1, next_seq))
        self._last = next_seq - 1
        self._persist_deletes(array("Q"))

    def expire_before(self, ts: int) -> int:
        """Stops at the first message not older than ts, as the reference does."""
        bound = self._first
        cutoff = pa.scalar(ts, TS_TYPE)
        for ref in self._refs[self._ref_index(self._first) :]:
            if ref.live and ref.max_ts >= ts:
                batch = self._fetch(ref)
                young = pc.and_(
                    pc.greater_equal(batch.column(TS), cutoff),
                    pc.greater_equal(batch.column(SEQ), bound),
                )
                row = pc.index(young, True).as_py()
                if row >= 0:
                    return self._advance_floor(batch.column(SEQ)[row].as_py())
            bound = ref.last + 1
        return self._advance_floor(bound)

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

    # -- internals -----------------------------------------------------------

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

    def _advance_floor(self, bound: int) -> int:
        """Delete every live message below bound, in bulk, per batch in C."""
        bound = min(bound, self._last + 1)
        if bound <= self._first:
            return 0
        if bound == self._last + 1:
            removed = self._msgs
            touched = [r for r in self._refs[self._ref_index(self._first) :] if r.live]
            for ref in touched:
                ref.live = 0
            self._subjects = SubjectIndex()
            self._bytes = 0
        else:
            removed, touched, subjects = 0, [], set()
            for ref in self._refs[self._ref_index(self._first) :]:
                if ref.first >= bound:
                    break
                if not ref.live:
                    continue
                batch = self._fetch(ref)
                mask = self._live_mask(batch, self._first, bound - 1)
                n = pc.sum(mask).as_py() or 0
                if n:
                    subjects.update(pc.unique(pc.filter(batch.column(SUBJECT), mask)).to_pylist())
                    self._bytes -= pc.sum(pc.filter(sizes(batch, self.overhead), mask)).as_py()
                    ref.live -= n
                    removed += n
                    touched.append(ref)
            for subject in subjects:
                self._subjects.drop_below(subject, bound)
        self._msgs -= removed
        self._deleted.remove_below(bound)
        self._first = self._deleted.next_absent(bound)
        self._deleted.remove_below(self._first)
        self._persist_deletes(array("Q"))
        self._reclaim(touched)
        return removed

    def _forget(self, victims: array) -> None:
        """Account for live seqs already taken out of the subject index."""
        touched = []
        i = 0
        while i < len(victims):
            ref = self._locate(victims[i])
            j = bisect_right(victims, ref.last, i)
            base, counted = self._counted.get(ref, (0, _NONE_COUNTED))
            if base <= victims[i] and victims[j - 1] < base + len(counted):
                self._bytes -= sum(counted[seq - base] for seq in victims[i:j])
            elif j - i <= _FEW_ROWS:
                batch = self._fetch(ref)
                rows = (row_of(batch, seq, ref.dense_first) for seq in victims[i:j])
                self._bytes -= sum(row_size(batch, r, self.overhead) for r in rows if r is not None)
            else:
                batch = self._fetch(ref)
                mask = pc.is_in(batch.column(SEQ), value_set=u64(victims[i:j]))
                self._bytes -= pc.sum(pc.filter(sizes(batch, self.overhead), mask)).as_py()
            ref.live -= j - i
            touched.append(ref)
            i = j
        self._msgs -= len(victims)
        self._deleted.add_sorted(victims)
        self._first = self._deleted.next_absent(self._first)
        self._deleted.remove_below(self._first)
        self._persist_deletes(victims)
        self._reclaim(touched)

    def _install(self, refs: list[BatchRef], keys: Keys, deleted: array, floor: int) -> None:
        """Take the indexes rebuilt from the rows found at open (see `rebuild`)."""
        self._refs = refs
        self._firsts = [r.first for r in refs]
        got = rebuild(refs, keys, deleted, floor, self._last)
        self._msgs, self._bytes, self._first = got.msgs, got.bytes, got.first
        self._subjects, self._deleted = got.subjects, got.deleted
