"""A sealed segment's key columns in a sidecar, so opening a store need not decode it.

Layout: `<first seq, 20 digits>.<generation>.sum` beside the segment pair:
    8 bytes   magic and version
    4 bytes   crc32 of everything after it
    the rest  an Arrow IPC stream of one batch: seq, subject (dictionary), size
              (`api.msg_size` with the store's overhead), every row of the
              segment in seq order, deleted ones too (deletes are applied at open
              from the delete log, as for rows read from the segment itself).

The schema's metadata holds the segment identity the summary was made for
(base, generation, data length, crc32 of the index file, the size overhead)
and one header flag per batch (`BatchRef.headers`).

A summary is a cache, never a record: it is written off the event loop after
the segment is sealed, renamed into place without an fsync, and trusted only
when its checksum holds and its identity matches the segment on disk. A torn,
stale or missing summary is ignored and the segment is read as before (then
summarized again), so a crash at any point costs at most one slower open.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pyarrow as pa

from log.segments.api import Overhead
from log.segments.rebuild import Keys

SUFFIX = ".sum"
_MAGIC = b"JLSUM\x00\x00\x01"
_HEAD = len(_MAGIC) + 4


def identity(base: int, gen: int, size: int, idx: bytes, overhead: Overhead) -> bytes:
    """What ties a summary to one segment's exact bytes (the index's crc covers every
    batch's offset, length, seqs and checksum)."""
    return f"{base} {gen} {size} {zlib.crc32(idx)} {overhead.base} {overhead.with_headers}".encode()


def write_summary(path: Path, keys: Keys, ident: bytes) -> None:
    """Write the summary under its final name (a crash leaves a `.tmp`, cleaned at open)."""
    flags = bytes(48 + h for h in keys.headers)
    batch = pa.RecordBatch.from_arrays(
        [keys.seq, keys.subject, keys.size], names=["seq", "subject", "size"]
    )
    schema = batch.schema.with_metadata({b"ident": ident, b"headers": flags})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(batch)
    body = sink.getvalue()
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(_MAGIC + zlib.crc32(body).to_bytes(4, "little"))
        f.write(body)
    os.replace(tmp, path)


def read_summary(path: Path, ident: bytes, rows: int) -> Keys | None:
    """The keys, or None when the file is missing, torn, or made for other bytes."""
    # Mapped, not read into the heap: a start reads every summary (20 B a message), and
    # heap pages freed by worker threads stay with the allocator long after the start.
    try:
        with pa.memory_map(str(path)) as f:
            data = f.read_buffer()
    except FileNotFoundError:
        return None
    head = data.slice(0, min(_HEAD, data.size)).to_pybytes()
    body = data.slice(len(head))
    if head[: len(_MAGIC)] != _MAGIC or zlib.crc32(body) != int.from_bytes(
        head[len(_MAGIC) :], "little"
    ):
        return None
    try:
        table = pa.ipc.open_stream(body).read_all()
    except (pa.ArrowInvalid, OSError):
        return None
    meta = table.schema.metadata or {}
    if meta.get(b"ident") != ident or table.num_rows != rows or table.num_columns != 3:
        return None
    seq, subject, size = (table.column(i).combine_chunks() for i in range(3))
    headers = [flag == 49 for flag in meta.get(b"headers", b"")]
    return Keys(seq, subject, size, headers)
