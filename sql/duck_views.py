"""The relations `jetlake inspect` gives DuckDB: each stream's whole history, no JVM.

A stream's view is its Delta table's rows up to L, then the live tail after
L, cut where Spark's views cut (`sql.union`). The table part is `deltalake`'s
Arrow dataset of that one version (`sql.lake_snapshot.lake_dataset`), which
DuckDB scans with projection and filter pushdown; erasures not yet carried
into Delta are an Arrow filter on it, the same rule the tail was cut with.

A typed stream (`jetlake.lake.format`) gives the views Spark's
`sql.typed_views` gives, cut the same way: its own table named as the stream,
each fan-out table, and `<table>_rejects` beside each, the tail typed by the
compactor's own function (`log.compactor.tables.typed_parts`), the other
tables' lake parts held to seq <= L (they commit before the stream's own).
When the tail retyped a column the table has (a widening, a conflict turned
JSON text), the lake part is retyped as the compactor's rewrite will retype
it, so the union has one type per column.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from log.compactor.layout import (
    ACCOUNTS,
    LakeError,
    StreamRef,
    default_lake_dir,
    qualified,
    stream_dirs,
)
from log.compactor.location import Lake
from log.compactor.rows import erased_rows, to_lake
from log.compactor.tables import typed_parts
from log.compactor.typed import SpecError, lake_spec, payload_of
from log.compactor.typed.typer import retype
from sql.lake_snapshot import LakeSnapshot, lake_dataset, lake_snapshot
from sql.union import LiveReader, UnionParts, union_parts


@dataclass(frozen=True, slots=True)
class View:
    """One view: the lake part (None: nothing in the lake) then the tail, by column name."""

    lake: ds.Dataset | pa.Table | None
    tail: pa.Table


def lake_dir_of(folder: Path, given: Lake | None) -> Lake | None:
    """The lake dir a stream folder's tables are under: `given`, else `<store>/lake` when the
    folder sits where the server puts streams (None: neither). It may not exist yet."""
    if given is not None:
        return given
    if folder.parent.name == "streams" and folder.parents[2].name == ACCOUNTS.name:
        return Lake.at(default_lake_dir(folder.parents[len(ACCOUNTS.parts) + 2]))
    return None


def _ref(folder: Path) -> StreamRef | None:
    try:
        return StreamRef.load(folder)
    except LakeError:  # a folder of segments without a readable config: live rows only
        return None


def view_names(name: str, folder: Path, ref: StreamRef | None = None) -> list[str]:
    """The views a stream folder gives, from its config alone (no data read); `ref`, when
    the caller read it already, is the folder's."""
    ref = ref or _ref(folder)
    try:
        spec = lake_spec(ref.name, ref.metadata) if ref is not None else None
    except SpecError:
        spec = None
    if ref is None or spec is None or not spec.typed:
        return [name]
    return [name if t.name == ref.name else t.name for t in spec.tables] + [
        t.rejects for t in spec.tables
    ]


def stream_of_views(store: Path) -> dict[str, tuple[str, str]]:
    """Each view a stream gives, by its name across accounts (`A.ORDERS`), to the stream's
    (account, name): what a query naming views reads. A bucket's and MQTT's views are not
    in it."""
    out = {}
    for folder in stream_dirs(store, None):
        ref = _ref(folder)
        if ref is not None:
            for view in view_names(ref.name, folder, ref):
                out[qualified(ref.account, view)] = (ref.account, ref.name)
    return out


def stream_views(name: str, folder: Path, lake: Lake | None, read: LiveReader) -> dict[str, View]:
    """View name -> parts for one stream folder, the stream's own view named `name`."""
    ref = _ref(folder)
    if ref is None:
        return {name: View(None, to_lake(name, read(folder, include_deleted=False, after_seq=0)))}
    lake_dir = lake_dir_of(folder, lake)
    # Without a lake dir the stream is read as the server alone keeps it (deleted messages
    # left out), but a typed stream's payloads are typed all the same.
    there = lake_dir is not None and (lake_dir.remote or lake_dir.path().is_dir())
    parts = union_parts(ref, lake_dir if there else None, read)
    typed = typed_parts(ref, parts.tail, lake_dir) if lake_dir is not None else None
    if lake_dir is None or typed is None:
        return {name: View(_lake_part(parts, parts.lake, cut=False), parts.tail)}
    out: dict[str, View] = {}
    for table, part in typed.items():
        for view, rows in ((table, part.rows), (part.spec.rejects, part.rejects)):
            own = view == ref.name
            snapshot = parts.lake
            if not own and parts.lake is not None:
                snapshot = lake_snapshot(ref.typed_table_path(lake_dir, view), ref.app_id)
            lake_rows = _lake_part(parts, snapshot, cut=not own)
            out[name if own else view] = View(_fitted(lake_rows, rows), rows)
    return out


def _lake_part(
    parts: UnionParts, snapshot: LakeSnapshot | None, *, cut: bool
) -> ds.Dataset | pa.Table | None:
    """A table's rows in the stream's history: less what is hidden, up to L if `cut`."""
    if parts.lake is None or snapshot is None:
        return None
    rows = lake_dataset(snapshot)
    keep: pc.Expression | None = pc.field("seq") <= parts.done if cut else None
    if parts.hidden:
        shown = pc.invert(erased_rows(parts.hidden))
        keep = shown if keep is None else keep & shown
    return rows if keep is None else rows.filter(keep)


def _fitted(lake: ds.Dataset | pa.Table | None, tail: pa.Table) -> ds.Dataset | pa.Table | None:
    """The lake part with the payload columns the tail retyped, retyped alike (read whole:
    this lasts only until the compactor's next append rewrites the table)."""
    target = payload_of(tail.schema)
    if lake is None or target is None:
        return lake
    have = {f.name: f.type for f in lake.schema}
    if all(have.get(f.name, f.type) == f.type for f in target):
        return lake
    return retype(lake.to_table() if isinstance(lake, ds.Dataset) else lake, tail.schema)


def register(
    con: duckdb.DuckDBPyConnection, index: int, name: str, view: View, *, temp: bool = False
) -> None:
    """The view as `name` in `con`: its lake part, then its tail, columns matched by name;
    `temp`: seen by `con` alone, not by the other cursors of its database."""
    if view.lake is None or not len(view.tail):
        con.register(name, view.tail if view.lake is None else view.lake)
        return
    lake_name, tail_name = f"_jetlake_lake_{index}", f"_jetlake_tail_{index}"
    con.register(lake_name, view.lake)
    con.register(tail_name, view.tail)
    quoted = '"' + name.replace('"', '""') + '"'
    kind = "TEMP VIEW" if temp else "VIEW"
    con.execute(
        f"CREATE {kind} {quoted} AS SELECT * FROM {lake_name} UNION ALL BY NAME "
        f"SELECT * FROM {tail_name}"
    )
