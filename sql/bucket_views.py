"""`kv_<bucket>` and `obj_<bucket>` views: KV buckets and object stores as their current state.

A bucket is a stream (`KV_<bucket>` on `$KV.<bucket>.<key>`, `OBJ_<bucket>`
with metadata on `$O.<bucket>.M.<base64url name>`), and both protocols make
the newest message of a subject the whole truth for that key or object: a KV
put, delete (`KV-Operation: DEL`) or purge (`KV-Operation: PURGE`, a rollup)
and an object's metadata (a `Nats-Rollup: sub` JSON document, `deleted: true`
once removed) each replace what came before. So a bucket view is the latest
row per subject of the stream's union view (lake up to L plus live tail, see
`sql.views`), which makes it exact and as fresh as the stream view, including
history the stream's limits retired: a retired revision can never be the
latest one.

The derived views read the stream views by name, so they are built after
`stream_views` in the same registration pass (the order of `DEFAULT_BUILDERS`)
and always over the same snapshot of the tail.

A subject purge (nats-py's `purge_deletes`, or the rename in `update_meta`)
erases every older row of the subject from the lake too, revisions the limits
retired included, so no older revision can become a key's latest row again.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from log.compactor.layout import LakeError, qualified, streams
from log.compactor.location import Lake
from log.compactor.rows import LAKE_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

KV_STREAM = "KV_"
OBJ_STREAM = "OBJ_"
KV_OPERATION = "KV-Operation"
MARKER_REASON = "Nats-Marker-Reason"  # a marker the server wrote when it removed a subject
REMOVED_OPS = ("DEL", "PURGE")
OBJECT_META = "name STRING, size BIGINT, chunks BIGINT, digest STRING, deleted BOOLEAN, nuid STRING"


def _latest(stream_view: DataFrame, prefix: str, extra: tuple[str, ...] = ()) -> DataFrame:
    """The newest row of each subject under `prefix` (`max_by` needs no sort or window)."""
    from pyspark.sql import functions as F

    rows = stream_view.where(F.col("subject").startswith(prefix))
    newest = F.max_by(F.struct("seq", "ts", "headers", "data", *extra), "seq")
    return rows.groupBy("subject").agg(newest.alias("m")).select("subject", "m.*")


def _header(name: str) -> Column:
    """The first value of a header; null when the message has no such header (or none)."""
    from pyspark.sql import functions as F

    return F.try_element_at(F.col("headers").getItem(name), F.lit(1))


def kv_frame(stream_view: DataFrame, bucket: str) -> DataFrame:
    """Live keys of a bucket: key, value, revision (its seq) and created (its timestamp), then
    the value's typed columns when the bucket's stream declares a format (`jetlake.lake.format`:
    the stream view has them, typed as the stream's table is)."""
    from pyspark.sql import functions as F

    prefix = f"$KV.{bucket}."
    typed = tuple(c for c in stream_view.columns if c not in LAKE_SCHEMA.names)
    latest = _latest(stream_view, prefix, typed)
    removed = _header(KV_OPERATION).isin(*REMOVED_OPS) | _header(MARKER_REASON).isNotNull()
    return latest.where(~F.coalesce(removed, F.lit(False))).select(
        F.expr(f"substring(subject, {len(prefix) + 1})").alias("key"),
        F.col("data").alias("value"),
        F.col("seq").alias("revision"),
        F.col("ts").alias("created"),
        *typed,
    )


def obj_frame(stream_view: DataFrame, bucket: str) -> DataFrame:
    """One row per object (deleted ones too, flagged): its latest metadata document.

    `modified` is the metadata message's stream timestamp, as the Go client
    reports it: nats-py writes `mtime` from the client clock and blanks it on
    delete, so the JSON field is neither trustworthy nor always there.
    """
    from pyspark.sql import functions as F

    latest = _latest(stream_view, f"$O.{bucket}.M.")
    meta = F.from_json(F.col("data").cast("string"), OBJECT_META)
    return (
        latest.select(meta.alias("o"), "ts")
        .where(F.col("o.name").isNotNull())
        .select(
            "o.name",
            "o.size",
            "o.chunks",
            "o.digest",
            F.col("ts").alias("modified"),
            F.coalesce(F.col("o.deleted"), F.lit(False)).alias("deleted"),
        )
    )


def bucket_views(
    spark: SparkSession, store_dir: Path, _lake: Lake, account: str
) -> dict[str, DataFrame]:
    """A view per KV bucket and object store of the account (file storage, as the stream
    views), named as the stream views are (`kv_config`, `A.kv_config`)."""
    from sql.views import derived

    out: dict[str, DataFrame] = {}
    try:
        found = [s for s in streams(store_dir, account) if s.storage == "file"]
    except LakeError:
        return out  # stream_views logged it in this pass
    for stream in found:
        for prefix, view, frame in ((KV_STREAM, "kv_", kv_frame), (OBJ_STREAM, "obj_", obj_frame)):
            if stream.name.startswith(prefix):
                bucket = stream.name[len(prefix) :]
                name = qualified(account, f"{view}{bucket}")
                out[name] = derived(
                    spark, stream.qualified, name, functools.partial(frame, bucket=bucket)
                )
    return out
