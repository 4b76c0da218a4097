"""The sealed lake part of the views, cached in the warm session's memory.

A query over warm data should not read its Parquet files again: the SQL service
runs many queries over a lake that changes by appends, and a Databricks user
expects a repeated query over such data to come from memory. So the lake part
of each view (`sql.lake_snapshot.lake_frame`) is persisted in Spark's memory the
first time a query scans it, and later queries read only the live tail (and the
files the compactor appended since) from disk.

What is cached is the rows of a fixed set of data files, the base. A Delta
version's rows are exactly its files' rows (see `sql.lake_snapshot`), and a
data file never changes once written, so the cache is exact for any version
whose files include the base: the view reads the cached base, plus the files
added since from disk. A version that removed a base file (a DELETE, a rewrite
by OPTIMIZE), a changed schema (a typed table's new column), or more than a
quarter again as many files added as the base has (at least `MIN_ADDED`),
starts a new base over all its files; the old one is dropped.

Only for a lake in object storage, by default (`wanted`): there a query would fetch every
file again over the network. A local lake's files stay in the OS's page cache, and
Spark's vectorised Parquet reader scans them for about half the CPU an in-memory scan
takes (the count by subject over 1M rows: 90-110 ms of task CPU against 130-190 ms),
as it keeps the strings dictionary-encoded where the cached columns are decoded
row by row; `JETLAKE_SQL_CACHE_LAKE` (`jetlake sql serve --cache_lake`) says otherwise.

Filled ahead of queries: persisting is lazy, so a new base would be read from its
files by the first query that scans it. The SQL service fills every new base in the
background (`fill`) once it sees a compaction commit, so that query reads memory.
A deleted stream's base is dropped at the first rebuild that no longer finds the
stream (`drop_unless`), not left to the storage memory's eviction.

Bounded: the base is persisted `MEMORY_ONLY`, in Spark's storage memory (a
share of the driver's heap, `spark.memory.fraction`), which evicts the least
recently used partitions when it is full; a partition not in memory is read
again from its file, which is still there (a vacuum removes files only past
Delta's retention, 7 days). A query planned over a base that was replaced
meanwhile reads its files the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from log.compactor.location import Lake, LakePath

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

MIN_ADDED = 4  # files added since the base read from disk before a new base is cached
# Set by the SQL service's session: a one-shot session (`jetlake sql` alone) reads each
# file once, and filling a cache would only slow its one query.
ENABLED = "spark.jetlake.sql.cacheLake"
CHOICE_ENV = "JETLAKE_SQL_CACHE_LAKE"  # the SQL service's default choice: auto, on or off
CHOICES = ("auto", "on", "off")


def wanted(choice: str, lake: Lake) -> bool:
    """Whether the SQL service caches the lake part of its views: `auto` for a lake in
    object storage only (see the module doc)."""
    return choice == "on" or (choice == "auto" and lake.remote)


class Plan(Enum):
    REUSE = "reuse"  # the version's files are the base's
    EXTEND = "extend"  # the base plus the files added since, read from disk
    REBASE = "rebase"  # a new base over all the version's files


def plan(base: frozenset[str] | None, files: Sequence[str]) -> tuple[Plan, list[str]]:
    """How to read `files` given the cached `base`, and the files to read from disk
    beside it (for EXTEND)."""
    if base is None or not base.issubset(files):
        return Plan.REBASE, []
    added = [f for f in files if f not in base]
    if not added:
        return Plan.REUSE, []
    if len(added) > max(MIN_ADDED, len(base) // 4):
        return Plan.REBASE, []
    return Plan.EXTEND, added


@dataclass(slots=True)
class _Base:
    session: SparkSession
    schema: StructType | str
    files: frozenset[str]
    frame: DataFrame  # persisted
    filled: bool = False  # `fill` read its rows into memory


_BASES: dict[LakePath, _Base] = {}
_FILLING = threading.Lock()  # one fill at a time: two would read the same files twice


def cached_read(
    spark: SparkSession,
    table: LakePath,
    files: Sequence[str],
    schema: StructType | str,
    read: Callable[[Sequence[str]], DataFrame],
) -> DataFrame:
    """The rows of `files` (a version of `table`), the base from memory (see the module doc)
    in a session that enables it; `read` reads files from disk with `schema`."""
    from pyspark import StorageLevel

    if spark.conf.get(ENABLED, "false") != "true":
        return read(files)
    kept = _BASES.get(table)
    usable = kept is not None and kept.session is spark and kept.schema == schema
    how, added = plan(kept.files if usable and kept is not None else None, files)
    if how is not Plan.REBASE and kept is not None:
        return kept.frame if how is Plan.REUSE else kept.frame.unionByName(read(added))
    frame = read(files).persist(StorageLevel.MEMORY_ONLY)
    _BASES[table] = _Base(spark, schema, frozenset(files), frame)
    if kept is not None:
        kept.frame.unpersist(blocking=False)
    return frame


def fill(group: str = "jetlake-sql-fill") -> list[LakePath]:
    """Read every base not yet filled into memory, each by a job of `group` (the caller's
    thread's job group, so a service stopping can cancel it); the tables filled."""
    done = []
    with _FILLING:
        for table, base in list(_BASES.items()):
            if base.filled or _BASES.get(table) is not base:
                continue
            base.session.sparkContext.setJobGroup(group, f"filling the lake cache of {table}")
            base.frame.count()  # a count over a persisted frame builds all its columns
            base.filled = True
            done.append(table)
    return done


def drop_unless(live: Callable[[LakePath], bool]) -> list[LakePath]:
    """Unpersist the bases of tables `live` rejects (a deleted stream's); the tables dropped."""
    gone = [table for table in list(_BASES) if not live(table)]
    for table in gone:
        kept = _BASES.pop(table, None)
        if kept is not None:
            kept.frame.unpersist(blocking=False)
    return gone


def held() -> dict[str, dict[str, int | bool]]:
    """What the cache holds, by table: its base's file count and whether it is filled (what
    the SQL service reports in `$SRV.STATS`)."""
    return {
        str(table): {"files": len(base.files), "filled": base.filled}
        for table, base in _BASES.copy().items()
    }
