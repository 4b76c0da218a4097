"""Arrow column types for payload values: inference, evolution, and fitting a value to a type.

Rules (docs/lake-typed-tables.md lists them for users):
- JSON numbers are BIGINT when integral, DOUBLE otherwise; JSON has no integer
  width, and starting at BIGINT spares Delta's type-widening table feature
  (reader protocol 3, which `deltalake` and the lake's Parquet fast path do
  not read). Avro int/long and Protobuf's integer kinds are BIGINT for the same
  reason, so their int -> long promotion changes nothing in the table.
- Inferred types merge (`merge`): BIGINT and DOUBLE seen for one field widen
  to DOUBLE; objects are structs (fields in the order first seen), arrays
  lists of the merged item type; any other mix is a *conflict*: a STRING
  column holding each value's JSON text (strings as they are). A field only
  ever null is STRING. The table's own schema is where a merge starts, so the
  result depends on the values seen, never on how they were cut into appends
  (the union view types the tail as one batch, the compactor by segments).
  A column whose type changes this way (BIGINT -> DOUBLE, anything -> STRING)
  needs a rewrite of the table, which the compactor does in the append's
  transaction: Delta widens neither in place.
- A declared schema's revisions `grow` the table: new fields at the end
  (Delta's merge schema), BIGINT -> DOUBLE, and no other change (a revision
  changing a type otherwise is refused as incompatible).
- `fitter(t)` turns a decoded value into what the type holds or raises `FitError`
  naming the field: a STRING column takes anything (non-strings as JSON
  text), numbers fit numbers without loss only, structs drop unknown fields.

Pure: no IO.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa

BIGINT = pa.int64()
DOUBLE = pa.float64()
STRING = pa.string()
NULL = pa.null()
_INT64 = (-(2**63), 2**63 - 1)


class FitError(ValueError):
    """A value does not fit its column; the message names the field path."""

    def __init__(self, what: str, path: str = "") -> None:
        self.what, self.path = what, path
        super().__init__(f"field {path or '<value>'}: {what}")

    def under(self, prefix: str) -> FitError:
        """The same error seen from the enclosing field or list (`prefix`: a name or `[k]`)."""
        if not self.path:
            return FitError(self.what, prefix)
        joined = prefix + self.path if self.path.startswith("[") else f"{prefix}.{self.path}"
        return FitError(self.what, joined)


def infer(value: Any) -> pa.DataType:
    """The type of one decoded JSON value (null for None)."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return BIGINT if _INT64[0] <= value <= _INT64[1] else DOUBLE
    if isinstance(value, float):
        return DOUBLE
    if isinstance(value, str):
        return STRING
    if isinstance(value, dict):
        return pa.struct([pa.field(str(k), infer(v)) for k, v in value.items()])
    if isinstance(value, list):
        item: pa.DataType = NULL
        for v in value:
            item = merge(item, infer(v))
        return pa.list_(item)
    return STRING


def shape(value: Any) -> Any:
    """A hashable summary of what `infer` depends on: a batch infers each shape once (building
    Arrow types per row would cost more than the rest of the typing)."""
    if isinstance(value, dict):
        return tuple((k, shape(v)) for k, v in value.items())
    if isinstance(value, list):
        return ("[]", frozenset(shape(v) for v in value))
    if value is None or isinstance(value, bool | str | float):
        return type(value)
    if isinstance(value, int):
        return int if _INT64[0] <= value <= _INT64[1] else float
    return str


def merge(
    a: pa.DataType, b: pa.DataType, conflicts: set[str] | None = None, path: str = ""
) -> pa.DataType:
    """The type holding values of both (within a batch); a conflict is STRING, in `conflicts`."""
    if a == b:
        return a
    if a == NULL:
        return b
    if b == NULL:
        return a
    if {a, b} == {BIGINT, DOUBLE}:
        return DOUBLE
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        return pa.struct(_merge_fields(a, b, conflicts, path))
    if pa.types.is_list(a) and pa.types.is_list(b):
        return pa.list_(merge(a.value_type, b.value_type, conflicts, path + "[]"))
    if conflicts is not None:
        conflicts.add(path or "<value>")
    return STRING


def grow(t: pa.DataType, new: pa.DataType) -> pa.DataType:
    """`t` grown by a declared schema's type: new fields added, BIGINT widened to DOUBLE,
    nothing else changed (a value that then does not fit is a reject)."""
    if t == new or new == NULL:
        return t
    if t == NULL:
        return new
    if {t, new} == {BIGINT, DOUBLE}:
        return DOUBLE
    if pa.types.is_struct(t) and pa.types.is_struct(new):
        fields = {f.name: f.type for f in t}
        for f in new:
            fields[f.name] = grow(fields[f.name], f.type) if f.name in fields else f.type
        return pa.struct([pa.field(name, ft) for name, ft in fields.items()])
    if pa.types.is_list(t) and pa.types.is_list(new):
        return pa.list_(grow(t.value_type, new.value_type))
    return t


