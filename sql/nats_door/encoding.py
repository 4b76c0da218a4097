"""A query's result as the bodies `$JL.SQL` chunks carry: self-contained Arrow IPC
streams (the schema and record batches, each readable alone) or JSON lines, from
Spark's rows or from an Arrow table (DuckDB's, or a small Spark result taken whole).
No I/O: `sql.nats_door.service` and `sql.nats_door.duck_engine` send what these return."""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import Row


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            return base64.b64encode(value).decode()
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return value


def _json_lines(rows: Iterable[dict[str, Any]]) -> bytes:
    """JSON lines: binary as UTF-8 text when it is, else base64; times in ISO 8601."""
    return b"".join(
        json.dumps({k: _json_value(v) for k, v in row.items()}).encode() + b"\n" for row in rows
    )


def encode_json(rows: list[Row]) -> bytes:
    """Spark's rows as JSON lines."""
    return _json_lines(row.asDict(recursive=True) for row in rows)


def encode_json_table(table: pa.Table) -> bytes:
    """An Arrow table's rows as JSON lines, as Spark's are."""
    return _json_lines(table.to_pylist())


def encode_arrow(rows: list[Row], schema: pa.Schema) -> bytes:
    """One self-contained Arrow IPC stream: the schema and a record batch of `rows`, built a
    column at a time (Spark's rows are tuples in the schema's order)."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
    arrays = [
        pa.array(column, type=field.type) for column, field in zip(columns, schema, strict=True)
    ]
    return encode_table(pa.Table.from_arrays(arrays, schema=schema))


def encode_table(table: pa.Table) -> bytes:
    """One self-contained Arrow IPC stream of `table`: its schema and record batches."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()
