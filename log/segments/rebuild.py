"""Rebuilding a store's indexes at open from the rows on disk, honouring persisted deletes.

This is the one place that turns stored rows back into the in-memory state the
store maintains as it runs (`core.BatchStore`): counts, bytes, the floor, the
subject index and the interior gaps. All of it is a handful of whole-table
Arrow kernels (one hash set for the tombstones, one sort by subject), which is
what keeps start-up well under a second per million messages.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import accumulate
from typing import NamedTuple, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from log.segments.api import Overhead
from log.segments.index import SeqList, SubjectIndex
from log.segments.schema import HDR, SCHEMA, SEQ, SUBJECT, sizes, u64


class Keys(NamedTuple):
    """What the rebuild needs of stored rows: every row's seq, subject (dictionary
    encoded) and size, and per batch whether any of its rows has headers."""

    seq: pa.UInt64Array
    subject: pa.DictionaryArray
    size: pa.Int64Array
    headers: list[bool]

    @staticmethod
    def concat(parts: Sequence[Keys]) -> Keys:
        if not parts:
            return _NO_KEYS
        if len(parts) == 1:
            return parts[0]
        return Keys(
            pa.concat_arrays([k.seq for k in parts]),
            pa.concat_arrays([k.subject for k in parts]),  # dictionaries unified
            pa.concat_arrays([k.size for k in parts]),
            [h for k in parts for h in k.headers],
        )


def keys_of(table: pa.Table, rows: Sequence[int], overhead: Overhead) -> Keys:
    """The keys of rows read from segments; `rows` counts each batch's rows."""
    # Contiguous key columns: kernels over thousands of small chunks cost more
    # per chunk than the copy does (data stays chunked: it may exceed 2 GiB).
    seq = table.column(SEQ).combine_chunks()
    subject = pc.dictionary_encode(table.column(SUBJECT).combine_chunks())
    size = sizes(table, overhead).combine_chunks()
    with_hdr = pc.cast(pc.greater(pc.binary_length(table.column(HDR)), 0), pa.int64())
    running = pc.cumulative_sum(pc.fill_null(with_hdr, 0).combine_chunks())
    ends = pa.array([end - 1 for end in accumulate(rows)], pa.int64())
    headers, before = [], 0
    for count in pc.take(running, ends).to_pylist():
        headers.append(count > before)
        before = count
    return Keys(seq, subject, size, headers)


# A new stream's store opens with no rows: its keys are built once, not per stream
# (a handful of Arrow kernels on empty arrays cost about a millisecond a create).
_NO_KEYS = keys_of(pa.Table.from_batches([], SCHEMA), [], Overhead(0, 0))


class Rebuilt(NamedTuple):
    msgs: int
    bytes: int
    first: int
    subjects: SubjectIndex
    deleted: SeqList


class _Ref(Protocol):
    rows: int
    live: int
    headers: bool


def rebuild(refs: Sequence[_Ref], keys: Keys, deleted: array, floor: int, last: int) -> Rebuilt:
    """The live state of the rows of `refs` (in order, described by `keys`); sets each
    ref's `live` and `headers`."""
    if not refs:  # a new or emptied store: nothing for the kernels to do
        return Rebuilt(0, 0, last + 1, SubjectIndex(), SeqList())
    for ref, headers in zip(refs, keys.headers, strict=True):
        ref.headers = headers
    seq, subject, size = keys.seq, keys.subject, keys.size
    mask = pc.greater_equal(seq, floor)
    if deleted:
        mask = pc.and_(mask, pc.invert(pc.is_in(seq, value_set=u64(deleted))))
    if not pc.all(mask).as_py():
        offset = 0
        for ref in refs:
            ref.live = pc.sum(mask.slice(offset, ref.rows)).as_py() or 0
            offset += ref.rows
        seq, subject, size = seq.filter(mask), subject.filter(mask), size.filter(mask)
    return Rebuilt(
        msgs=len(seq),
        bytes=pc.sum(size).as_py() or 0,
        first=seq[0].as_py() if len(seq) else last + 1,
        subjects=_subject_index(subject, seq),
        deleted=SeqList(_gaps(seq, last)),
    )


def _subject_index(encoded: pa.DictionaryArray, seq: pa.UInt64Array) -> SubjectIndex:
    order = pc.sort_indices(encoded.indices)
    runs = pc.run_end_encode(pc.take(encoded.indices, order))
    names = encoded.dictionary.to_pylist()
    raw = memoryview(pc.take(seq, order).buffers()[1])
    start = 0
    index = SubjectIndex()
    for end, key in zip(runs.run_ends.to_pylist(), runs.values.to_pylist(), strict=True):
        seqs = array("Q")
        seqs.frombytes(raw[start * 8 : end * 8])
        index.load(names[key], seqs)
        start = end
    return index


def _gaps(live_seq: pa.UInt64Array, last: int) -> array:
    """Interior seqs with no live message: deleted, compacted away or unreadable."""
    gaps = array("Q")
    if not len(live_seq):
        return gaps
    step = pc.subtract(live_seq[1:], live_seq[:-1])
    for i in pc.indices_nonzero(pc.greater(step, 1)).to_pylist():
        gaps.extend(range(live_seq[i].as_py() + 1, live_seq[i + 1].as_py()))
    gaps.extend(range(live_seq[-1].as_py() + 1, last + 1))
    return gaps
