"""Segment rows as lake rows: the one conversion the compactor and the union read share.

Lake schema: `stream string, seq bigint, ts timestamp (µs, UTC), subject
string, headers map<string, array<string>>, data binary, date date (UTC)`.
Spark has no unsigned or nanosecond types, so seq becomes int64 (JetStream
seqs stay far below 2^63) and ts is truncated to microseconds; the header
block is parsed with the server's own parser, every value kept. A block that
does not parse becomes null headers rather than failing a whole segment.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ingest.parser.headers import HeaderError, parse_headers
from log.segments.schema import DATA, HDR, SEQ, SUBJECT, TS

HEADERS_TYPE = pa.map_(pa.string(), pa.list_(pa.string()))
LAKE_SCHEMA = pa.schema(
    [
        pa.field("stream", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("subject", pa.string(), nullable=False),
        pa.field("headers", HEADERS_TYPE),
        pa.field("data", pa.binary()),
        pa.field("date", pa.date32(), nullable=False),
    ]
)
SPARK_DDL = (
    "stream STRING, seq BIGINT, ts TIMESTAMP, subject STRING, "
    "headers MAP<STRING, ARRAY<STRING>>, data BINARY, date DATE"
)


def _headers(block: bytes | None) -> list[tuple[str, list[str]]] | None:
    if block is None:
        return None
    try:
        return list(parse_headers(block)[2].items())
    except HeaderError:
        return None


def to_lake(stream: str, table: pa.Table) -> pa.Table:
    """Segment-schema rows (seq, ts, subject, hdr, data) as lake-schema rows."""
    ts = table.column(TS)
    headers = pa.array([_headers(h) for h in table.column(HDR).to_pylist()], HEADERS_TYPE)
    return pa.Table.from_arrays(
        [
            pa.array([stream] * len(table), pa.string()),
            pc.cast(table.column(SEQ), pa.int64()),
            pc.cast(ts, pa.timestamp("us", tz="UTC"), safe=False),
            pc.cast(table.column(SUBJECT), pa.string()),
            headers,
            table.column(DATA),
            pc.cast(ts, pa.date32()),
        ],
        schema=LAKE_SCHEMA,
    )


def drop_runs(table: pa.Table, runs: list[tuple[int, int]]) -> pa.Table:
    """Rows whose seq is in none of the inclusive runs (explicit deletes)."""
    if not runs or not len(table):
        return table
    seq = table.column("seq")  # the same name in both schemas
    bounds = pc.min_max(seq)
    lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
    keep = None
    for first, last in runs:
        if last < lo or first > hi:
            continue
        inside = pc.and_(pc.greater_equal(seq, first), pc.less_equal(seq, last))
        keep = pc.invert(inside) if keep is None else pc.and_(keep, pc.invert(inside))
    return table if keep is None else table.filter(keep)
