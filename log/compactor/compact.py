"""Sealed segments → each stream's Delta table, exactly once, through Spark.

One pass per stream:
1. Read the lake's progress L from the Delta log itself (the transaction
   version of the stream's app id, through `deltalake`, no Spark job).
2. Take the sealed segments after L, in groups of up to `max_rows`; each group
   is one Delta append of the rows after L, recording the group's last seq as
   the app id's transaction version, and committing only if the table still
   records L (`log.compactor.txn`). A compactor killed anywhere (before,
   during or after the commit) and restarted finds the group's version
   recorded, or not; a second compactor on the same stream (a replicated
   stream's deposed leader, finishing late) loses that condition instead of
   appending rows twice, and starts over from the table. Groups are seq
   ranges, never segment identities: replicas seal at different seqs.
   Rows erased before they were appended are left out (unless the stream
   keeps deletes); rows retired by limits are appended: the lake keeps
   history past the stream's limits.
3. Write the pins after the commit: the server's cache of L (`lake.json`, and
   the lake's in the table dir for every replica's server, `layout`); then,
   when it differs, the tables' description (`log.compactor.describe`).
4. Carry explicit deletes and purges into the table (a Delta DELETE of the
   erasures, seq ranges with a subject filter, that `explicit.log` holds past
   the pin's offset). A DELETE is idempotent, so a crash between it and the
   pin only repeats it.

Only sealed segments are taken: they were fsynced before their successor
existed, so their seqs can never be reused after a crash, which an append from
the unsynced active segment could not promise. Freshness comes from the
server sealing the active segment every `seal_interval` instead.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from log.compactor import tables
from log.compactor.describe import describe_stream
from log.compactor.direct import DIRECT_ROWS, append_direct
from log.compactor.layout import (
    LakeError,
    Pin,
    StreamRef,
    read_pin,
    read_routing,
    streams,
    write_pin,
    write_routing,
    write_shared_pin,
)
from log.compactor.location import Lake, LakePath, as_lake
from log.compactor.rows import LAKE_SCHEMA, SPARK_DDL, drop_erased, erased, spark_schema, to_lake
from log.compactor.txn import LakeMoved, append_after, is_conflict, rewrite_after
from log.compactor.typed import (
    LakeSpec,
    Registry,
    SpecError,
    lake_spec,
    load_registry,
    payload_of,
    type_rows,
)
from log.compactor.typed.columns import retyped
from log.segments import CorruptSegmentError, SegmentInfo, list_segments, read_segment
from log.segments.filestore import EXPLICIT
from log.segments.tombstones import replay_explicit

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger("jetlake.lake")

MAX_ROWS = 1_000_000  # rows in one Delta append: bounds the driver's memory
STAGING = "_staging"  # under the lake dir: Parquet handed to Spark, removed after each append
STAGING_STALE = 3600.0  # seconds: a staging folder this old belongs to a crashed pass
SLICE_ROWS = 100_000  # an append is staged as one file per core, each of at least this many rows


@dataclass(slots=True)
class Summary:
    """What a pass did; jobs print it, the benchmark divides it."""

    streams: int = 0
    segments: int = 0
    rows: int = 0
    bytes: int = 0
    deletes: int = 0
    files: int = 0  # optimize: files rewritten away; vacuum: files removed
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    def add(self, other: Summary) -> None:
        self.streams += other.streams
        self.segments += other.segments
        self.rows += other.rows
        self.bytes += other.bytes
        self.deletes += other.deletes
        self.files += other.files
        self.errors += other.errors

    def line(self) -> str:
        rate = self.rows / self.seconds if self.seconds else 0.0
        return (
            f"streams {self.streams}, segments {self.segments}, rows {self.rows}, "
            f"bytes {self.bytes}, deletes {self.deletes}, files {self.files}, "
            f"{self.seconds:.2f}s ({rate:,.0f} rows/s)"
        )


def lake_progress(table: LakePath, app_id: str) -> int:
    """L: the last seq the Delta log records for app_id (0 when no table or no append yet)."""
    from deltalake.exceptions import TableNotFoundError

    try:
        version = tables.open_table(table).transaction_version(app_id)
    except TableNotFoundError:
        return 0
    return int(version or 0)


def _groups(segments: list[SegmentInfo], max_rows: int) -> list[list[SegmentInfo]]:
    groups: list[list[SegmentInfo]] = []
    rows = 0
    for seg in segments:
        if not groups or rows + seg.rows > max_rows:
            groups.append([])
            rows = 0
        groups[-1].append(seg)
        rows += seg.rows
    return groups


def waiting_streams(store_dir: Path, lake_dir: Lake) -> list[str]:
    """Lake streams with a sealed segment or an explicit delete the lake lacks; no JVM needed,
    so a cron job with nothing to do exits without starting Spark."""
    out = []
    for stream in streams(store_dir, None):
        if not (stream.lake_on and stream.leads):
            continue
        done = lake_progress(stream.table_path(lake_dir), stream.app_id)
        pin = read_pin(stream)
        logged = (stream.dir / EXPLICIT).stat().st_size if (stream.dir / EXPLICIT).exists() else 0
        deletes = (
            stream.deletes_reach_lake and done and (pin is None or pin.deletes_offset < logged)
        )
        if deletes or pending_segments(stream, done):
            out.append(stream.qualified)
    return out


def pending_segments(stream: StreamRef, done: int) -> list[SegmentInfo]:
    """Sealed segments with rows after the lake's last seq, in seq order."""
    found = list_segments(stream.dir, after_seq=done)
    return [s for s in found if s.sealed and s.last_seq > done and s.rows]


