"""One Spark view per stream: the lake up to its last committed seq L, plus the live tail after L.

The cut between the two parts is `sql.union`'s, which `jetlake inspect`
(DuckDB) takes too; its module doc says why it is exact (no gap, no
duplicate, zero lag).

Every account's streams have views: the global account's (`$G`) by their bare
names, a named account's as `<account>.<name>` (`ORDERS` of account A is
`A.ORDERS`, its KV bucket `A.kv_config`), each the union of its own lake table
(`layout` keeps accounts' tables apart) and its own live tail.

Views are snapshots (of the tail and of the table) taken at registration:
call `register_views` again to see newer messages. A stream none of whose files
changed since its last registration in the same session (its folder in the
store, its folder in a local lake) keeps its frames: the SQL service registers
again at every query, and only the streams written to since pay for it. Other view families plug
in as more `ViewBuilder`s; the KV and object store views (`sql.bucket_views`)
and MQTT's (`sql.mqtt_views`) are derived from the stream views, so they come
after them, and are built again only when their stream's frame changed
(`derived`). A view whose frame is the one registered last is not registered
again, and `register_changed` names those that were.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
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
from log.compactor.location import Lake, LakePath
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
            out.update(_current_frames(spark, stream, lake_dir))
    for gone in [folder for folder in _KEPT if not folder.exists()]:
        del _KEPT[gone]
    return out


# stream folder -> (the session, the files' fingerprint when its frames were read, the frames)
_KEPT: dict[Path, tuple[SparkSession, frozenset[tuple[str, int, int]], dict[str, DataFrame]]] = {}


def _current_frames(spark: SparkSession, stream: StreamRef, lake_dir: Lake) -> dict[str, DataFrame]:
    """`stream_frames`, or the frames read last time while none of the stream's files changed.

    Exact: the fingerprint is taken before the files are read, so a write during
    the read shows as a change next time, and the frames are read again."""
    seen = stream_fingerprint(stream, lake_dir)
    kept = _KEPT.get(stream.dir)
    if seen is not None and kept is not None and kept[0] is spark and kept[1] == seen:
        return kept[2]
    frames = stream_frames(spark, stream, lake_dir)
    if seen is None:
        _KEPT.pop(stream.dir, None)
    else:
        _KEPT[stream.dir] = (spark, seen, frames)
    return frames


def stream_fingerprint(stream: StreamRef, lake: Lake) -> frozenset[tuple[str, int, int]] | None:
    """Every file's (path, size, mtime) in the stream's folder and its lake folder (where its
    typed tables sit beside its table), the lake's data files aside (a commit adds a log
    entry); None for a lake in object storage, which is listed only by reading its logs."""
    folders = [stream.dir]
    if stream.lake_on:
        if lake.remote:
            return None
        folders.append(Path(stream.table_path(lake).uri).parent)
    return file_stats(folders)


def file_stats(roots: Iterable[Path]) -> frozenset[tuple[str, int, int]]:
    """(path, size, mtime) of every file under `roots`, Parquet data and checksums aside."""
    found: set[tuple[str, int, int]] = set()
    for root in roots:
        for folder, _, files in os.walk(root):
            for name in files:
                if name.endswith((".parquet", ".crc")):
                    continue
                path = os.path.join(folder, name)
                with contextlib.suppress(FileNotFoundError):  # reclaimed meanwhile
                    st = os.stat(path)
                    found.add((path, st.st_size, st.st_mtime_ns))
    return frozenset(found)


def lake_tables(store_dir: Path, lake: Lake) -> Callable[[LakePath], bool]:
    """Whether a views' rebuild still reads a lake table: a file stream's current table
    (its lake on), or a typed table beside it (`<table>.<name>`). Every table, while a
    stream folder cannot be read (a deletion under way): none is taken for gone then."""
    try:
        found = list(streams(store_dir, None))
    except LakeError:
        return lambda _: True
    mains = {s.table_path(lake).uri for s in found if s.storage == "file" and s.lake_on}

    def live(table: LakePath) -> bool:
        return table.uri in mains or table.uri.rsplit(".", 1)[0] in mains

    return live


DEFAULT_BUILDERS: tuple[ViewBuilder, ...] = (stream_views, bucket_views, mqtt_views)


def register_views(
    spark: SparkSession,
    store_dir: str | Path,
    lake_dir: Lake,
    builders: Iterable[ViewBuilder] = DEFAULT_BUILDERS,
) -> dict[str, list[str]]:
    """Register (or refresh) every builder's views of every account as temp views; return
    their names by account (the global account's always there, maybe empty)."""
    return register_changed(spark, store_dir, lake_dir, builders)[0]


# view name -> the session and the frame registered under that name last
_REGISTERED: dict[str, tuple[SparkSession, DataFrame]] = {}
# derived view -> the frame of its source view it was built over, and itself
_DERIVED: dict[str, tuple[DataFrame, DataFrame]] = {}


def register_changed(
    spark: SparkSession,
    store_dir: str | Path,
    lake_dir: Lake,
    builders: Iterable[ViewBuilder] = DEFAULT_BUILDERS,
) -> tuple[dict[str, list[str]], set[str]]:
    """`register_views`, and the names whose frames changed since the last registration in
    this session: only those are registered again (a kept frame is the same object)."""
    builders = tuple(builders)
    out: dict[str, list[str]] = {GLOBAL: []}
    changed: set[str] = set()
    for account in accounts(store_dir):
        names = out.setdefault(account, [])
        for build in builders:
            for name, frame in build(spark, Path(store_dir), lake_dir, account).items():
                kept = _REGISTERED.get(name)
                if kept is None or kept[0] is not spark or kept[1] is not frame:
                    # Quoted: names such as `$MQTT_msgs` or `A.ORDERS` are no bare identifiers.
                    frame.createOrReplaceTempView(quoted(name))
                    _REGISTERED[name] = (spark, frame)
                    changed.add(name)
                names.append(name)
    found = {name for names in out.values() for name in names}
    for gone in [n for n, (s, _) in _REGISTERED.items() if s is spark and n not in found]:
        del _REGISTERED[gone]
        _DERIVED.pop(gone, None)
    return out, changed


def derived(
    spark: SparkSession, source: str, view: str, build: Callable[[DataFrame], DataFrame]
) -> DataFrame:
    """`build` over the registered view `source` (a KV bucket's over its stream's), built
    again only when the source's frame changed: the same plan otherwise."""
    kept = _REGISTERED.get(source)
    current = kept[1] if kept is not None and kept[0] is spark else None
    last = _DERIVED.get(view)
    if current is not None and last is not None and last[0] is current:
        return last[1]
    frame = build(spark.table(quoted(source)))
    if current is not None:
        _DERIVED[view] = (current, frame)
    return frame


def quoted(name: str) -> str:
    """A view name as one identifier (it may hold `.` or `$`)."""
    return f"`{name.replace('`', '``')}`"
