"""Envelope rows -> typed rows and rejects per table: the one function the compactor and the
union view (and `jetlake inspect`) share, so the live tail is typed exactly as the lake is.

`type_rows(rows, spec, registry, bases)`:
- `rows`: lake-schema envelope rows (`log.compactor.rows.to_lake`: stream, seq,
  ts, subject, headers, data, date);
- `spec`: the stream's `LakeSpec` (`lake_spec(stream, metadata)`);
- `registry`: the schemas bucket (`load_registry`, or `Registry()` when none);
- `bases`: per table name, the Arrow schema its Delta table has now (None:
  no table yet): the batch's types start from it (`log.compactor.typed.columns`),
  so whoever types a row (the compactor, a view's tail) gives it the columns
  the table will have.
It returns, per table of the spec, a `Typed`: the good rows (envelope columns
then payload columns), the rejects (envelope columns and `error`), and the
payload columns' struct after this batch. Deterministic: the same rows, the
same registry history and the same bases give the same split, which the
compactor's exactly-once argument across two tables relies on.

A payload field named like an envelope column (Spark compares names without
case) becomes `payload_<name>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from log.compactor.rows import LAKE_SCHEMA
from log.compactor.typed.columns import (
    FitError,
    finalize,
    fitter,
    grow,
    infer,
    merge,
    project,
    shape,
)
from log.compactor.typed.formats import (
    Compiled,
    DecodeError,
    SchemaError,
    compile_schema,
    decode_json,
)
from log.compactor.typed.registry import PIN_HEADER, Registry, Revision, SchemaMissing, parse_pin
from log.compactor.typed.spec import LakeSpec, TableSpec

ENVELOPE = LAKE_SCHEMA.names
REJECTS_SCHEMA = LAKE_SCHEMA.append(pa.field("error", pa.string()))
_MARKERS = ("kv-operation", "nats-marker-reason")
_ENVELOPE_LOWER = {name.lower() for name in [*ENVELOPE, "error"]}


@dataclass(slots=True)
class Typed:
    spec: TableSpec
    rows: pa.Table
    rejects: pa.Table
    payload: pa.StructType  # the table's payload columns after this batch
    conflicts: set[str] = field(default_factory=set)  # inferred fields kept as JSON text
    revisions: set[str] = field(default_factory=set)  # schema revisions that typed a row


def payload_of(schema: pa.Schema | None) -> pa.StructType | None:
    """A typed table's payload columns (its schema without the envelope), None for no table."""
    if schema is None:
        return None
    return pa.struct([f for f in schema if f.name not in ENVELOPE])


def _safe_name(name: str) -> str:
    return f"payload_{name}" if name.lower() in _ENVELOPE_LOWER else name


def _renamed(t: pa.StructType) -> pa.StructType:
    return pa.struct([pa.field(_safe_name(f.name), f.type) for f in t])


