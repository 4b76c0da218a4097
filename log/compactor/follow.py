"""The compactor beside a server: one long-lived SparkSession, a pass as soon as there is work.

The server starts this process only when a sealed segment is waiting for the
lake, so a short-lived server never pays for a JVM; once started it stays (a
JVM start costs seconds, a pass on a warm session a fraction) and exits as
soon as its parent server is gone or it is asked to stop (SIGTERM). Killing it
at any moment is safe: every append is an idempotent Delta transaction.

Freshness: between passes the follower looks at the store every `LOOK`
seconds, from the files alone (no Spark, no Delta log): a seal creates a new
newest segment file, an explicit delete grows `explicit.log`. Either starts a
pass at once; otherwise a pass runs every `interval` anyway (configuration
changes, retries after an error). While it waits, Delta replays the log of the
tables Spark just appended to (`Compactor.warm`), which the next append would
otherwise do first; a small append through delta-rs (`log.compactor.direct`)
needs no replay, so a seal finds the compactor ready.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

from log.compactor.compact import Compactor
from log.compactor.layout import REPLICA_FILE, LakeError, stream_dirs
from log.compactor.maintain import current_tables, optimize
from log.segments.filestore import EXPLICIT
from log.segments.segment import discover

log = logging.getLogger("jetlake.lake")

RECENT = "date >= date_sub(current_date(), 1)"  # what the schedule optimizes: today, yesterday
LOOK = 0.1  # seconds between looks at the store for a seal or a delete
BACKOFF_MAX = 30.0  # seconds: the longest pause after passes that failed (the lake's store gone)


def store_state(store_dir: Path) -> tuple[tuple[str, tuple[int, int] | None, int, int], ...]:
    """Per stream folder: its newest segment, the size of its explicit-delete log, and when
    a replicated stream's `replica.json` last changed (this server took or lost the lead).

    What a pass would do changes only if one of these did: merges and reclaims
    rewrite older segments and appends grow the active one, none of which is
    work for the lake. A folder listing and a few stats per stream.
    """
    out = []
    for folder in stream_dirs(store_dir, None):  # every account's
        try:
            newest = discover(folder, clean=False)[-1:]
        except FileNotFoundError:  # the stream was deleted while we looked
            continue
        logged = _stat(folder / EXPLICIT).st_size
        led = _stat(folder / REPLICA_FILE).st_mtime_ns
        where = f"{folder.parent.parent.name}/{folder.name}"  # account/stream
        out.append((where, newest[0] if newest else None, logged, led))
    return tuple(out)


def _stat(path: Path) -> os.stat_result:
    """The file's stat, or zeros when it is not there."""
    try:
        return path.stat()
    except FileNotFoundError:
        return os.stat_result((0,) * 10)


def follow(
    compactor: Compactor,
    *,
    interval: float,
    optimize_interval: float = 0.0,
    parent_pid: int | None = None,
) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    last_optimize = time.monotonic()
    backoff = 0.0
    while not stop.is_set():
        if parent_pid is not None and os.getppid() != parent_pid:
            log.info("compactor: server %d is gone; exiting", parent_pid)
            return
        seen = store_state(compactor.store_dir)  # before the pass: a seal during it counts
        summary = compactor.run_once()
        if summary.rows or summary.deletes:
            log.info("compactor: %s", summary.line())
        if optimize_interval > 0 and time.monotonic() - last_optimize >= optimize_interval:
            last_optimize = time.monotonic()
            for name, table in current_tables(compactor.store_dir, compactor.lake_dir):
                try:
                    optimize(compactor.spark, name, table, where=RECENT)
                except LakeError as exc:
                    log.error("%s", exc)
        compactor.warm()
        # A failing pass (an object store that is gone or refusing) is tried again after a
        # pause that doubles up to BACKOFF_MAX, not at every seal: the live log holds the rows.
        backoff = min(max(backoff * 2, 1.0), BACKOFF_MAX) if summary.errors else 0.0
        if backoff and stop.wait(backoff):
            return
        _wait(stop, compactor.store_dir, seen, interval)


def _wait(stop: threading.Event, store_dir: Path, seen: object, interval: float) -> None:
    """Until the store differs from `seen`, `interval` has passed, or we are asked to stop."""
    end = time.monotonic() + interval
    while not stop.wait(max(min(LOOK, end - time.monotonic()), 0.0)):
        if time.monotonic() >= end or store_state(store_dir) != seen:
            return
