"""`jetlake job compact|optimize|vacuum`: the lake's batch jobs, also runnable under spark-submit.

    jetlake job compact  [--store DIR] [--lake DIR] [--spark_master M]  one pass, exit (cron)
    jetlake job compact --follow --interval 1 [--parent PID]            the server's compactor
    jetlake job optimize [--store DIR] [--lake DIR]                     bin-pack, Z-order
    jetlake job vacuum   [--lake DIR] [--retain_hours 168]              drop unreferenced files
    spark-submit --jars "$(ls .venv/jars/*.jar | paste -sd,)" jobs/lake_job.py compact --store DIR

Each prints progress lines and a summary line (segments, rows, bytes, files,
seconds) on stdout; errors name the stream, segment or table on stderr and make
the exit code 1.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

from log.compactor.compact import MAX_ROWS, Compactor, Summary, waiting_streams
from log.compactor.layout import ACCOUNTS, LakeError, accounts, lake_at
from log.compactor.location import LakeStoreError
from log.compactor.spark import build_session

JOBS = ("compact", "optimize", "vacuum")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jetlake job", description="The lake's batch jobs.")
    p.add_argument(
        "job",
        choices=JOBS,
        help="compact: sealed segments into Delta tables; optimize: bin-pack small files and "
        "Z-order by subject; vacuum: drop files no table version needs",
    )
    p.add_argument("--store", default="./data", help="store dir (the server's -sd)")
    p.add_argument("--lake", help="lake dir or s3://bucket/prefix (default: <store>/lake)")
    p.add_argument("--spark_master", help="Spark master (default: JETLAKE_SPARK_MASTER, local[*])")
    p.add_argument("--follow", action="store_true", help="compact: a pass per interval")
    p.add_argument(
        "--interval",
        type=float,
        default=1.0,
        help="--follow: seconds between passes at most (a seal or a delete starts one at once)",
    )
    p.add_argument("--optimize_interval", type=float, default=0.0, help="seconds; 0: never")
    p.add_argument("--parent", type=int, help="exit when this process (the server) is gone")
    p.add_argument("--max_rows", type=int, default=MAX_ROWS, help="rows per Delta append")
    p.add_argument("--retain_hours", type=float, default=168.0, help="vacuum retention")
    return p


def _print(line: str) -> None:
    print(line, flush=True)


def run(args: argparse.Namespace) -> Summary:
    store = Path(args.store)
    lake = lake_at(args.lake, store)
    if not accounts(store):
        raise LakeError(f"store dir {store} has no streams folder ({ACCOUNTS}/<account>/streams)")
    try:
        lake.check()
    except LakeStoreError as exc:
        raise LakeError(str(exc)) from exc
    if args.job == "compact" and not args.follow and not waiting_streams(store, lake):
        _print("compact: every stream's lake is up to date")
        return Summary()
    spark = build_session(f"jetlake-{args.job}", master=args.spark_master, lake=lake)
    if args.job == "compact":
        compactor = Compactor(spark, store, lake, max_rows=args.max_rows, progress=_print)
        if args.follow:
            from log.compactor.follow import follow

            follow(
                compactor,
                interval=args.interval,
                optimize_interval=args.optimize_interval,
                parent_pid=args.parent,
            )
            return Summary()
        return compactor.run_once()
    from log.compactor import maintain

    total = Summary()
    if args.job == "optimize":
        for name, table in maintain.current_tables(store, lake):
            _print(f"optimize {name}: {table}")
            try:
                total.add(maintain.optimize(spark, name, table))
            except LakeError as exc:
                total.errors.append(str(exc))
    else:
        for table in maintain.delta_tables(lake):
            _print(f"vacuum {table}")
            try:
                total.files += maintain.vacuum(spark, table, retain_hours=args.retain_hours)
            except LakeError as exc:
                total.errors.append(str(exc))
    return total


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    logging.basicConfig(
        level=logging.INFO, format=f"[compactor {os.getpid()}] %(levelname)s %(message)s"
    )
    start = time.monotonic()
    try:
        summary = run(args)
    except LakeError as exc:
        print(f"jetlake job {args.job}: {exc}", file=sys.stderr)
        return 1
    summary.seconds = time.monotonic() - start
    for error in summary.errors:
        print(f"jetlake job {args.job}: {error}", file=sys.stderr)
    _print(f"{args.job} summary: {summary.line()}")
    return 1 if summary.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
