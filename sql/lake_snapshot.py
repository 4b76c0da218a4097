"""The lake part of a stream's view: one version of its Delta table and the L that version records.

Through delta-spark, every query of a view would refresh the Delta log, run a
Spark job to pick the files and plan on top: on a small machine more time
than scanning a million rows. So the `deltalake` package lists the files of
the table's current version, and Spark reads them as plain Parquet, when that
version needs nothing but Parquet to read: reader protocol 1 (no deletion
vectors, no column mapping), the lake's columns, each file in its `date=`
folder (Spark takes the partition value from the path). Any other table is
read by delta-spark as before: its latest version, rows up to L.

Why this is exact: the files and L come from the same version, and every row
of a version has seq <= its L (an append records its last seq as its
transaction version), so no filter is needed. The version's files stay on
disk until a vacuum past Delta's retention (7 days) removes them, long after
anything newer shows in a refreshed view. Spark's frame over a version is
kept while the table stays at it: refreshing again reuses its file listing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from log.compactor.rows import LAKE_SCHEMA, SPARK_DDL

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

PARTITION = "date"


@dataclass(frozen=True, slots=True)
class LakeSnapshot:
    table: Path
    version: int
    done: int  # L: the last seq this version holds
    files: tuple[str, ...] | None  # None: only delta-spark reads this version right


def lake_snapshot(table: Path, app_id: str) -> LakeSnapshot | None:
    """The table's current version (None when there is no table yet)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        opened = DeltaTable(str(table))
    except TableNotFoundError:
        return None
    done = int(opened.transaction_version(app_id) or 0)
    return LakeSnapshot(table, opened.version(), done, _parquet_files(table, opened))


def _parquet_files(table: Path, opened: DeltaTable) -> tuple[str, ...] | None:
    """The version's data files, if reading them as Parquet gives exactly its rows."""
    if opened.protocol().min_reader_version != 1:
        return None
    if opened.metadata().partition_columns != [PARTITION]:
        return None
    if [f.name for f in opened.schema().fields] != LAKE_SCHEMA.names:
        return None
    adds = pa.table(opened.get_add_actions(flatten=True))
    files = []
    paths = adds.column("path").to_pylist()
    for path, date in zip(paths, adds.column(f"partition.{PARTITION}").to_pylist(), strict=True):
        folder, _, name = path.partition("/")
        if date is None or folder != f"{PARTITION}={date.isoformat()}" or not _plain(name):
            return None
        files.append(f"{table}/{path}")
    return tuple(files)


def _plain(name: str) -> bool:
    """A file name that means the same as a path to Spark (not a URI, nothing escaped)."""
    return bool(name) and not any(c in name for c in "/%:")


_FRAMES: dict[Path, tuple[int, DataFrame]] = {}


def lake_frame(spark: SparkSession, snapshot: LakeSnapshot) -> DataFrame:
    """The rows of the snapshot with seq <= L, as a DataFrame."""
    if snapshot.files is None:
        frame = spark.read.format("delta").load(str(snapshot.table))
        return frame.where(f"seq <= {snapshot.done}")
    kept = _FRAMES.get(snapshot.table)
    if kept is not None and kept[0] == snapshot.version and kept[1].sparkSession is spark:
        return kept[1]
    if snapshot.files:
        reader = spark.read.schema(SPARK_DDL).option("basePath", str(snapshot.table))
        frame = reader.parquet(*snapshot.files)
    else:
        frame = spark.createDataFrame([], SPARK_DDL)
    _FRAMES[snapshot.table] = (snapshot.version, frame)
    return frame
