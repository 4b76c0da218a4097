"""The SQL service's views and lake cache brought up to date between queries.

A query rebuilds what changed before it runs (`sql.service.SharedViews`), so the
first query after a compaction commit would pay for the new Delta version's
views and, when the commit made a new base (`sql.lake_cache`), for reading that
base's files into memory: seconds over a million rows on a small machine. The
service watches what a commit, a new stream or a deleted one changes (the lake's
log files, the store's stream folders) and does both at once, in the
background: the next query finds the views current and the base in memory, and a
deleted stream's cached rows are dropped then rather than at the next query.

Exactness does not rest on this: a query still checks and rebuilds what changed
since (the tail's new messages, a commit this watch has not seen yet). A lake in
object storage is listed only by reading its logs, so there the watch takes each
stream's pin instead (`lake.json` in its folder), which this server's compactor moves
after every commit: a new typed table, a schema change, a KV or object store bucket's
new rows are then warmed as on a local lake. A commit by another writer (a batch job,
another server) moves only the lake's own pin, and is warmed by the next query.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from log.compactor.layout import PIN_FILE, stream_dirs
from log.compactor.location import Lake
from sql.lake_cache import fill
from sql.views import file_stats

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("jetlake.sql")

WATCH_EVERY = 0.5  # seconds between looks at the lake's logs and the store's streams
FILL_GROUP = "jetlake-sql-fill"  # the fills' Spark job group, cancelled when the service stops

Marks = frozenset[tuple[str, int, int]]


def marks(store: Path, lake: Lake) -> Marks:
    """What a compaction commit (a local lake's log files, a bucket lake's streams' pins) or
    a stream created or deleted (the store's stream folders) changes, and a publish does not."""
    folders = stream_dirs(store, None)
    found = frozenset((str(folder), 0, 0) for folder in folders)
    if lake.remote:
        return found | _pins(folders)
    return found | file_stats({Path(lake.root)})


def _pins(folders: list[Path]) -> Marks:
    """(path, size, mtime) of each stream's pin that is there."""
    found = set()
    for folder in folders:
        with contextlib.suppress(FileNotFoundError):
            st = (folder / PIN_FILE).stat()
            found.add((str(folder / PIN_FILE), st.st_size, st.st_mtime_ns))
    return frozenset(found)


async def keep_warm(
    spark: SparkSession,
    refresh: Callable[[], None],
    store: Path,
    lake: Lake,
    stop: asyncio.Event,
) -> None:
    """Until `stop`: at each change `marks` sees, `refresh` the views, then `fill` the
    lake cache's new bases (see the module doc)."""
    seen: Marks | None = None
    try:
        while not stop.is_set():
            now = await asyncio.to_thread(marks, store, lake)
            if now != seen:
                await asyncio.to_thread(_warm, refresh)
                seen = now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), WATCH_EVERY)
    finally:
        with contextlib.suppress(Exception):  # a fill under way must not hold the exit
            spark.sparkContext.cancelJobGroup(FILL_GROUP)


def _warm(refresh: Callable[[], None]) -> None:
    try:
        refresh()
        for table in fill(FILL_GROUP):
            log.info("sql service: lake cache of %s filled", table)
    except Exception:  # the next change, or the next query, tries again
        log.exception("sql service: warming the views failed")
