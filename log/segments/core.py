"""The store logic shared by the file and memory stores, over a list of record batches.

Both stores keep messages as Arrow record batches (one per `append`), so every
rule (liveness, deletes, subject index, filtered lookups) is written once, here
and in `log.segments.reads` (the lookups), against five hooks: write a batch,
fetch a batch, persist deletes, reclaim space, record erasures. The subclasses
differ only in where batches live.

Liveness is `first <= seq <= last and seq not in deleted`, where `deleted` holds
the interior gaps only: that keeps `num_deleted` exact for free and makes a
delete below the floor (limits, max_age, purge) a front trim, not a set insert.
"""

from __future__ import annotations

from abc import abstractmethod
from array import array
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from itertools import chain

import pyarrow as pa
import pyarrow.compute as pc

from log.segments.api import (
    FILE_OVERHEAD,
    NewMsg,
    Overhead,
    Rows,
    StoreError,
    msg_size,
)
from log.segments.index import SeqList, SubjectIndex
from log.segments.ipc import encode_batch
from log.segments.reads import BatchReads, BatchRef
from log.segments.rebuild import Keys, rebuild
from log.segments.schema import (
    SEQ,
    SUBJECT,
    TS,
    TS_TYPE,
    row_of,
    row_size,
    sizes,
    u64,
)
from log.segments.subjects import matches_all
from log.segments.tombstones import Erasure

# Up to this many deletes in one batch are sized row by row: per-subject limits
# (a KV put retires the key's oldest revision) delete one message at a time, and
# a dozen Arrow kernel calls over the whole batch cost far more than that.
_FEW_ROWS = 8
# Batches whose per-row byte counts are kept from their append: the newest, where
# per-subject limits (a KV put retiring the key's previous revision) delete.
_COUNTED_BATCHES = 4096
_NONE_COUNTED = array("Q")


class BatchStore(BatchReads):
    """`MsgStore` over batches; subclasses say where the batches are kept (the reads are
    `BatchReads`'s)."""

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

    # -- internals -----------------------------------------------------------

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
