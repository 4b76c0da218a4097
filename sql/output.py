"""How `jetlake inspect` and `jetlake sql` print a result: a table, CSV or JSON.

A module of its own so that `jetlake sql`, which only asks the service, does not
load DuckDB and the lake's readers at every start.

Binary values: text when valid UTF-8, else `0x` + hex, in table and csv (readable);
base64 in json (exact). Maps (`headers`), structs and lists are JSON objects and
arrays. Table cells escape control characters and are cut at 80 characters; csv and
json are never cut or limited.
"""

from __future__ import annotations

import argparse
import base64
import csv
import json
from collections.abc import Sequence
from typing import Any, TextIO

import pyarrow as pa

_CELL_WIDTH = 80


class Result:
    """Column names and rows of Python values, whatever produced them."""

    __slots__ = ("columns", "rows")

    def __init__(self, columns: list[str], rows: list[list[Any]]) -> None:
        self.columns = columns
        self.rows = rows


def to_result(table: pa.Table) -> Result:
    """Python values per column; timestamps become text since ns do not fit datetime."""
    columns = []
    for col in table.columns:
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.string())
        try:
            columns.append(col.to_pylist(maps_as_pydicts="lossy"))
        except (ValueError, pa.ArrowException):  # e.g. ns timestamps nested in a struct
            columns.append(col.cast(pa.string()).to_pylist())
    return Result(table.column_names, [list(row) for row in zip(*columns, strict=True)])


# -- output ------------------------------------------------------------------------


def _text(value: Any, *, null: str) -> str:
    if value is None:
        return null
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + raw.hex()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):  # headers, or any nested value: as JSON, not Python
        return json.dumps(value, default=_json_default, ensure_ascii=False)
    return str(value)


def _escape(text: str) -> str:
    """Control characters (header blocks end lines with CRLF) would break the columns."""
    out = text.translate(_CONTROL)
    return out if len(out) <= _CELL_WIDTH else out[: _CELL_WIDTH - 1] + "…"


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(32), 127]} | {
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
}


def write_table(result: Result, out: TextIO, *, limit: int) -> None:
    shown = result.rows if limit <= 0 else result.rows[:limit]
    cells = [[_escape(_text(v, null="NULL")) for v in row] for row in shown]
    numeric = [
        bool(shown) and all(isinstance(r[i], int | float) or r[i] is None for r in shown)
        for i in range(len(result.columns))
    ]
    widths = [
        max([len(name)] + [len(row[i]) for row in cells]) for i, name in enumerate(result.columns)
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out.write(line(result.columns) + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for row in cells:
        out.write(line(row) + "\n")
    if len(result.rows) > len(shown):
        out.write(f"({len(result.rows) - len(shown)} more rows)\n")


def write_csv(result: Result, out: TextIO) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(result.columns)
    for row in result.rows:
        writer.writerow([_text(v, null="") for v in row])


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)  # dates, decimals, intervals


def write_json(result: Result, out: TextIO) -> None:
    """A JSON array with one object per line: parseable whole, greppable by line."""
    lines = [
        json.dumps(dict(zip(result.columns, row, strict=True)), default=_json_default)
        for row in result.rows
    ]
    out.write("[\n" + ",\n".join(lines) + ("\n]\n" if lines else "]\n"))


def add_output_args(parser: argparse.ArgumentParser) -> None:
    """The output options `jetlake inspect` and `jetlake sql` share."""
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table")
    parser.add_argument("--limit", type=int, default=100, help="table rows shown (0: all)")


def write_result(result: Result, out: TextIO, *, fmt: str, limit: int) -> None:
    if fmt == "csv":
        write_csv(result, out)
    elif fmt == "json":
        write_json(result, out)
    else:
        write_table(result, out, limit=limit)
