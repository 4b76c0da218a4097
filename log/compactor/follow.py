"""The compactor beside a server: one long-lived SparkSession, a pass every `interval`.

The server starts this process only when a sealed segment is waiting for the
lake, so a short-lived server never pays for a JVM; once started it stays (a
JVM start costs seconds, a pass on a warm session a fraction) and exits as
soon as its parent server is gone or it is asked to stop (SIGTERM). Killing it
at any moment is safe: every append is an idempotent Delta transaction.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from log.compactor.compact import Compactor
from log.compactor.layout import LakeError
from log.compactor.maintain import current_tables, optimize

log = logging.getLogger("jetlake.lake")

RECENT = "date >= date_sub(current_date(), 1)"  # what the schedule optimizes: today, yesterday


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
    while not stop.is_set():
        if parent_pid is not None and os.getppid() != parent_pid:
            log.info("compactor: server %d is gone; exiting", parent_pid)
            return
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
        stop.wait(interval)
