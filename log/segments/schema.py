"""The segment row schema and the conversions between messages and record batches.

The column names and types are a contract with the lake (`log/compactor`) and
with anyone pointing pyarrow or DuckDB at a segment file, so they live in one
place. `subject` is a plain string column: dictionary encoding would save a
little space but IPC streams may not replace a dictionary between batches,
which would tie every batch of a segment to one growing dictionary.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left

import pyarrow as pa
import pyarrow.compute as pc

from log.segments.api import Overhead, StoredMsg

TS_TYPE = pa.timestamp("ns", tz="UTC")
SCHEMA = pa.schema(
    [
        pa.field("seq", pa.uint64(), nullable=False),
        pa.field("ts", TS_TYPE, nullable=False),
        pa.field("subject", pa.string(), nullable=False),
        pa.field("hdr", pa.binary()),
        pa.field("data", pa.binary(), nullable=False),
    ]
)
SEQ, TS, SUBJECT, HDR, DATA = range(5)


def stream_header() -> bytes:
    """The IPC schema message a segment file starts with (no end-of-stream marker).

    Batches serialised as `RecordBatch.serialize()` does (`log.segments.ipc`) are
    appended after it, so a file is a valid IPC stream after every whole batch.
    """
    sink = pa.BufferOutputStream()
    pa.ipc.new_stream(sink, SCHEMA).close()
    return sink.getvalue().to_pybytes()[:-8]


def sizes(batch: pa.RecordBatch | pa.Table, overhead: Overhead) -> pa.Array | pa.ChunkedArray:
    """`api.msg_size` of every row, vectorised (subject and headers in bytes).

    Constants go in as Arrow scalars: given a Python int, pyarrow retries a failing
    `import dateutil` on every call, which costs ten times the kernel itself.
    """
    hdr_len = pc.binary_length(batch.column(HDR))
    with_headers = pa.scalar(overhead.with_headers, hdr_len.type)
    hdr_part = pc.fill_null(pc.add(hdr_len, with_headers), pa.scalar(0, hdr_len.type))
    total = pc.add(pc.binary_length(batch.column(SUBJECT)), hdr_part)
    total = pc.add(total, pc.binary_length(batch.column(DATA)))
    return pc.add(pc.cast(total, pa.int64()), pa.scalar(overhead.base, pa.int64()))


def u64(seqs: array) -> pa.UInt64Array:
    """An Arrow view of an `array('Q')` without copying it."""
    return pa.Array.from_buffers(pa.uint64(), len(seqs), [None, pa.py_buffer(seqs)])


def seq_view(batch: pa.RecordBatch) -> memoryview:
    """The seq column as a memoryview of uint64, for bisecting without copies."""
    col = batch.column(SEQ)
    view = memoryview(col.buffers()[1]).cast("Q")
    return view[col.offset : col.offset + len(col)]


def row_of(batch: pa.RecordBatch, seq: int, dense_first: int | None) -> int | None:
    """Row index of seq in the batch.

    A batch as appended holds consecutive seqs (`dense_first` is its first), so
    the row is arithmetic; compacted batches have gaps and are bisected.
    """
    if dense_first is not None:
        row = seq - dense_first
        return row if 0 <= row < len(batch) else None
    view = seq_view(batch)
    row = bisect_left(view, seq)
    return row if row < len(view) and view[row] == seq else None


def row_size(batch: pa.RecordBatch, row: int, overhead: Overhead) -> int:
    """`api.msg_size` of one row from the columns' offset buffers, without converting it.

    Half the cost of `msg_at` plus `msg_size`: deletes one at a time (per-subject
    limits) only need the byte count.
    """
    subject = _value_len(batch.column(SUBJECT), row)
    hdr = _value_len(batch.column(HDR), row)
    size = overhead.base + subject + _value_len(batch.column(DATA), row)
    return size + overhead.with_headers + hdr if hdr else size


def _value_len(col: pa.Array, row: int) -> int:
    """Bytes of a string/binary value (0 for null: its offsets are equal)."""
    offsets = memoryview(col.buffers()[1]).cast("i")
    i = col.offset + row
    return offsets[i + 1] - offsets[i]


def msg_at(batch: pa.RecordBatch, row: int) -> StoredMsg:
    return StoredMsg(
        seq=batch.column(SEQ)[row].as_py(),
        ts=batch.column(TS)[row].value,
        subject=batch.column(SUBJECT)[row].as_py(),
        hdr=batch.column(HDR)[row].as_py(),
        data=batch.column(DATA)[row].as_py(),
    )


def rows_between(batch: pa.RecordBatch, seqs: memoryview, lo: int, hi: int) -> list[StoredMsg]:
    """Rows lo..hi-1 as messages, converted a column at a time (`seqs` is `seq_view`)."""
    part = batch.slice(lo, hi - lo)
    ts = part.column(TS)
    stamps = memoryview(ts.buffers()[1]).cast("q")[ts.offset : ts.offset + len(ts)]
    return list(
        map(
            StoredMsg,
            seqs[lo:hi].tolist(),
            stamps.tolist(),
            part.column(SUBJECT).to_pylist(),
            part.column(HDR).to_pylist(),
            part.column(DATA).to_pylist(),
        )
    )
