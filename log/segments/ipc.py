"""New messages as the Arrow IPC message a segment stores, written without building arrays.

A group commit usually writes a few messages, and for a few rows pyarrow's
conversion from Python objects is almost all overhead: 22 µs to build and
serialise one row, against 7 µs to write the same bytes here. For this
module's single schema the message is always the same shape: a metadata
flatbuffer of fixed layout (a template taken from pyarrow at import) whose
numbers (row count, body length, 13 buffer spans, 5 field nodes) are patched
in, then the body: each buffer padded to 8 bytes, a validity bitmap only for
`hdr` when some are missing.

The bytes are pyarrow's own, byte for byte: the import checks that on sample
batches (and the tests on random ones). Should a pyarrow release lay the
metadata out otherwise, the check fails and every batch goes through pyarrow
instead (`arrow_batch`), slower but identical on disk.

`jetlake_native.encode_batch` (native/src/ipc.rs) writes the same bytes from
the same template when the extension is installed: `_encode` is its reference
and its fallback, as `ingest.parser.nats` is for the codec.
"""

from __future__ import annotations

import itertools
import logging
import struct
from array import array
from collections.abc import Sequence

import pyarrow as pa

from ingest.parser.fast import native
from log.segments.api import NewMsg, Overhead, Rows
from log.segments.schema import SCHEMA, TS_TYPE, u64

log = logging.getLogger("jetlake.segments")

# The columns a message brings, in NewMsg's field order: a batch of messages converts
# in one call (each pyarrow conversion also reads an environment variable, which
# costs more than converting a group commit's few rows).
_NEW_MSG = pa.struct(
    [
        pa.field("subject", pa.string(), nullable=False),
        pa.field("hdr", pa.binary()),
        pa.field("data", pa.binary(), nullable=False),
        pa.field("ts", pa.int64(), nullable=False),
    ]
)


def arrow_batch(first_seq: int, msgs: Sequence[NewMsg]) -> pa.RecordBatch:
    """The rows through pyarrow: the reference for `encode_batch`, and its fallback."""
    subject, hdr, data, ts = pa.array(msgs, _NEW_MSG).flatten()
    seqs = array("Q", range(first_seq, first_seq + len(msgs)))
    return pa.RecordBatch.from_arrays(
        [u64(seqs), ts.view(TS_TYPE), subject, hdr, data], schema=SCHEMA
    )


def decode_batch(payload: bytes | pa.Buffer) -> pa.RecordBatch:
    """A stored IPC message as a record batch, over the same memory."""
    return pa.ipc.read_record_batch(pa.py_buffer(payload), SCHEMA)


# Where the numbers sit in the metadata (continuation and length prefix included).
_BODY_LENGTH, _ROWS, _SPANS, _NODES = 40, 72, 88, 304
_LAYOUT = (_BODY_LENGTH, _ROWS, _SPANS, _NODES)
_INT = struct.Struct("<q")
_SPAN_LIST = struct.Struct("<26q")  # 13 buffers: offset, length
_NODE_LIST = struct.Struct("<10q")  # 5 columns: length, null count
_PAD = [b"", *(bytes(8 - k) for k in range(1, 8))]  # by size % 8


def _template() -> bytes:
    one = arrow_batch(1, [NewMsg("s", None, b"x", 1)]).serialize().to_pybytes()
    return one[: 8 + int.from_bytes(one[4:8], "little")]


_META = _template()


def _add(parts: list[bytes], spans: list[int], pos: int, blob: bytes) -> int:
    size = len(blob)
    parts.append(blob)
    parts.append(_PAD[size % 8])
    spans += (pos, size)
    return pos + size + (-size % 8)


def _add_values(parts: list[bytes], spans: list[int], pos: int, values: list[bytes]) -> int:
    """A variable-width column's offsets and data."""
    offsets = array("i", [0])
    offsets.extend(itertools.accumulate(map(len, values)))
    pos = _add(parts, spans, pos, offsets.tobytes())
    return _add(parts, spans, pos, b"".join(values))


def _encode(first_seq: int, msgs: Sequence[NewMsg]) -> bytes:
    n = len(msgs)
    parts = [b""]  # the metadata goes first, once the spans are known
    spans = [0, 0]  # seq: no validity bitmap (nor for ts, subject and data)
    pos = _add(parts, spans, 0, array("Q", range(first_seq, first_seq + n)).tobytes())
    spans += (pos, 0)
    pos = _add(parts, spans, pos, array("q", [m.ts for m in msgs]).tobytes())
    spans += (pos, 0)
    pos = _add_values(parts, spans, pos, [m.subject.encode() for m in msgs])
    hdrs = [m.hdr for m in msgs]
    missing = hdrs.count(None)
    if missing:
        present = sum(1 << i for i, h in enumerate(hdrs) if h is not None)
        pos = _add(parts, spans, pos, present.to_bytes((n + 7) // 8, "little"))
    else:
        spans += (pos, 0)
    pos = _add_values(parts, spans, pos, [h or b"" for h in hdrs])
    spans += (pos, 0)
    pos = _add_values(parts, spans, pos, [m.data for m in msgs])
    meta = bytearray(_META)
    _INT.pack_into(meta, _BODY_LENGTH, pos)
    _INT.pack_into(meta, _ROWS, n)
    _SPAN_LIST.pack_into(meta, _SPANS, *spans)
    _NODE_LIST.pack_into(meta, _NODES, n, 0, n, 0, n, 0, n, missing, n, 0)
    parts[0] = bytes(meta)
    return b"".join(parts)


def _layout_holds() -> bool:
    """The template's field positions are right for this pyarrow: checked on sample batches."""
    samples = [
        [NewMsg("a.b", None, b"", 7)],
        [NewMsg("é", b"NATS/1.0\r\n\r\n", b"x" * 9, 1), NewMsg("c", None, b"yz", 2)],
        [NewMsg(f"s.{i}", b"h" * i, b"d" * (i * 3), i) for i in range(11)],
    ]
    return all(
        _encode(first, msgs) == arrow_batch(first, msgs).serialize().to_pybytes()
        for first, msgs in zip((1, 2**40, 99), samples, strict=True)
    )


FAST = _layout_holds()
if not FAST:
    log.warning("pyarrow %s lays out IPC metadata otherwise: batches go through it", pa.__version__)


def encode_batch(first_seq: int, msgs: Sequence[NewMsg]) -> bytes:
    """The IPC message of msgs numbered from first_seq, as `RecordBatch.serialize()` writes it."""
    if FAST:
        if native is not None:
            # None: a field is not a plain str or bytes (a bytearray payload)
            encoded: bytes | None = native.encode_batch(_META, _LAYOUT, first_seq, msgs)
            if encoded is not None:
                return encoded
        return _encode(first_seq, msgs)
    return arrow_batch(first_seq, msgs).serialize().to_pybytes()


def run_rows(entry: bytes, at: int, count: int, overhead: Overhead) -> Rows | None:
    """The `count` publishes of a replicated run's log entry from byte `at`, as a batch
    written straight from those bytes (native/src/entries.rs), sizes counted by `overhead`;
    None without the extension or when they are not all plain (see `run_rows` there)."""
    if not FAST or native is None:
        return None
    found = native.run_rows(entry, at, count, _META, _LAYOUT, overhead)
    return None if found is None else Rows(*found)
