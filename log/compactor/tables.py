"""A typed stream's Delta tables: their schemas, progress, and what `/jsz` shows of them.

A typed stream has several tables (its own, each fan-out table, and a
`<table>_rejects` beside each), and Delta commits one table at a time, so a
group of rows is appended as several transactions, all with the stream's app
id and the group's last seq as `txnVersion`. Why that is still exactly once:
- The stream's own table commits last, so its transaction version, which is
  the stream's progress L everywhere (reclaim pins, views, the next pass), is
  never ahead of any other table: a row is reclaimed only once every table
  that should hold it does.
- Each other table takes the group's rows routed to it with seq above its
  *own* recorded version, conditionally on that version (`append_after`), so
  after a crash between two commits the tables that landed are skipped and
  the others take exactly their part; a table with no row in a group is not
  committed to at all.
- Routing is deterministic (`log.compactor.typed.typer`): it depends on the
  rows, the schema revisions in effect when each message was stored, and the
  schema of each table before the group, which an uncommitted table still has.
  So the pass after a crash routes every row as the crashed one did.
Metadata changed between the crash and the restart (`jetlake.lake.tables`) would
route differently, so the metadata a group is routed by is recorded before its first
commit and the group is finished by it (`log.compactor.compact`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from log.compactor.layout import LakeError, StreamRef, read_typing, write_typing
from log.compactor.location import Lake, LakePath
from log.compactor.typed import (
    LakeSpec,
    Registry,
    SpecError,
    Typed,
    lake_spec,
    load_registry,
    type_rows,
)
from log.compactor.typed.columns import json_schema
from log.compactor.typed.typer import retype

if TYPE_CHECKING:
    from deltalake import DeltaTable


def open_table(path: LakePath, version: int | None = None) -> DeltaTable:
    """The Delta table at `path` through `deltalake`, on a disk or in a bucket alike.

    Raises TableNotFoundError when there is none; any other failure (the store gone,
    credentials refused) as a LakeError naming the table."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    try:
        return DeltaTable(path.uri, version=version, storage_options=path.delta_options)
    except TableNotFoundError:
        raise
    except (DeltaError, OSError) as exc:
        raise LakeError(f"table {path}: {exc}") from exc


def table_schema(path: LakePath) -> pa.Schema | None:
    """The Delta table's schema as Arrow (None when there is no table yet)."""
    from deltalake.exceptions import TableNotFoundError

    try:
        return pa.schema(open_table(path).schema().to_arrow())
    except TableNotFoundError:
        return None


def refit(path: LakePath, version: int, schema: pa.Schema) -> pa.Table:
    """The table's rows at `version` retyped to `schema` (a column changing type)."""
    return retype(open_table(path, version).to_pyarrow_table(), schema)


def row_count(path: LakePath) -> int:
    """Rows in the table's current version, from its file statistics (no data read)."""
    from deltalake.exceptions import TableNotFoundError

    try:
        adds = pa.table(open_table(path).get_add_actions(flatten=True))
    except TableNotFoundError:
        return 0
    return int(pa.compute.sum(adds.column("num_records")).as_py() or 0) if len(adds) else 0


def bases(stream: StreamRef, spec: LakeSpec, lake_dir: Lake) -> dict[str, pa.Schema | None]:
    return {t.name: table_schema(stream.typed_table_path(lake_dir, t.name)) for t in spec.tables}


def typed_parts(
    stream: StreamRef, rows: pa.Table, lake_dir: Lake, registry: Registry | None = None
) -> dict[str, Typed] | None:
    """Lake-schema rows of a typed stream split and typed per table exactly as the compactor
    would append them now (None: the stream is raw). The union read types its tail with it.

    A stream whose metadata the lake cannot follow is shown raw (the compactor names it)."""
    try:
        spec = lake_spec(stream.name, stream.metadata)
    except SpecError:
        return None
    if not spec.typed:
        return None
    if registry is None:
        registry = load_registry(stream.dir.parent, lake_dir)
    return type_rows(rows, spec, registry, bases(stream, spec, lake_dir))


def side_parts(
    stream: StreamRef, typed: dict[str, Typed], lake_dir: Lake
) -> list[tuple[LakePath, pa.Table]]:
    """Every table but the stream's own, with its rows of this group, in commit order."""
    out = []
    for name, part in typed.items():
        out.append((stream.typed_table_path(lake_dir, part.spec.rejects), part.rejects))
        if name != stream.name:
            out.append((stream.typed_table_path(lake_dir, name), part.rows))
    return out


def record(stream: StreamRef, spec: LakeSpec, typed: dict[str, Typed], lake_dir: Lake) -> int:
    """Write what `/jsz` shows (columns, conflicts, revisions, rejects per table, an inferred
    table's schema as JSON Schema); return the total of rejects. Counts come from the rejects
    tables themselves, so they are exact after a crash; conflicts and revisions accumulate."""
    old = read_typing(stream).get("tables", {})
    tables = {}
    total = 0
    for t in spec.tables:
        prev = old.get(t.name, {})
        part = typed.get(t.name)
        rejects = row_count(stream.typed_table_path(lake_dir, t.rejects))
        total += rejects
        conflicts = set(prev.get("conflicts", [])) | (part.conflicts if part else set())
        revisions = set(prev.get("revisions", [])) | (part.revisions if part else set())
        tables[t.name] = {
            "table": str(stream.typed_table_path(lake_dir, t.name)),
            "format": t.format,
            "schema": t.schema or "inferred",
            "columns": _columns(part.payload) if part else prev.get("columns", {}),
            "conflicts": sorted(conflicts),
            "revisions": sorted(revisions),
            "rejects": rejects,
        }
        if part is not None and t.format == "json" and t.schema is None:
            tables[t.name]["inferred"] = json_schema(part.payload, conflicts)
        elif "inferred" in prev:
            tables[t.name]["inferred"] = prev["inferred"]
    write_typing(stream, {"rejects": total, "tables": tables})
    return total


def _columns(t: pa.StructType) -> dict[str, str]:
    return {f.name: str(f.type) for f in t}
