"""`jetlake sql "SELECT …"`: Spark SQL over every stream's whole history (lake + live tail).

    jetlake sql --store ./data "SELECT subject, count(*) FROM ORDERS GROUP BY 1"
    jetlake sql --store ./data --format json "SELECT seq, data FROM ORDERS WHERE seq > 10"
    jetlake sql --store ./data --engine duckdb "SELECT count(*) FROM ORDERS"
    jetlake sql serve --store ./data         # the long-lived SQL service (`sql.service`)

A query goes to the SQL service when one is up (the one `<store>/jetlake-sql.json`
names, or `--service sc://host:port`): no JVM starts. The store's service is asked
through its NATS door (`$JL.SQL.query`, Arrow chunks) when it has one, so this
process imports nats-py and pyarrow only, not Spark Connect's client (pandas and
gRPC: most of a second); a door that does not answer (no import of `$JL.SQL` in
the login's account, a server down) leaves Spark Connect to ask. On a server with
logins, `SPARK_CONNECT_AUTHENTICATE_TOKEN` holds the NATS login (`user:password`,
`jwt:seed` or a token) the service checks, whichever door. Without a service (or
with `--local`) a Spark session starts here for the query, which costs 15-20 s.
Which door answered is said on stderr. With `--engine duckdb` the service's NATS
door answers on DuckDB (`sql.nats_door.duck_engine`, DuckDB's dialect); without that door,
DuckDB reads the store here, with the door's views: no JVM either way.

Output formats are `jetlake inspect`'s (the same writers), so scripts can
switch between the DuckDB and the Spark answer. A query running longer than
two seconds shows a progress line on stderr (stage, tasks done/total,
seconds), redrawn in place on a terminal and printed every few seconds
otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sql.nats_door.client import ENGINE, SqlError
from sql.nats_door.client import query as ask_nats
from sql.output import add_output_args, to_result, write_result
from sql.service_info import SERVICE_FILE, Endpoints, first_line, quiet_query_errors, split_hostport

if TYPE_CHECKING:
    import pyarrow as pa
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
        description="Spark SQL over every stream: Delta table up to L plus live segments after L."
        " `jetlake sql serve --help`: the long-lived SQL service.",
    )
    p.add_argument(
        "sql",
        help="SQL over one view per stream (named as the stream), kv_<bucket> and obj_<bucket>",
    )
    p.add_argument("--store", required=True, help="store dir (the server's -sd)")
    p.add_argument("--lake", help="lake dir or s3://bucket/prefix (default: <store>/lake)")
    p.add_argument("--spark_master", help="Spark master (default: JETLAKE_SPARK_MASTER, local[*])")
    p.add_argument("--service", help="the SQL service's sc://host:port (default: the store's)")
    p.add_argument("--local", action="store_true", help="start a local session, not the service")
    p.add_argument(
        "--engine",
        choices=("spark", "duckdb"),
        default="spark",
        help="spark (default), or duckdb: the service's NATS door on DuckDB, else DuckDB here",
    )
    add_output_args(p)
    return p


def live_service(store: Path) -> Endpoints | None:
    """The store's SQL service while its process lives and its Connect port answers."""
    found = Endpoints.read(store)
    if found is None:
        return None
    try:
        os.kill(found.pid, 0)
        host, port = split_hostport(found.connect.removeprefix("sc://"), SERVICE_FILE)
        socket.create_connection((host, port), timeout=1.0).close()
    except (OSError, ValueError):
        return None
    return found


TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"  # pyspark's own: a NATS login, with logins on


def login_url(url: str) -> str:
    """With a login token, loopback named `localhost`: pyspark sends a token in the clear to
    that name only (gRPC's local credentials), and over TLS, which the service lacks, else."""
    if os.environ.get(TOKEN_ENV) and url.startswith("sc://127.0.0.1:"):
        return "sc://localhost:" + url.removeprefix("sc://127.0.0.1:")
    return url


def _remote(url: str, query: str) -> pa.Table:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    spark = ConnectSession.builder.remote(login_url(url)).getOrCreate()
    try:
        return spark.sql(query).toArrow()
    finally:
        spark.stop()


def _said(exc: Exception) -> str:
    """Spark's message; a call the service refused (a gRPC error, which pyspark wraps whole)
    as its status and why."""
    rpc = exc.__context__
    code, details = getattr(rpc, "code", None), getattr(rpc, "details", None)
    if not (callable(code) and callable(details)) or code().name not in _REFUSALS:
        return first_line(exc)  # Spark's own errors come as INTERNAL, with a message
    said = f"{code().name}: {details()}"
    if code().name == "UNAUTHENTICATED":
        said += f" (set {TOKEN_ENV}=user:password)"
    return said


