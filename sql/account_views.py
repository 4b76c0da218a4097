"""The views of named accounts' streams, and which account may read which files.

The server keeps each account's streams under `<store>/jetstream/<account>/streams/`;
the global account's (`$G`) are the lake's (`sql.views`). A named account's streams
have no lake (the compactor takes the global account's alone), so a view of one is
its live messages, read as `sql.union` reads a stream without a lake. Its global
view is named `<account>.<stream>` (`StreamViews.qualified` on the JVM side), so two
accounts' streams of the same name are two views; a session bound to the account
reads it by the bare stream name.

The wall itself is in the JVM (`sql/views_ext/AccountWalls.java`): a bound session may
read only the files its account's views read, and `allow` hands it those views.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from log.compactor.layout import META_FILE, REPLICA_FILE, LakeError, StreamRef
from log.compactor.rows import SPARK_DDL
from sql.union import union_parts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("jetlake.sql")

GLOBAL = "$G"
_ACCOUNTS = Path("jetstream")


def qualified(account: str, stream: str) -> str:
    """The global view's name of an account's stream (as `StreamViews.qualified`)."""
    return stream if account == GLOBAL else f"{account}.{stream}"


def account_streams(store_dir: Path) -> dict[str, list[StreamRef]]:
    """Every named account's file streams with a readable config, by account."""
    out: dict[str, list[StreamRef]] = {}
    root = store_dir / _ACCOUNTS
    if not root.is_dir():
        return out
    for account_dir in sorted(root.iterdir()):
        streams_dir = account_dir / "streams"
        if account_dir.name == GLOBAL or not streams_dir.is_dir():
            continue
        for folder in sorted(streams_dir.iterdir()):
            if not ((folder / META_FILE).is_file() or (folder / REPLICA_FILE).is_file()):
                continue
            try:
                stream = StreamRef.load(folder)
            except LakeError as exc:  # one broken folder must not hide the others
                log.error("%s", exc)
                continue
            if stream.storage == "file":
                out.setdefault(account_dir.name, []).append(stream)
    return out


def account_frames(spark: SparkSession, store_dir: Path) -> dict[str, dict[str, DataFrame]]:
    """By account, by global view name: each named account's stream as its live messages."""
    from sql.views import tail_frame

    out: dict[str, dict[str, DataFrame]] = {}
    for account, found in account_streams(store_dir).items():
        frames = out.setdefault(account, {})
        for stream in found:
            name = qualified(account, stream.name)
            tail = tail_frame(spark, name, union_parts(stream, None).tail)
            frames[name] = tail if tail is not None else spark.createDataFrame([], SPARK_DDL)
    return out


def allow(spark: SparkSession, views: Mapping[str, list[DataFrame]]) -> None:
    """Tell the JVM's wall which files each account's views read."""
    jvm = spark._jvm
    assert jvm is not None
    plans = jvm.java.util.HashMap()
    for account, frames in views.items():
        found = jvm.java.util.ArrayList()
        for frame in frames:
            found.add(frame._jdf.queryExecution().analyzed())
        plans.put(account, found)
    jvm.io.jetlake.sql.AccountWalls.allow(plans)


def bind(session: SparkSession, account: str) -> None:
    """Bind a session of the service to an account: its streams, by their bare names, only."""
    jvm = session._jvm
    assert jvm is not None
    jvm.io.jetlake.sql.AccountWalls.bind(session._jsparkSession, account)
