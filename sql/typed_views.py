"""The views of a typed stream: its own table, each fan-out table, and each `<table>_rejects`.

Each view is cut where the stream's view is (`sql.union`): its Delta table's
rows with seq <= L, the L of the stream's own table, plus the live tail after
L typed by the compactor's own function (`log.compactor.tables.typed_parts`,
over the tables' current schemas), so a typed column, a fan-out table and a
reject are all visible right after the PubAck, with the columns compaction
will give them. The other tables commit before the stream's own in each
append, so they may hold rows above L for a moment: the `seq <= L` filter
keeps those out of the lake part while the tail has them.

A tail row can bring a column the table does not have yet (a field first seen
since the last append): the union fills it with nulls for the lake part,
which is what the table will hold once Delta merges the new column in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from log.compactor.layout import StreamRef
from log.compactor.location import Lake
from log.compactor.rows import erased, spark_schema
from log.compactor.tables import typed_parts
from sql.lake_snapshot import lake_frame, lake_snapshot
from sql.union import UnionParts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TailFrame = Callable[["SparkSession", str, pa.Table], "DataFrame | None"]


def typed_frames(
    spark: SparkSession,
    stream: StreamRef,
    lake_dir: Lake,
    parts: UnionParts,
    tail_frame: TailFrame,
) -> dict[str, DataFrame] | None:
    """View name -> frame for a typed stream (None: the stream is raw)."""
    typed = typed_parts(stream, parts.tail, lake_dir)
    if typed is None:
        return None
    out: dict[str, DataFrame] = {}
    for name, part in typed.items():
        for view, rows in ((name, part.rows), (part.spec.rejects, part.rejects)):
            lake = _lake_part(spark, stream, lake_dir, parts, view)
            tail = tail_frame(spark, view, rows)
            if lake is None:
                frame = tail if tail is not None else _empty(spark, rows.schema)
            elif tail is None:
                frame = lake
            else:
                frame = _retyped(lake, tail).unionByName(tail, allowMissingColumns=True)
            out[view] = frame
    return out


def _lake_part(
    spark: SparkSession, stream: StreamRef, lake_dir: Lake, parts: UnionParts, table: str
) -> DataFrame | None:
    if parts.lake is None:
        return None
    if table == stream.name:
        frame = lake_frame(spark, parts.lake)
    else:
        found = lake_snapshot(stream.typed_table_path(lake_dir, table), stream.app_id)
        if found is None:
            return None
        frame = lake_frame(spark, found).where(f"seq <= {parts.done}")
    return frame.where(~erased(parts.hidden)) if parts.hidden else frame


def _retyped(lake: DataFrame, tail: DataFrame) -> DataFrame:
    """The lake part with the columns the tail retyped (BIGINT -> DOUBLE, a conflict -> JSON
    text) as the compactor's rewrite will have them; columns that only gained nested
    fields are left to the union, which fills those with nulls."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, AtomicType, MapType, StringType, StructType

    wanted = {f.name: f.dataType for f in tail.schema}
    for f in lake.schema:
        want = wanted.get(f.name)
        if want is None or want == f.dataType:
            continue
        if isinstance(want, StringType) and isinstance(
            f.dataType, StructType | ArrayType | MapType
        ):
            lake = lake.withColumn(f.name, F.to_json(F.col(f.name)))
        elif isinstance(want, AtomicType) or _same_fields(f.dataType, want):
            lake = lake.withColumn(f.name, F.col(f.name).cast(want))
    return lake


def _same_fields(a: object, b: object) -> bool:
    from pyspark.sql.types import StructType

    return isinstance(a, StructType) and isinstance(b, StructType) and a.names == b.names


def _empty(spark: SparkSession, schema: pa.Schema) -> DataFrame:
    return spark.createDataFrame([], spark_schema(schema))