class Compactor:
    """Holds the SparkSession; `run_once` is a whole pass (the cron job and the follower's tick)."""

    def __init__(
        self,
        spark: SparkSession,
        store_dir: str | Path,
        lake_dir: Lake | str | os.PathLike[str],
        *,
        max_rows: int = MAX_ROWS,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.spark = spark
        self.store_dir = Path(store_dir)
        self.lake_dir = as_lake(lake_dir)  # a folder or a bucket (`log.compactor.location`)
        self.max_rows = max_rows
        self._progress = progress or log.info
        self._committed: dict[LakePath, StreamRef] = {}  # tables committed to since warm()
        self._token = uuid.uuid4().hex[:12]  # this compactor's staging, apart from another's
        self._registries: dict[str, Registry] = {}  # by account: its schemas bucket
        self._direct: set[str] = set()  # tables whose last append went without Spark
        self._described: dict[str, str] = {}  # table -> the description it has (`describe`)

    def run_once(self) -> Summary:
        self._registries = {}  # the schemas buckets, read again each pass
        total = Summary()
        start = time.monotonic()
        for folder_stream in self._lake_streams():
            try:
                total.add(self.compact_stream(folder_stream))
            except (LakeError, CorruptSegmentError, OSError) as exc:
                log.error("compact %s: %s", folder_stream.qualified, exc)
                total.errors.append(f"{folder_stream.qualified}: {exc}")
        total.seconds = time.monotonic() - start
        return total

    def _lake_streams(self) -> list[StreamRef]:
        out = []
        try:
            for stream in streams(self.store_dir, None):  # every account's
                if stream.lake_on and stream.leads:
                    out.append(stream)
        except LakeError as exc:
            log.error("%s", exc)
        return out

    def compact_stream(self, stream: StreamRef) -> Summary:
        """Append what is sealed and not yet in the lake, then carry erasures."""
        out = Summary(streams=1)
        table = stream.table_path(self.lake_dir)
        done = lake_progress(table, stream.app_id)
        spec = _spec(stream, stream.metadata)
        begun = read_routing(stream)
        keep = not stream.deletes_reach_lake
        erasures, known = ([], 0) if keep else replay_explicit(stream.dir / EXPLICIT)
        before = done  # rows above it are appended below, without the `known` deletes
        pin = read_pin(stream)
        if pin is None or pin.seq != done:  # none, behind (a crash), or the table was lost
            offset = pin.deletes_offset if pin is not None and pin.seq < done else 0
            pin = Pin(stream.app_id, str(table), done, offset)
            write_pin(stream, pin)
        for group in _groups(pending_segments(stream, done), self.max_rows):
            last = group[-1].last_seq
            self._progress(
                f"compact {stream.qualified}: appending {len(group)} segments, "
                f"seq {group[0].first_seq}..{last} to {table}"
            )
            rows = self._read(stream, group, done)
            # A typed group half committed by a crashed pass is routed as it was begun, even
            # if `jetlake.lake.tables` changed since: no row lands in two tables.
            metadata = begun[1] if begun is not None and begun[0] > done else stream.metadata
            routed = spec if metadata is stream.metadata else _spec(stream, metadata)
            try:
                if routed.typed:
                    write_routing(stream, last, metadata)
                    self._append_typed(stream, routed, drop_erased(rows, erasures), done, last)
                else:
                    self._append(stream, table, drop_erased(rows, erasures), done, last)
            except LakeMoved as exc:
                self._progress(f"compact {stream.qualified}: {exc}; starting over next pass")
                break
            except LakeError as exc:
                names = ", ".join(s.path.name for s in group)
                raise LakeError(f"{exc} (segments {names})") from exc
            done = last
            self._committed[table] = stream
            pin = Pin(stream.app_id, str(table), done, pin.deletes_offset)
            write_pin(stream, pin)
            write_shared_pin(stream, self.lake_dir, done)
            out.segments += len(group)
            out.rows += len(rows)
            out.bytes += sum(s.bytes for s in group)
        if out.rows:
            describe_stream(stream, self.lake_dir, self._described)
        if not keep and done:
            names = [t.name for t in spec.tables] + [t.rejects for t in spec.tables]
            paths = (
                [stream.typed_table_path(self.lake_dir, n) for n in names]
                if spec.typed
                else [table]
            )
            out.deletes = self._carry_deletes(stream, paths, pin, known, before)
        return out

    def _append_typed(
        self, stream: StreamRef, spec: LakeSpec, rows: pa.Table, after: int, version: int
    ) -> None:
        """Type the group and append it to each of the stream's tables, the stream's own last
        (`log.compactor.tables` says why that is exactly once)."""
        registry = self._registries.get(stream.account)
        if registry is None:  # each account's typed streams take its own schemas bucket
            found = load_registry(stream.dir.parent, self.lake_dir)
            registry = self._registries[stream.account] = found
        typed = type_rows(rows, spec, registry, tables.bases(stream, spec, self.lake_dir))
        for path, part in tables.side_parts(stream, typed, self.lake_dir):
            progress = lake_progress(path, stream.app_id)
            part = part.filter(pc.greater(part.column("seq"), progress))
            if len(part) and progress < version:
                self._append(stream, path, part, progress, version)
        self._append(
            stream, stream.table_path(self.lake_dir), typed[stream.name].rows, after, version
        )
        rejected = sum(len(t.rejects) for t in typed.values())
        total = tables.record(stream, spec, typed, self.lake_dir)
        if rejected:
            self._progress(f"compact {stream.qualified}: {rejected} rejects ({total} in all)")

    def _read(self, stream: StreamRef, group: list[SegmentInfo], done: int) -> pa.Table:
        parts = []
        for seg in group:
            try:
                parts.append(read_segment(seg))
            except CorruptSegmentError as exc:
                raise LakeError(f"stream {stream.qualified} segment {seg.path}: {exc}") from exc
        rows = pa.concat_tables(parts)
        return to_lake(stream.name, rows.filter(pc.greater(rows.column("seq"), done)))

    def _append(
        self, stream: StreamRef, table: LakePath, rows: pa.Table, after: int, version: int
    ) -> None:
        """One conditional Delta transaction (an empty one still records the version).

        The rows reach Spark as Parquet staged under the lake dir, not through
        `createDataFrame`: Spark's vectorised Parquet reader makes the append
        about six times faster than converting rows in the driver, and the lake
        dir is where a cluster's executors can read too. A large append is
        staged as one file per core (contiguous seqs each), so Spark writes it
        with every core and a query reads the table with every core; the schema
        is given, so Spark runs no job to infer it.
        """
        if rows.schema.names == LAKE_SCHEMA.names and len(rows) <= DIRECT_ROWS:
            if not after:
                self._create(stream, table, spark_schema(rows.schema))
            append_direct(
                table.uri,
                rows,
                app_id=stream.app_id,
                after=after,
                version=version,
                storage_options=table.delta_options,
            )
            self._direct.add(str(table))
            return
        self._direct.discard(str(table))
        self._sweep_staging(stream)
        staging = self.lake_dir.path(
            STAGING, f"{stream.qualified}-{table.name}-{version}-{self._token}"
        )
        staging.mkdir()
        struct = spark_schema(rows.schema)
        typed = rows.schema.names != LAKE_SCHEMA.names
        known = tables.table_schema(table) if typed else None
        try:
            if not after:
                self._create(stream, table, struct)
            if known is not None and retyped(payload_of(known), payload_of(rows.schema)):
                self._progress(
                    f"compact {stream.qualified}: rewriting {table}: a column changes type"
                )

                def everything(v: int) -> DataFrame:
                    return self._stage(
                        staging, pa.concat_tables([tables.refit(table, v, rows.schema), rows])
                    )

                rewrite_after(
                    self.spark,
                    everything,
                    table,
                    app_id=stream.app_id,
                    after=after,
                    version=version,
                )
                return
            frame = self._stage(staging, rows)
            if known is not None:
                self._evolve(stream, table, known, rows.schema, struct)
            append_after(
                self.spark, frame, table, app_id=stream.app_id, after=after, version=version
            )
        finally:
            staging.remove_tree()

    def _stage(self, staging: LakePath, rows: pa.Table) -> DataFrame:
        """The rows as Parquet files Spark reads (see `_append`), one per core when large."""
        cores = self.spark.sparkContext.defaultParallelism
        slices = max(1, min(cores, len(rows) // SLICE_ROWS))
        step = -(-len(rows) // slices)
        for k in range(slices):
            part = (staging / f"part-{k}.parquet").fs_path
            pq.write_table(rows.slice(k * step, step), part, filesystem=self.lake_dir.fs)
        return self.spark.read.schema(spark_schema(rows.schema)).parquet(staging.spark)

    def _create(self, stream: StreamRef, table: LakePath, struct: StructType) -> None:
        """Before a table's first append: create it (empty, version 0, claiming no row)
        unless it exists; another compactor creating it at the same moment is as good."""
        try:
            self._write(self.spark.createDataFrame([], struct), stream, table, 0)
        except LakeError as exc:
            if not is_conflict(exc):
                raise

    def _evolve(
        self,
        stream: StreamRef,
        table: LakePath,
        known: pa.Schema,
        schema: pa.Schema,
        struct: StructType,
    ) -> None:
        """Add the columns a typed append brings (Delta's merge schema) in a commit of their own,
        claiming no row, so the conditional append after it finds the schema it writes.

        Adding nullable columns is idempotent; a concurrent writer's commit makes the
        append after it lose (`LakeMoved`), never duplicate."""
        if known.names == schema.names and payload_of(known) == payload_of(schema):
            return
        try:
            (
                self.spark.createDataFrame([], struct)
                .write.format("delta")
                .mode("append")
                .option("mergeSchema", "true")
                .save(table.spark)
            )
        except Exception as exc:  # py4j; name the stream and the table
            raise LakeError(
                f"stream {stream.qualified}: schema change of {table} failed: {exc}"
            ) from exc

    def _sweep_staging(self, stream: StreamRef) -> None:
        """Remove this stream's staging folders that crashed passes left behind.

        Another server's compactor of the stream may be staging at this moment
        (a replicated stream changing leader), so each compactor stages under
        its own token, and only folders older than any append takes are swept."""
        stale = time.time() - STAGING_STALE
        for old in self.lake_dir.path(STAGING).children(f"{stream.qualified}-*"):
            if (old.mtime() or time.time()) < stale:
                old.remove_tree()

    def _write(self, frame: DataFrame, stream: StreamRef, table: LakePath, version: int) -> None:
        """An append with Delta's idempotent-write options: skipped if the version is recorded.

        Used only with version 0, which claims no row: to create the table and to warm it."""
        try:
            (
                frame.write.format("delta")
                .mode("append")
                .partitionBy("date")
                .option("txnAppId", stream.app_id)
                .option("txnVersion", version)
                .save(table.spark)
            )
        except Exception as exc:  # py4j and Spark raise many kinds; name the stream and table
            raise LakeError(f"stream {stream.qualified}: append to {table} failed: {exc}") from exc

    def warm(self) -> None:
        """Between passes, have Delta replay the log of each table committed to since the last call.

        Every append first asks Delta for the table's transaction versions,
        which it computes by replaying the whole log (three Spark jobs, most of
        the time of a small append). An empty write with version 0 makes Delta
        do that replay now and then skip the write (the table has a higher
        version), so the next append finds it done unless someone else commits
        meanwhile. Version 0 claims no row: even a table lost in between would
        only get an empty commit saying the lake holds nothing.
        """
        committed, self._committed = self._committed, {}
        for table, stream in committed.items():
            if str(table) in self._direct:  # its next append reads the log without Spark
                continue
            try:
                self._write(self.spark.createDataFrame([], SPARK_DDL), stream, table, 0)
            except LakeError as exc:
                log.error("warm: %s", exc)

    def _carry_deletes(
        self, stream: StreamRef, paths: list[LakePath], pin: Pin, known: int, before: int
    ) -> int:
        """Erase from the table what was logged since the pin's offset; returns how many.

        Erasures logged before this pass began (offset < known) were left out of
        this pass's appends, so only rows appended earlier (seq <= before) can
        hold them; later ones may be in anything appended (seq <= pin.seq).
        Skipping the rest spares a Delta DELETE job on the common path.
        """
        path = stream.dir / EXPLICIT
        early, _ = replay_explicit(path, pin.deletes_offset, max(known, pin.deletes_offset))
        late, offset = replay_explicit(path, max(known, pin.deletes_offset))
        if offset == pin.deletes_offset:
            return 0
        in_lake = [replace(e, last=min(e.last, before)) for e in early if e.first <= before]
        in_lake += [replace(e, last=min(e.last, pin.seq)) for e in late if e.first <= pin.seq]
        if in_lake:
            from delta.tables import DeltaTable

            for table in paths:
                if not table.is_delta_table():
                    continue
                self._progress(
                    f"compact {stream.qualified}: erasing {len(in_lake)} runs from {table}"
                )
                try:
                    DeltaTable.forPath(self.spark, table.spark).delete(erased(in_lake))
                except Exception as exc:
                    raise LakeError(
                        f"stream {stream.qualified}: delete in {table} failed: {exc}"
                    ) from exc
                self._committed[table] = stream
        write_pin(stream, Pin(pin.app_id, pin.table, pin.seq, offset))
        return len(in_lake)


def _spec(stream: StreamRef, metadata: Mapping[str, str]) -> LakeSpec:
    try:
        return lake_spec(stream.name, metadata)
    except SpecError as exc:
        raise LakeError(str(exc)) from exc
