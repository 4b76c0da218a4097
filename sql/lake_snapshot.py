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
The rows of its files are cached in the session's memory (`sql.lake_cache`).

DuckDB (`jetlake inspect`) reads the same version as `deltalake`'s Arrow
dataset, whatever its columns; only a table that needs a reader feature Arrow
datasets lack (deletion vectors, column mapping) is read whole through
`deltalake`'s own query engine instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from log.compactor.location import LakePath
from log.compactor.rows import LAKE_SCHEMA, SPARK_DDL, spark_schema
from sql.lake_cache import cached_read, drop_unless

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

PARTITION = "date"


@dataclass(frozen=True, slots=True)
class LakeSnapshot:
    table: LakePath
    version: int
    done: int  # L: the last seq this version holds
    files: tuple[str, ...] | None  # None: only delta-spark reads this version right
    delta: DeltaTable = field(compare=False, repr=False)  # opened at that version


def lake_snapshot(table: LakePath, app_id: str) -> LakeSnapshot | None:
    """The table's current version (None when there is no table yet)."""
    from deltalake.exceptions import TableNotFoundError

    from log.compactor.tables import open_table

    try:
        opened = open_table(table)
    except TableNotFoundError:
        return None
    done = int(opened.transaction_version(app_id) or 0)
    return LakeSnapshot(table, opened.version(), done, _parquet_files(table, opened), opened)


def _parquet_files(table: LakePath, opened: DeltaTable) -> tuple[str, ...] | None:
    """The version's data files, if reading them as Parquet gives exactly its rows."""
    if opened.protocol().min_reader_version != 1:
        return None
    if opened.metadata().partition_columns != [PARTITION]:
        return None
    names = [f.name for f in opened.schema().fields]
    if names[: len(LAKE_SCHEMA)] != LAKE_SCHEMA.names:  # a typed table's columns follow
        return None
    adds = pa.table(opened.get_add_actions(flatten=True))
    files = []
    paths = adds.column("path").to_pylist()
    for path, date in zip(paths, adds.column(f"partition.{PARTITION}").to_pylist(), strict=True):
        folder, _, name = path.partition("/")
        if date is None or folder != f"{PARTITION}={date.isoformat()}" or not _plain(name):
            return None
        files.append(f"{table.spark}/{path}")
    return tuple(files)


def _plain(name: str) -> bool:
    """A file name that means the same as a path to Spark (not a URI, nothing escaped)."""
    return bool(name) and not any(c in name for c in "/%:")


_FRAMES: dict[LakePath, tuple[int, DataFrame]] = {}


def lake_frame(spark: SparkSession, snapshot: LakeSnapshot) -> DataFrame:
    """The rows of the snapshot with seq <= L, as a DataFrame."""
    if snapshot.files is None:
        frame = spark.read.format("delta").load(snapshot.table.spark)
        return frame.where(f"seq <= {snapshot.done}")
    kept = _FRAMES.get(snapshot.table)
    if kept is not None and kept[0] == snapshot.version and kept[1].sparkSession is spark:
        return kept[1]
    columns = pa.schema(snapshot.delta.schema().to_arrow())
    schema = SPARK_DDL if columns.names == LAKE_SCHEMA.names else spark_schema(columns)
    if snapshot.files:
        # A typed table's older files lack the columns added since: Parquet reads them null.
        reader = spark.read.schema(schema).option("basePath", snapshot.table.spark)
        frame = cached_read(
            spark, snapshot.table, snapshot.files, schema, lambda f: reader.parquet(*f)
        )
    else:
        frame = spark.createDataFrame([], schema)
    _FRAMES[snapshot.table] = (snapshot.version, frame)
    return frame


def forget_unless(live: Callable[[LakePath], bool]) -> list[LakePath]:
    """Drop the frames and the cached rows of the tables `live` rejects (a deleted stream's):
    nothing reads them any more; the tables whose cached rows were dropped."""
    for table in [t for t in _FRAMES if not live(t)]:
        del _FRAMES[table]
    for table in [t for t in _DATASETS if not live(t)]:
        del _DATASETS[table]
    return drop_unless(live)


_DATASETS: dict[LakePath, tuple[int, ds.Dataset | pa.Table]] = {}


def lake_dataset(snapshot: LakeSnapshot) -> ds.Dataset | pa.Table:
    """The rows of the snapshot for Arrow readers: DuckDB scans a dataset with projection and
    filter pushdown, file by file, reading only the columns a query names. Kept while the
    table stays at that version: building it lists and opens every file, which a warm
    engine (SQL over NATS on DuckDB) would otherwise pay at each query."""
    kept = _DATASETS.get(snapshot.table)
    if kept is not None and kept[0] == snapshot.version:
        return kept[1]
    rows = _dataset(snapshot)
    _DATASETS[snapshot.table] = (snapshot.version, rows)
    return rows


def _dataset(snapshot: LakeSnapshot) -> ds.Dataset | pa.Table:
    from deltalake import QueryBuilder
    from deltalake.exceptions import DeltaProtocolError

    try:
        return snapshot.delta.to_pyarrow_dataset(
            # deltalake's default file system calls back into Python for every read;
            # Arrow's own (a local folder's or S3's) reads natively.
            filesystem=pafs.SubTreeFileSystem(snapshot.table.fs_path, snapshot.table.lake.fs),
            # Few distinct values, stored dictionary-encoded: read as dictionaries, DuckDB
            # groups and filters on them 2-3 times faster than on the strings spelled out.
            parquet_read_options=ds.ParquetReadOptions(dictionary_columns=_DICTIONARY_COLUMNS),
        )
    except DeltaProtocolError:
        query = QueryBuilder().register("lake", snapshot.delta)
        return query.execute("SELECT * FROM lake").read_all()


_DICTIONARY_COLUMNS = {"stream", "subject"}
