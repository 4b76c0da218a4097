"""A Delta append that commits only if the table is where its writer thinks it is.

Delta's `txnAppId`/`txnVersion` write options skip an append whose version the
table already records. That makes a *repeated* append harmless, but not an
*overlapping* one. Replicas seal on their own timers, so two compactors of one
stream (a deposed leader's finishing late, and the new leader's) can hold the
ranges (100, 160] and (100, 150]; if the second commits first, the table
records 150 < 160 and Delta takes the first append whole, with 101..150 twice.

What makes any number of writers exact is the condition "the table records
exactly `after` for this app id", checked inside the optimistic transaction
that commits the rows: reading the app id's version there registers the read,
so Delta's conflict check fails the commit (ConcurrentTransactionException)
if another writer recorded a version for the app id meanwhile. Either way the
loser raises `LakeMoved` and starts over from what the table holds; no
interleaving of writers duplicates or skips a row.

That conflict check rests on the commit itself being put-if-absent: two
writers of one table version must not both succeed. A disk gives that by an
atomic rename; a lake in object storage by `ConditionalS3LogStore`
(`log/compactor/logstore`, set by `log.compactor.location`), which writes each
version with `If-None-Match: *`. Delta's own S3 log store checks only within
one JVM, and two compactors are two JVMs.

Delta's Python API has no such append, so this drives its transaction API
over py4j (`DeltaLog.startTransaction`, `txnVersion`, `writeFiles`, `commit`
with a `SetTransaction`), the same steps its own DataFrame writer takes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from log.compactor.layout import LakeError
from log.compactor.location import LakePath

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# What Delta raises when another writer committed first: the same app id, or (creating
# the table) its protocol and metadata.
_CONFLICTS = (
    "ConcurrentTransactionException",
    "ProtocolChangedException",
    "MetadataChangedException",
)


def is_conflict(exc: BaseException) -> bool:
    """Whether a failed Delta commit lost to another writer (py4j gives us the JVM's text)."""
    return any(name in str(exc) for name in _CONFLICTS)


class LakeMoved(LakeError):
    """Another writer appended to the table since this one read its progress."""

    def __init__(self, table: LakePath, app_id: str, expected: int, found: int | None) -> None:
        self.found = found
        now = f"records {found}" if found is not None else "was appended to concurrently"
        super().__init__(f"table {table}: {app_id} {now}, not {expected}: another compactor")


def append_after(
    spark: SparkSession,
    frame: DataFrame,
    table: LakePath,
    *,
    app_id: str,
    after: int,
    version: int,
) -> None:
    """Append `frame` recording `version` for app_id, if the table records `after` for it.

    The table must exist (its schema and partitioning come from its metadata).
    Raises LakeMoved when another writer got there first, LakeError otherwise.
    """
    _commit_after(spark, lambda _: frame, table, app_id=app_id, after=after, version=version)


def rewrite_after(
    spark: SparkSession,
    build: Callable[[int], DataFrame],
    table: LakePath,
    *,
    app_id: str,
    after: int,
    version: int,
) -> None:
    """Replace the whole table with `build(v)` (its rows at version v, retyped, plus the new
    ones), taking the frame's schema, recording `version` for app_id, if the table records
    `after` for it: how a column changes type (Delta widens none of ours in place).

    The transaction reads every file of the table, so any concurrent commit makes it lose
    (`LakeMoved`) rather than drop rows appended meanwhile."""
    _commit_after(spark, build, table, app_id=app_id, after=after, version=version, replace=True)


def _commit_after(
    spark: SparkSession,
    build: Callable[[int], DataFrame],
    table: LakePath,
    *,
    app_id: str,
    after: int,
    version: int,
    replace: bool = False,
) -> None:
    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    delta = jvm.org.apache.spark.sql.delta
    try:
        txn = delta.DeltaLog.forTable(spark._jsparkSession, table.spark).startTransaction()
        if txn.readVersion() < 0:
            raise LakeError(f"table {table}: no Delta table to append to")
        found = max(int(txn.txnVersion(app_id)), 0)  # -1: the app id never appended
        if found != after:
            raise LakeMoved(table, app_id, after, found)
        convert = jvm.scala.jdk.javaapi.CollectionConverters
        frame = build(int(txn.readVersion()))
        actions = jvm.java.util.ArrayList()
        if replace:
            m = txn.metadata()
            schema = frame.schema.json()
            txn.updateMetadata(
                m.copy(
                    m.id(),
                    m.name(),
                    m.description(),
                    m.format(),
                    schema,
                    m.partitionColumns(),
                    m.configuration(),
                    m.createdTime(),
                ),
                False,  # ignoreDefaultProperties: keep the table's
            )
            for old in convert.asJava(txn.filterFiles()):
                actions.add(old.remove())
        actions.addAll(convert.asJava(txn.writeFiles(frame._jdf)))
        now = jvm.scala.Option.apply(int(time.time() * 1000))
        actions.add(delta.actions.SetTransaction(app_id, version, now))
        none = getattr(getattr(jvm.scala, "None$"), "MODULE$")
        mode = jvm.org.apache.spark.sql.SaveMode
        write = delta.DeltaOperations.Write(mode.Overwrite if replace else mode.Append, *[none] * 8)
        txn.commit(convert.asScala(actions).toList(), write)
    except LakeError:
        raise
    except Exception as exc:  # py4j wraps the JVM's exceptions; name the table
        if is_conflict(exc):
            raise LakeMoved(table, app_id, after, None) from exc
        raise LakeError(f"table {table}: append of {app_id} up to {version} failed: {exc}") from exc
