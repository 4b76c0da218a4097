"""One Spark view per stream: the lake up to its last committed seq L, plus the live tail after L.

Why this is exact (no gap, no duplicate, zero lag): the live segments are read
first, into memory, and L from the Delta log after. Rows with seq <= L come
from Delta only (the table version L was read from, see `sql.lake_snapshot`),
rows with seq > L from that snapshot only. Anything the server reclaimed
before the snapshot has seq <= its pin <= L, so Delta has it; a compaction
committed in between only raises L, and the snapshot still holds those rows.
The tail keeps rows retired by limits (the lake will keep them too) and
leaves out what clients erased (deletes, purges) unless the stream keeps
it, so the view is what the lake will hold once compaction catches up.
Erasures logged but not yet carried into Delta (past the offset of a pin read
before the table version: the compactor moves the pin after its DELETE
commits) are filtered out of the Delta part.

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
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from log.compactor.layout import LakeError, StreamRef, read_pin, streams
from log.compactor.rows import SPARK_DDL, drop_erased, erased, to_lake
from log.compactor.spark import resolve_master
from log.segments import read_table
from log.segments.filestore import EXPLICIT
from log.segments.tombstones import replay_explicit
from sql.bucket_views import bucket_views
from sql.lake_snapshot import lake_frame, lake_snapshot
from sql.mqtt_views import mqtt_views

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("jetlake.sql")

ViewBuilder = Callable[["SparkSession", Path, Path], dict[str, "DataFrame"]]


def stream_frame(spark: SparkSession, stream: StreamRef, lake_dir: Path) -> DataFrame:
    """The union read of one stream (see the module doc for why it is exact)."""
    keep_deletes = not stream.deletes_reach_lake
    # The pin never runs ahead of the Delta log, so segments it covers are in the
    # lake whatever L turns out to be: they need not be read at all.
    pin = read_pin(stream) if stream.lake_on else None
    live = read_table(
        stream.dir,
        include_deleted=stream.lake_on,
        skip_corrupt=True,
        after_seq=pin.seq if pin else 0,
    )
    # Again, and before L: the deletes carried up to this pin's offset are in the version
    # read next (the pin follows the Delta commit); those logged after it are hidden below.
    pin = read_pin(stream) if stream.lake_on else None
    lake = lake_snapshot(stream.table_path(lake_dir), stream.app_id) if stream.lake_on else None
    done = lake.done if lake else 0
    live = live.filter(pc.greater(live.column("seq"), done))
    erasures, _ = ([], 0) if keep_deletes else replay_explicit(stream.dir / EXPLICIT)
    rows = to_lake(stream.name, drop_erased(live, erasures) if stream.lake_on else live)
    tail = _tail_frame(spark, stream.name, rows)
    if lake is None or not done:
        return tail if tail is not None else spark.createDataFrame([], SPARK_DDL)
    pending, _ = (
        ([], 0)
        if keep_deletes
        else replay_explicit(stream.dir / EXPLICIT, pin.deletes_offset if pin else 0)
    )
    frame = lake_frame(spark, lake)
    hidden = [e for e in pending if e.first <= done]
    if hidden:
        frame = frame.where(~erased(hidden))
    return frame if tail is None else frame.unionByName(tail)


def _tail_frame(spark: SparkSession, name: str, tail: pa.Table) -> DataFrame | None:
    """The tail as a DataFrame through a Parquet file, which Spark reads vectorised (None: empty).

    Converting a large tail (a stream whose lake is off, or far behind) with
    `createDataFrame` takes the driver minutes; Parquet takes it a second. The
    file lives in this process's temp folder until the view is refreshed or the
    process exits; a cluster master gets the rows through `createDataFrame`,
    as its executors cannot see a local temp file. An empty tail, the common
    case once the lake has caught up, costs neither a file nor a union.
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
        return spark.read.schema(SPARK_DDL).parquet(str(path))
    finally:
        if old is not None:
            old.unlink(missing_ok=True)


_STAGED: dict[str, Path] = {}


@functools.cache
def _staging_dir() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="jetlake-views-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def stream_views(spark: SparkSession, store_dir: Path, lake_dir: Path) -> dict[str, DataFrame]:
    """A view per file stream of the store (memory streams have no files to read)."""
    out: dict[str, DataFrame] = {}
    try:
        found = list(streams(store_dir))
    except LakeError as exc:
        log.error("%s", exc)
        return out
    for stream in found:
        if stream.storage == "file":
            out[stream.name] = stream_frame(spark, stream, lake_dir)
    return out


DEFAULT_BUILDERS: tuple[ViewBuilder, ...] = (stream_views, bucket_views, mqtt_views)


def register_views(
    spark: SparkSession,
    store_dir: str | Path,
    lake_dir: str | Path,
    builders: Iterable[ViewBuilder] = DEFAULT_BUILDERS,
) -> list[str]:
    """Register (or refresh) every builder's views as temp views; return their names."""
    names: list[str] = []
    for build in builders:
        for name, frame in build(spark, Path(store_dir), Path(lake_dir)).items():
            # Quoted: stream names such as MQTT's `$MQTT_msgs` are no bare identifiers.
            frame.createOrReplaceTempView(f"`{name.replace('`', '``')}`")
            names.append(name)
    return names
