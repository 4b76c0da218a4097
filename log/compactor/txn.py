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

Delta's Python API has no such append, so this drives its transaction API
over py4j (`DeltaLog.startTransaction`, `txnVersion`, `writeFiles`, `commit`
with a `SetTransaction`), the same steps its own DataFrame writer takes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from log.compactor.layout import LakeError

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

    def __init__(self, table: Path, app_id: str, expected: int, found: int | None) -> None:
        self.found = found
        now = f"records {found}" if found is not None else "was appended to concurrently"
        super().__init__(f"table {table}: {app_id} {now}, not {expected}: another compactor")


def append_after(
    spark: SparkSession,
    frame: DataFrame,
    table: Path,
    *,
    app_id: str,
    after: int,
    version: int,
) -> None:
    """Append `frame` recording `version` for app_id, if the table records `after` for it.

    The table must exist (its schema and partitioning come from its metadata).
    Raises LakeMoved when another writer got there first, LakeError otherwise.
    """
    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    delta = jvm.org.apache.spark.sql.delta
    try:
        txn = delta.DeltaLog.forTable(spark._jsparkSession, str(table)).startTransaction()
        if txn.readVersion() < 0:
            raise LakeError(f"table {table}: no Delta table to append to")
        found = max(int(txn.txnVersion(app_id)), 0)  # -1: the app id never appended
        if found != after:
            raise LakeMoved(table, app_id, after, found)
        convert = jvm.scala.jdk.javaapi.CollectionConverters
        actions = jvm.java.util.ArrayList(convert.asJava(txn.writeFiles(frame._jdf)))
        now = jvm.scala.Option.apply(int(time.time() * 1000))
        actions.add(delta.actions.SetTransaction(app_id, version, now))
        none = getattr(getattr(jvm.scala, "None$"), "MODULE$")
        append = jvm.org.apache.spark.sql.SaveMode.Append
        write = delta.DeltaOperations.Write(append, *[none] * 8)
        txn.commit(convert.asScala(actions).toList(), write)
    except LakeError:
        raise
    except Exception as exc:  # py4j wraps the JVM's exceptions; name the table
        if is_conflict(exc):
            raise LakeMoved(table, app_id, after, None) from exc
        raise LakeError(f"table {table}: append of {app_id} up to {version} failed: {exc}") from exc