class _Schemas:
    """Compiled revisions and the compatibility verdict of each, computed once per call."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._verdicts: dict[tuple[str, str], dict[int, Compiled | str]] = {}

    def compiled(self, fmt: str, rev: Revision) -> Compiled:
        """The revision compiled, or a SchemaError saying why it types nothing."""
        verdicts = self._verdicts.get((fmt, rev.name))
        if verdicts is None:
            verdicts = self._verdicts[(fmt, rev.name)] = self._chain(fmt, rev.name)
        got = verdicts[rev.rev]
        if isinstance(got, str):
            raise SchemaError(got)
        return got

    def _chain(self, fmt: str, name: str) -> dict[int, Compiled | str]:
        """Each revision in order: compiled if compatible with the last accepted one."""
        out: dict[int, Compiled | str] = {}
        last: tuple[Revision, Compiled] | None = None
        for rev in self.registry.history(name):
            if rev.text is None:
                continue
            try:
                got = compile_schema(fmt, rev.text)
            except SchemaError as exc:
                out[rev.rev] = f"schema {rev.label}: {exc}"
                continue
            reason = incompatible(last[1], got) if last else None
            if reason:
                out[rev.rev] = (
                    f"schema {rev.label} is incompatible with {last[0].label}: {reason}; "  # type: ignore[index]
                    "publish a compatible revision"
                )
                continue
            out[rev.rev] = got
            last = (rev, got)
        return out


def incompatible(old: Compiled, new: Compiled) -> str | None:
    """Why a table typed by `old` cannot take `new` (None: it can): a required field removed,
    or a column whose type changes other than BIGINT -> DOUBLE."""
    for path in sorted(old.required):
        if _lookup(new.type, path) is None:
            return f"required field {path} removed"
    return _changed(old.type, new.type, "")


def _lookup(t: pa.DataType, path: str) -> pa.DataType | None:
    for part in path.split("."):
        while pa.types.is_list(t):
            t = t.value_type
        if not pa.types.is_struct(t) or t.get_field_index(part.removesuffix("[]")) < 0:
            return None
        t = t.field(part.removesuffix("[]")).type
    return t


def _changed(old: pa.DataType, new: pa.DataType, path: str) -> str | None:
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        for f in old:
            if new.get_field_index(f.name) >= 0:
                why = _changed(
                    f.type, new.field(f.name).type, f"{path}.{f.name}" if path else f.name
                )
                if why:
                    return why
        return None
    if pa.types.is_list(old) and pa.types.is_list(new):
        return _changed(old.value_type, new.value_type, path + "[]")
    if old != new and grow(old, new) != new:  # BIGINT -> DOUBLE is a widening
        return f"field {path} changes from {old} to {new}"
    return None


def _pin(headers: list[tuple[str, list[str]]] | None) -> str | None:
    for key, values in headers or ():
        if key.lower() == PIN_HEADER.lower() and values:
            return values[0]
    return None


def type_rows(
    rows: pa.Table,
    spec: LakeSpec,
    registry: Registry,
    bases: Mapping[str, pa.Schema | None],
) -> dict[str, Typed]:
    """Route each row to its table and type it there (see the module doc)."""
    schemas = _Schemas(registry)
    n = len(rows)
    subjects = rows.column("subject").to_pylist()
    headers = rows.column("headers").to_pylist()
    datas = rows.column("data").to_pylist()
    ts_ns = [t * 1000 for t in pc.cast(rows.column("ts"), pa.int64()).to_pylist()]
    by_table: dict[str, tuple[list[int], list[Any], list[int], list[str]]] = {
        t.name: ([], [], [], []) for t in spec.tables
    }
    used: dict[str, set[str]] = {t.name: set() for t in spec.tables}
    declared: dict[str, list[pa.StructType]] = {t.name: [] for t in spec.tables}
    renamed: dict[str, pa.StructType] = {}  # per revision: its columns, envelope names avoided
    for i in range(n):
        table = spec.route(subjects[i])
        good, values, bad, errors = by_table[table.name]
        if not datas[i] and _marker(headers[i]):  # a KV delete or purge, a server marker
            good.append(i)
            values.append({})
            continue
        try:
            value, rev, compiled = _decode(table, schemas, datas[i], headers[i], ts_ns[i])
        except (DecodeError, SchemaError, SchemaMissing, ValueError) as exc:
            bad.append(i)
            errors.append(str(exc))
            continue
        if not isinstance(value, dict):
            bad.append(i)
            errors.append(f"payload is a {type(value).__name__}, not a record")
            continue
        value = {_safe_name(k): v for k, v in value.items()}
        if rev is not None and compiled is not None:
            own = renamed.get(rev.label)
            if own is None:
                own = renamed[rev.label] = _renamed(compiled.type)
            if rev.label not in used[table.name]:
                used[table.name].add(rev.label)
                declared[table.name].append(own)
            if table.format == "json":  # JSON may carry fields its revision does not name
                value = project(value, own)
        good.append(i)
        values.append(value)
    out: dict[str, Typed] = {}
    for table in spec.tables:
        good, values, bad, errors = by_table[table.name]
        conflicts: set[str] = set()
        base = payload_of(bases.get(table.name))
        batch: pa.DataType = base if base is not None else pa.struct([])
        for t in declared[table.name]:
            batch = grow(batch, t)
        shapes: set[Any] = set()
        for value, i in zip(values, good, strict=True):
            if _inferred(table, headers[i]):
                seen = shape(value)
                if seen not in shapes:
                    shapes.add(seen)
                    batch = merge(batch, infer(value), conflicts)
        target = finalize(batch)
        fit = fitter(target)
        fitted, kept = [], []
        for value, i in zip(values, good, strict=True):
            try:
                fitted.append(fit(value))
                kept.append(i)
            except FitError as exc:
                bad.append(i)
                errors.append(f"does not fit the table: {exc}")
        out[table.name] = Typed(
            table,
            _typed_table(rows, kept, fitted, target, table.keep_raw),
            _rejects_table(rows, bad, errors),
            target,
            conflicts,
            used[table.name],
        )
    return out


def _marker(headers: list[tuple[str, list[str]]] | None) -> bool:
    """An empty message that is an operation, not a record: typed rows with null columns."""
    return any(key.lower() in _MARKERS for key, _ in headers or ())


def _inferred(table: TableSpec, headers: list[tuple[str, list[str]]] | None) -> bool:
    return table.format == "json" and table.schema is None and _pin(headers) is None


def _decode(
    table: TableSpec,
    schemas: _Schemas,
    data: bytes | None,
    headers: list[tuple[str, list[str]]] | None,
    ts_ns: int,
) -> tuple[Any, Revision | None, Compiled | None]:
    payload = data or b""
    pinned = _pin(headers)
    if _inferred(table, headers):
        return decode_json(payload), None, None
    if pinned is not None:
        name, number = parse_pin(pinned)
    elif table.schema is not None:
        name, number = table.schema, None
    else:
        raise SchemaMissing(f"table {table.name}: no schema declared and no {PIN_HEADER} header")
    rev = schemas.registry.resolve(name, ts_ns, number)
    compiled = schemas.compiled(table.format, rev)
    return compiled.decode(payload), rev, compiled


def _typed_table(
    rows: pa.Table, kept: list[int], fitted: list[Any], target: pa.StructType, keep_raw: bool
) -> pa.Table:
    envelope = rows.take(pa.array(kept, pa.int64())).cast(LAKE_SCHEMA)
    if not keep_raw:
        index = envelope.schema.get_field_index("data")
        envelope = envelope.set_column(index, "data", pa.nulls(len(kept), pa.binary()))
    payload = pa.array(fitted, type=target) if len(target) else None
    if payload is None:
        return envelope
    columns = payload.flatten()
    for f, col in zip(target, columns, strict=True):
        envelope = envelope.append_column(pa.field(f.name, f.type), col)
    return envelope


def retype(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Typed rows (a Delta table's) with their payload columns fitted to `schema`'s, which
    holds every value of the old ones (wider numbers, JSON text for conflicts)."""
    target = payload_of(schema)
    assert target is not None
    old = table.select([f.name for f in target if f.name in table.column_names]).to_pylist()
    fit = fitter(target)
    return _typed_table(
        table.select(ENVELOPE), list(range(len(table))), [fit(v) for v in old], target, True
    )


def _rejects_table(rows: pa.Table, bad: list[int], errors: list[str]) -> pa.Table:
    order = sorted(range(len(bad)), key=lambda k: bad[k])
    taken = rows.take(pa.array([bad[k] for k in order], pa.int64())).cast(LAKE_SCHEMA)
    return taken.append_column("error", pa.array([errors[k] for k in order], pa.string()))
