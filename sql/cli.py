"""`jetlake sql "SELECT …"`: Spark SQL over every stream's whole history (lake + live tail).

    jetlake sql --store ./data "SELECT subject, count(*) FROM ORDERS GROUP BY 1"
    jetlake sql --store ./data --format json "SELECT seq, data FROM ORDERS WHERE seq > 10"

Output formats are `jetlake inspect`'s (the same writers), so scripts can
switch between the DuckDB and the Spark answer. A query running longer than
two seconds shows a progress line on stderr (stage, tasks done/total,
seconds), redrawn in place on a terminal and printed every few seconds
otherwise.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import TYPE_CHECKING

from sql.inspect import add_output_args, to_result, write_result

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_QUIET = 2.0  # seconds before the first progress line
_EVERY_TTY = 0.5
_EVERY_LOG = 5.0


class Progress:
    """Reports Spark's active stages until stopped; silent for quick queries."""

    def __init__(self, spark: SparkSession) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._done = threading.Event()
        self._tty = sys.stderr.isatty()
        self._thread = threading.Thread(target=self._run, name="sql-progress", daemon=True)
        self._shown = False

    def __enter__(self) -> Progress:
        self._start = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        if self._shown and self._tty:
            sys.stderr.write("\n")

    def _run(self) -> None:
        if self._done.wait(_QUIET):
            return
        while not self._done.is_set():
            parts = []
            for stage_id in self._tracker.getActiveStageIds():
                info = self._tracker.getStageInfo(stage_id)
                if info is not None:
                    parts.append(f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks}")
            line = f"[{', '.join(parts) or 'planning'}; {time.monotonic() - self._start:.0f}s]"
            sys.stderr.write(("\r" + line) if self._tty else line + "\n")
            sys.stderr.flush()
            self._shown = True
            self._done.wait(_EVERY_TTY if self._tty else _EVERY_LOG)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jetlake sql",
        description="Spark SQL over every stream: Delta table up to L plus live segments after L.",
    )
    p.add_argument(
        "sql",
        help="SQL over one view per stream (named as the stream), kv_<bucket> and obj_<bucket>",
    )
    p.add_argument("--store", required=True, help="store dir (the server's -sd)")
    p.add_argument("--lake", help="lake dir or s3://bucket/prefix (default: <store>/lake)")
    p.add_argument("--spark_master", help="Spark master (default: JETLAKE_SPARK_MASTER, local[*])")
    add_output_args(p)
    return p


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    from sql.session import session

    spark = session(store_dir=args.store, lake_dir=args.lake, master=args.spark_master)
    try:
        with Progress(spark):
            table = spark.sql(args.sql).toArrow()
    except Exception as exc:  # Spark's analysis and execution errors arrive through py4j
        print(f"jetlake sql: {exc}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    write_result(to_result(table), sys.stdout, fmt=args.format, limit=args.limit)
    return 0
