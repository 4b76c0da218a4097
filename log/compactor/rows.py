"""Segment rows as lake rows: the one conversion the compactor and the union read share.

Lake schema: `stream string, seq bigint, ts timestamp (µs, UTC), subject
string, headers map<string, array<string>>, data binary, date date (UTC)`.
Spark has no unsigned or nanosecond types, so seq becomes int64 (JetStream
seqs stay far below 2^63) and ts is truncated to microseconds; the header
block is parsed with the server's own parser, every value kept. A block that
does not parse becomes null headers rather than failing a whole segment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from ingest.parser.headers import HeaderError, parse_headers
from ingest.parser.subjects import is_literal
from log.segments.schema import DATA, HDR, SEQ, SUBJECT, TS
from log.segments.subjects import filter_regex, matches_all
from log.segments.tombstones import Erasure

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import StructType

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


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of lake rows (typed ones too), every column nullable as in SPARK_DDL:
    a NOT NULL column would make Delta add a constraint to the table."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(pa.schema([f.with_nullable(True) for f in schema]))


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


def drop_erased(table: pa.Table, erasures: list[Erasure]) -> pa.Table:
    """Rows no erasure covers (explicit deletes and purges), in either schema."""
    if not erasures or not len(table):
        return table
    bounds = pc.min_max(table.column("seq"))  # the same names in both schemas
    lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
    near = [e for e in erasures if e.first <= hi and e.last >= lo]
    return table.filter(pc.invert(erased_rows(near))) if near else table


def erased_rows(erasures: list[Erasure]) -> pc.Expression:
    """The rule as an Arrow expression, true for the rows the erasures cover: it filters a
    table here and an Arrow dataset (the lake part of `jetlake inspect`) alike."""
    seq, subject = pc.field("seq"), pc.field("subject")
    cond: pc.Expression | None = None
    for e in erasures:
        hit = (seq >= e.first) & (seq <= e.last)
        if not matches_all(e.subject_filter):
            if is_literal(e.subject_filter):
                hit = hit & (subject == e.subject_filter)
            else:
                hit = hit & pc.match_substring_regex(subject, filter_regex(e.subject_filter))
        cond = hit if cond is None else cond | hit
    assert cond is not None, "no erasures"
    return cond


def erased(erasures: list[Erasure]) -> Column:
    """The same rule as a Spark condition: true for the rows the erasures cover."""
    from pyspark.sql import functions as F

    cond: Column | None = None
    for e in erasures:
        hit = F.col("seq").between(e.first, e.last)
        if not matches_all(e.subject_filter):
            subject = F.col("subject")
            if is_literal(e.subject_filter):
                hit = hit & (subject == e.subject_filter)
            else:  # the RE2 pattern is also a Java one: classes, `.+`, escaped literals
                hit = hit & subject.rlike(filter_regex(e.subject_filter))
        cond = hit if cond is None else cond | hit
    assert cond is not None, "no erasures"
    return cond