_REFUSALS = ("UNAUTHENTICATED", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED")  # the service's


def _local(args: argparse.Namespace) -> pa.Table:
    from sql.session import session

    spark = session(store_dir=args.store, lake_dir=args.lake, master=args.spark_master)
    try:
        with Progress(spark):
            return spark.sql(args.sql).toArrow()
    finally:
        spark.stop()


def _answer(args: argparse.Namespace) -> pa.Table:
    """The result from the first door that answers, each said on stderr as it is tried."""
    found = None if args.local or args.service else live_service(Path(args.store))
    duck = args.engine == "duckdb"
    if found is not None and found.nats:
        table = _through_nats(found, args.sql, {ENGINE: "duckdb"} if duck else None)
        if table is not None:
            return table
    if duck:
        print("jetlake sql: no SQL service over NATS; DuckDB over the store here", file=sys.stderr)
        return _duck_here(args)
    url = args.service or (found.connect if found is not None else None)
    if url is not None:
        print(f"jetlake sql: querying the SQL service at {url}", file=sys.stderr)
        return _remote(url, args.sql)
    why = "--local" if args.local else f"no SQL service up for {args.store}"
    print(f"jetlake sql: {why}; starting a local Spark session", file=sys.stderr)
    return _local(args)


def _duck_here(args: argparse.Namespace) -> pa.Table:
    """The result from DuckDB over the store, every account's streams (as the system
    account's service sees them: `A.ORDERS` in schema A)."""
    import pyarrow as pa

    from log.compactor.layout import lake_at
    from sql.nats_door.duck_engine import DuckEngine

    store = Path(args.store)
    con = DuckEngine(store, lake_at(args.lake, store)).connection(None, args.sql)
    try:
        found = con.sql(args.sql)
        return pa.table({}) if found is None else found.to_arrow_table()
    finally:
        con.close()


def _through_nats(
    found: Endpoints, query: str, headers: dict[str, str] | None = None
) -> pa.Table | None:
    """The result through the service's NATS door; None when the door does not answer
    (said on stderr): unreachable, the login refused, no service in the login's account."""
    import nats.errors

    url = found.nats
    print(f"jetlake sql: querying the SQL service over NATS at {url}", file=sys.stderr)
    try:
        return asyncio.run(_ask_nats(found, query, headers))
    except KeyboardInterrupt:  # Ctrl-C: the query was called off on the way out
        print("jetlake sql: cancelled", file=sys.stderr)
        raise SystemExit(130) from None
    except (OSError, TimeoutError, nats.errors.Error) as exc:
        why = str(exc) or type(exc).__name__
        print(f"jetlake sql: no answer over NATS ({why})", file=sys.stderr)
        return None


async def _ask_nats(found: Endpoints, query: str, headers: dict[str, str] | None) -> pa.Table:
    """One query over NATS, given up when the service's process exits meanwhile (its
    result would never end: no NATS message says a responder died)."""
    import nats

    nc = await nats.connect(
        found.nats,
        name="jetlake sql",
        allow_reconnect=False,
        max_reconnect_attempts=0,
        connect_timeout=_CONNECT_TIMEOUT,
        **nats_login(os.environ.get(TOKEN_ENV, "")),
    )
    asked = asyncio.ensure_future(ask_nats(nc, query, timeout=None, headers=headers))
    try:
        while not (await asyncio.wait({asked}, timeout=_LIVENESS))[0]:
            if not _alive(found.pid):
                raise SqlError("503", f"the SQL service (pid {found.pid}) exited during the query")
        return asked.result()
    finally:
        if not asked.done():  # Ctrl-C, or the service gone: the query is called off first
            asked.cancel()
            with contextlib.suppress(BaseException):
                await asked
        await nc.close()


_CONNECT_TIMEOUT = 2.0
_LIVENESS = 1.0  # seconds between checks that the service still runs


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        pass
    return True


def nats_login(token: str) -> dict[str, Any]:
    """nats-py's login arguments for a login as the token variable holds it, read as the
    Connect door reads it (`NatsLogins.fromToken`): `user:password`, `jwt:seed`, a token."""
    if not token:
        return {}
    user, colon, password = token.partition(":")
    if not colon:
        return {"token": token}
    if not user:
        return {"token": password}
    if user.startswith("eyJ") and password.startswith("SU"):
        from nats.aio.client import RawCredentials

        from sql.logins import creds_text

        return {"user_credentials": RawCredentials(creds_text(user, password))}
    return {"user": user, "password": password}


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        from sql.service import main as serve

        return serve(argv[1:])
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    quiet_query_errors()
    try:
        table = _answer(args)
    except SqlError as exc:  # the service's answer over NATS: Spark's message, or its limits
        print(f"jetlake sql: {exc.text}", file=sys.stderr)
        return 1
    except Exception as exc:  # Spark's errors arrive through py4j or gRPC
        print(f"jetlake sql: {_said(exc)}", file=sys.stderr)
        return 1
    write_result(to_result(table), sys.stdout, fmt=args.format, limit=args.limit)
    return 0