def retyped(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether a column of `old` must change type to hold `new` (more than gaining fields)."""
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        return any(
            new.get_field_index(f.name) < 0 or retyped(f.type, new.field(f.name).type) for f in old
        )
    if pa.types.is_list(old) and pa.types.is_list(new):
        return retyped(old.value_type, new.value_type)
    return old != new


def _merge_fields(
    a: pa.StructType, b: pa.StructType, conflicts: set[str] | None, path: str
) -> list[pa.Field]:
    fields = {f.name: f.type for f in a}
    for f in b:
        sub = f"{path}.{f.name}" if path else f.name
        fields[f.name] = (
            merge(fields[f.name], f.type, conflicts, sub) if f.name in fields else f.type
        )
    return [pa.field(name, t) for name, t in fields.items()]


def finalize(t: pa.DataType) -> pa.DataType:
    """Null types (a field never seen with a value) as STRING: Delta has no void column."""
    if t == NULL:
        return STRING
    if pa.types.is_struct(t):
        return pa.struct(
            [pa.field(t.field(i).name, finalize(t.field(i).type)) for i in range(t.num_fields)]
        )
    if pa.types.is_list(t):
        return pa.list_(finalize(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(t.key_type, finalize(t.item_type))
    return t


def json_schema(t: pa.DataType, conflicts: set[str], path: str = "") -> dict[str, Any]:
    """An inferred type as the JSON Schema that types a table the same way when declared:
    a conflict column has no type (a declared schema keeps such a field as JSON text too)."""
    if path in conflicts:
        return {"description": "conflicting types: kept as JSON text"}
    if pa.types.is_struct(t):
        props = {f.name: json_schema(f.type, conflicts, f"{path}.{f.name}" if path else f.name)
                 for f in t}  # fmt: skip
        return {"type": "object", "properties": props}
    if pa.types.is_list(t):
        return {"type": "array", "items": json_schema(t.value_type, conflicts, path + "[]")}
    kinds = {BIGINT: "integer", DOUBLE: "number", STRING: "string", pa.bool_(): "boolean"}
    return {"type": kinds.get(t, "string")}


def project(value: Any, t: pa.DataType) -> Any:
    """`value` without what type `t` does not name (a declared schema's revision types only
    its own fields, even when the table has more)."""
    if pa.types.is_struct(t) and isinstance(value, dict):
        return {f.name: project(value[f.name], f.type) for f in t if f.name in value}
    if pa.types.is_list(t) and isinstance(value, list):
        return [project(v, t.value_type) for v in value]
    return value


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


Fit = Callable[[Any], Any]


@functools.lru_cache(maxsize=256)
def fitter(t: pa.DataType) -> Fit:
    """A function turning a decoded value into what Arrow type `t` holds, or raising
    `FitError` naming the field; compiled once per type, since comparing Arrow types costs
    more than checking the values and a batch fits every row to one type."""
    if pa.types.is_struct(t):
        fields = [(f.name, fitter(f.type)) for f in t]

        def struct(value: Any) -> Any:
            if value is None:
                return None
            if not isinstance(value, dict):
                raise _mismatch(value, "struct")
            out = {}
            for name, each in fields:
                try:
                    out[name] = each(value.get(name))
                except FitError as exc:
                    raise exc.under(name) from None
            return out

        return struct
    if pa.types.is_list(t) or pa.types.is_map(t):
        each = fitter(t.value_type if pa.types.is_list(t) else t.item_type)
        is_map = pa.types.is_map(t)

        def items(value: Any) -> Any:
            if value is None:
                return None
            if not isinstance(value, dict if is_map else list):
                raise _mismatch(value, "map" if is_map else "array")
            pairs = value.items() if is_map else enumerate(value)
            out = []
            for k, v in pairs:
                try:
                    out.append((str(k), each(v)) if is_map else each(v))
                except FitError as exc:
                    raise exc.under(f"[{k}]") from None
            return out

        return items
    for known, check in _SCALARS:
        if t == known:
            return check
    if pa.types.is_timestamp(t):
        return _scalar(lambda v: isinstance(v, dt.datetime), "timestamp")
    if pa.types.is_date32(t):
        return _scalar(lambda v: isinstance(v, dt.date), "date")
    raise FitError(f"no lake column for type {t}")


def _scalar(ok: Callable[[Any], bool], want: str, convert: Fit = lambda v: v) -> Fit:
    def check(value: Any) -> Any:
        if value is None:
            return None
        if ok(value):
            return convert(value)
        raise _mismatch(value, want)

    return check


def _is_bigint(v: Any) -> bool:
    if isinstance(v, float):
        return v.is_integer() and _INT64[0] <= v <= _INT64[1]
    return isinstance(v, int) and not isinstance(v, bool) and _INT64[0] <= v <= _INT64[1]


_SCALARS: tuple[tuple[pa.DataType, Fit], ...] = (
    (
        STRING,
        _scalar(lambda v: True, "string", lambda v: v if isinstance(v, str) else _json_text(v)),
    ),
    (BIGINT, _scalar(_is_bigint, "bigint", int)),
    (
        DOUBLE,
        _scalar(lambda v: isinstance(v, int | float) and not isinstance(v, bool), "double", float),
    ),
    (pa.bool_(), _scalar(lambda v: isinstance(v, bool), "boolean")),
    (pa.binary(), _scalar(lambda v: isinstance(v, bytes | bytearray), "binary", bytes)),
)


def _mismatch(value: Any, want: str) -> FitError:
    shown = _json_text(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return FitError(f"{shown} is not a {want}")
