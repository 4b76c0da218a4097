"""One Spark view per stream: the lake up to its last committed seq L, plus the live tail after L.

The cut between the two parts is `sql.union`'s, which `jetlake inspect`
(DuckDB) takes too; its module doc says why it is exact (no gap, no
duplicate, zero lag).

Every account's streams have views: the global account's (`$G`) by their bare
names, a named account's as `<account>.<name>` (`ORDERS` of account A is
`A.ORDERS`, its KV bucket `A.kv_config`), each the union of its own lake table
(`layout` keeps accounts' tables apart) and its own live tail.

Views are snapshots (of the tail and of the table) taken at registration:
call `register_views` again to see newer messages. Other view families plug
in as more `ViewBuilder`s; the KV and object store views (`sql.bucket_views`)
and MQTT's (`sql.mqtt_views`) are derived from the stream views, so they come
after them.
"""

from __future__ import annotations

import atexit
import functools
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from log.compactor.layout import GLOBAL, LakeError, StreamRef, accounts, qualified, streams
from log.compactor.location import Lake
from log.compactor.rows import SPARK_DDL, erased, spark_schema
from log.compactor.spark import resolve_master
from sql.bucket_views import bucket_views
from sql.lake_snapshot import lake_frame
from sql.mqtt_views import mqtt_views
from sql.typed_views import typed_frames
from sql.union import union_parts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("jetlake.sql")

# (session, store, lake, account) -> the account's views by their qualified names
ViewBuilder = Callable[["SparkSession", Path, Lake, str], dict[str, "DataFrame"]]


def stream_frames(spark: SparkSession, stream: StreamRef, lake_dir: Lake) -> dict[str, DataFrame]:
    """The union read of one stream, cut where `sql.union` says (see there why it is exact):
    one view, or a typed stream's several (`sql.typed_views`), by qualified name."""
    parts = union_parts(stream, lake_dir)
    typed = typed_frames(spark, stream, lake_dir, parts, tail_frame)
    if typed is not None:
        return {qualified(stream.account, name): frame for name, frame in typed.items()}
    name = stream.qualified
    tail = tail_frame(spark, name, parts.tail)
    if parts.lake is None:
        return {name: tail if tail is not None else spark.createDataFrame([], SPARK_DDL)}
    frame = lake_frame(spark, parts.lake)
    if parts.hidden:
        frame = frame.where(~erased(parts.hidden))
    return {name: frame if tail is None else frame.unionByName(tail)}


def tail_frame(spark: SparkSession, name: str, tail: pa.Table) -> DataFrame | None:
    """The tail as a DataFrame through a Parquet file, which Spark reads vectorised (None: empty).

    Converting a large tail (a stream whose lake is off, or far behind) with
    `createDataFrame` takes the driver minutes; Parquet takes it a second. The
    file lives in this process's temp folder until the process exits or a while
    after the view is refreshed (`_RETAIN`: a query the SQL service planned
    over the old view may still be reading it); a cluster master gets the rows
    through `createDataFrame`, as its executors cannot see a local temp file.
    An empty tail, the common case once the lake has caught up, costs neither a
    file nor a union.
    """
    old = _STAGED.pop(name, None)
    try:
        if not len(tail):
            return None
        if not resolve_master(spark.sparkContext.master).startswith("local"):
            return spark.createDataFrame(tail)
        path = _staging_dir() / f"{name}-{uuid.uuid4().hex}.parquet"
        pq.write_table(tail, path)
        _STAGED[name] = path
        return spark.read.schema(spark_schema(tail.schema)).parquet(str(path))
    finally:
        if old is not None:
            _retire(old)


_STAGED: dict[str, Path] = {}
_RETIRED: list[tuple[float, Path]] = []
_RETAIN = 600.0  # seconds a replaced tail file stays for the queries still reading it


def _retire(path: Path) -> None:
    now = time.monotonic()
    _RETIRED.append((now, path))
    while _RETIRED and now - _RETIRED[0][0] > _RETAIN:
        _RETIRED.pop(0)[1].unlink(missing_ok=True)


@functools.cache
def _staging_dir() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="jetlake-views-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def stream_views(
    spark: SparkSession, store_dir: Path, lake_dir: Lake, account: str
) -> dict[str, DataFrame]:
    """A view per file stream of the account (memory streams have no files to read)."""
    out: dict[str, DataFrame] = {}
    try:
        found = list(streams(store_dir, account))
    except LakeError as exc:
        log.error("%s", exc)
        return out
    for stream in found:
        if stream.storage == "file":
            out.update(stream_frames(spark, stream, lake_dir))
    return out


DEFAULT_BUILDERS: tuple[ViewBuilder, ...] = (stream_views, bucket_views, mqtt_views)


def register_views(
    spark: SparkSession,
    store_dir: str | Path,
    lake_dir: Lake,
    builders: Iterable[ViewBuilder] = DEFAULT_BUILDERS,
) -> dict[str, list[str]]:
    """Register (or refresh) every builder's views of every account as temp views; return
    their names by account (the global account's always there, maybe empty)."""
    builders = tuple(builders)
    out: dict[str, list[str]] = {GLOBAL: []}
    for account in accounts(store_dir):
        names = out.setdefault(account, [])
        for build in builders:
            for name, frame in build(spark, Path(store_dir), lake_dir, account).items():
                # Quoted: names such as MQTT's `$MQTT_msgs` or `A.ORDERS` are no bare identifiers.
                frame.createOrReplaceTempView(quoted(name))
                names.append(name)
    return out


def quoted(name: str) -> str:
    """A view name as one identifier (it may hold `.` or `$`)."""
    return f"`{name.replace('`', '``')}`"
