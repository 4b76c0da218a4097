"""Table upkeep: `optimize` (bin-pack small files, Z-order by subject) and `vacuum`.

The compactor appends one small file set per sealed segment (seconds of
traffic), so tables collect many small files; optimize rewrites them into
large ones clustered by subject, which is what queries filter on (tables are
partitioned by date, never by subject: subjects are unbounded). Vacuum then
removes the files no table version references any more, past Delta's
retention (7 days by default), so time travel within that window still works.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from log.compactor.compact import Summary
from log.compactor.layout import LakeError, streams
from log.compactor.location import LakeAt, LakePath, as_lake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("jetlake.lake")

DEFAULT_RETAIN_HOURS = 168.0


def delta_tables(lake_dir: LakeAt) -> list[LakePath]:
    """Every Delta table under the lake dir, old stream incarnations included."""
    root = as_lake(lake_dir).path()
    return [t for s in root.children() for t in s.children() if t.is_delta_table()]


def current_tables(store_dir: Path, lake_dir: LakeAt) -> list[tuple[str, LakePath]]:
    """(stream, table) of the streams that exist now, have a table, and are this server's to
    maintain (a replicated stream's leader's: the servers of a cluster share the tables)."""
    out = []
    for stream in streams(store_dir, None):
        table = stream.table_path(lake_dir)
        if stream.lake_on and stream.leads and table.is_delta_table():
            out.append((stream.qualified, table))
    return out


def _files(spark: SparkSession, table: LakePath) -> tuple[int, int]:
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{table.spark}`").collect()[0]
    return int(detail["numFiles"] or 0), int(detail["sizeInBytes"] or 0)


def optimize(
    spark: SparkSession, name: str, table: LakePath, *, where: str | None = None
) -> Summary:
    """Bin-pack and Z-order by subject; `where` limits it to some dates (Z-ordering rewrites
    every file of the partitions it touches, so the server's schedule passes recent dates)."""
    from delta.tables import DeltaTable

    start = time.monotonic()
    before, size = _files(spark, table)
    try:
        builder = DeltaTable.forPath(spark, table.spark).optimize()
        (builder.where(where) if where else builder).executeZOrderBy("subject")
    except Exception as exc:  # py4j wraps Spark's errors
        raise LakeError(f"stream {name}: optimize of {table} failed: {exc}") from exc
    after, _ = _files(spark, table)
    log.info("optimize %s: files %d -> %d, %d bytes, %s", name, before, after, size, table)
    return Summary(streams=1, files=before - after, bytes=size, seconds=time.monotonic() - start)


def vacuum(
    spark: SparkSession, table: LakePath, *, retain_hours: float = DEFAULT_RETAIN_HOURS
) -> int:
    """Remove unreferenced files older than the retention; return how many files went."""
    from delta.tables import DeltaTable

    try:
        before = table.count_files(".parquet")
        DeltaTable.forPath(spark, table.spark).vacuum(retain_hours)
        removed = before - table.count_files(".parquet")
    except Exception as exc:
        raise LakeError(f"vacuum of {table} failed: {exc}") from exc
    log.info("vacuum %s: %d files removed", table, removed)
    return removed
