"""The SQL service: one warm Spark session beside the lake, serving every client's queries.

    jetlake sql serve --store ./data [--listen 127.0.0.1:15002] [--jdbc 127.0.0.1:10000]
                      [--nats nats://127.0.0.1:4222] [--max_rows N]
                      [--logins nats://127.0.0.1:4222] [--max_result_size 256m]
                      [--catalog thrift://host:9083] [--cache_lake auto|on|off]

A query through it costs a plan and a scan, not a JVM: the session starts
once, and three doors lead in. Spark Connect (`sc://host:port`, any PySpark
client and `jetlake sql`), the Spark Thrift server (JDBC/ODBC, `jdbc:hive2://`:
beeline, DBeaver, Superset, Tableau) and SQL over NATS (`sql.nats_door.service`).

Connect and Thrift give each client a Spark session of its own, and a
temporary view lives in one session, so the views are registered in the
service's own session as `sql.views` builds them, then published as global
temporary views; the analyzer rule in `sql/views_ext` (`StreamViews`) resolves
a bare name (`ORDERS`) to the global view. That rule calls back here
(`SharedViews.refresh`, over py4j) before it looks, so the views are rebuilt
at each query rather than on a timer or a watch of the store: a query then
sees every message acknowledged before it started, and streams created,
deleted or retyped since, which no period short of "each query" guarantees.
Concurrent queries share one rebuild that started after they asked.

Every account's streams have views: the global account's bare (`ORDERS`), a
named account's as `A.ORDERS` (`sql.account_views`). A session bound to an
account resolves bare names to that account's views and reads nothing else
(`AccountWalls`); one bound to all (the system account's) reads all. SQL over
NATS binds each query's session to the asking account. With `--logins` (what
`jetlake serve` passes when it has accounts or users), Spark Connect and JDBC
clients log in with NATS credentials, checked by the NATS server (`sql.logins`),
and their sessions are bound to the login's account; a session of no login
runs nothing. Without it those two doors are open, and read all.

Every door bounds a result: past `--max_rows` rows SQL over NATS, Spark
Connect and JDBC stop the query with an error naming the key, and every query's
result is at most `--max_result_size` bytes in the service (Spark's
`spark.driver.maxResultSize`), past which its job fails with Spark's error
naming that setting (the JDBC door hands rows over a partition at a time as a client
fetches them, and counts them).

With `--catalog` a rebuild also registers every stream's lake table in a Hive
metastore, for engines outside jetlake (`sql.catalog`).

`<store>/jetlake-sql.json` holds the addresses while the service runs, so
`jetlake sql` finds it (`sql.cli`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from log.compactor.layout import lake_at
from log.compactor.location import Lake
from log.compactor.spark import build_session, local_jars
from sql.account_views import allow, bind
from sql.catalog import HiveCatalog, catalog_entries, keep_synced
from sql.current import ServerCopies
from sql.duck_views import stream_of_views
from sql.lake_cache import CHOICE_ENV, CHOICES, wanted
from sql.lake_cache import ENABLED as LAKE_CACHE
from sql.lake_snapshot import forget_unless
from sql.logins import OWN_LOGIN_ENV, NatsLogin
from sql.service_info import (
    SERVICE_FILE,
    Endpoints,
    first_line,
    quiet_query_errors,
    split_hostport,
)
from sql.views import file_stats, lake_tables, quoted, register_changed
from sql.warming import keep_warm

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sql.nats_door.service import NatsSql

log = logging.getLogger("jetlake.sql")

ADDRESS_TAKEN = 3  # the exit code that tells the server not to start it again
DEFAULT_LISTEN = "127.0.0.1:15002"  # Spark Connect's own default port
DEFAULT_MAX_ROWS = 1_000_000  # a NATS or Connect result's (`lake { sql { max_rows } }`)
DEFAULT_MAX_RESULT_SIZE = "256m"  # well under the driver's heap (1g): past it, an error
_EXTENSIONS = "io.delta.sql.DeltaSparkSessionExtension,io.jetlake.sql.StreamViews"
_RULE = "io.jetlake.sql.StreamViews"


class SharedViews:
    """The views of a store as global temporary views, rebuilt on demand (py4j's callback)."""

    def __init__(
        self,
        spark: SparkSession,
        store_dir: Path,
        lake: Lake,
        catalog: HiveCatalog | None = None,
        copies: ServerCopies | None = None,
    ) -> None:
        self._spark = spark
        self._catalog = catalog
        self._copies = copies or ServerCopies()
        self._store = store_dir
        self._lake = lake
        self._lock = threading.Lock()
        self._rebuilder: int | None = None  # the thread rebuilding now, if one is
        self._last_start = 0
        self._names: set[str] = set()
        self._frames: dict[str, DataFrame] = {}  # the published views, by name
        self._walled = False  # the wall was told the views at least once
        self._seen: frozenset[tuple[str, int, int]] | None = None
        # a stream's views -> (account, stream), as the last rebuild found them
        self._streams: dict[str, tuple[str, str]] = {}

    def refresh(self, names: Iterable[str] | None = None) -> None:
        """Rebuild unless a rebuild that started after this call did already (one for a burst).

        First the server beside shows its copies of the streams behind `names` current (the
        global views a query reads; none: every stream), so a rebuild that starts after that
        reads what was acknowledged before the query. A view the last rebuild did not know
        (a new stream's), or one of no stream's own (a bucket's, MQTT's), asks for every
        stream.

        The rebuilding thread's own call returns at once: py4j runs the analyzer rule's
        callback on the thread that called into the JVM, so a rebuild resolving a name that
        is not registered yet (a KV bucket whose stream appeared between two listings) calls
        back here while holding the lock, and waiting on it would hang every query. That
        rebuild then fails on the name and the next refresh, finding the store still
        changed, builds it again."""
        if self._rebuilder == threading.get_ident():
            return
        found = [self._streams.get(name) for name in names or ()]
        named = [stream for stream in found if stream is not None]
        self._copies.wait(sorted(set(named)) if found and len(named) == len(found) else None)
        asked = time.monotonic_ns()
        with self._lock:
            if self._last_start >= asked:
                return
            self._last_start = time.monotonic_ns()
            self._rebuilder = threading.get_ident()
            try:
                seen = self._fingerprint()
                if seen is None or seen != self._seen:
                    self._rebuild()
                    self._seen = seen
            except Exception:  # a broken stream folder must not fail every query's analysis
                log.exception("sql service: rebuilding the views of %s failed", self._store)
            finally:
                self._rebuilder = None

    def _fingerprint(self) -> frozenset[tuple[str, int, int]] | None:
        """Every file's (path, size, mtime) under the store and a local lake, data files of
        the lake aside (a commit adds a log entry); None for a lake in object storage."""
        if self._lake.remote:
            return None
        return file_stats({self._store, Path(self._lake.root)})

    def _rebuild(self) -> None:
        """Every account's views, those that changed published again, and the wall told
        which account's views read which files (`sql.account_views`)."""
        spark = self._spark
        found, changed = register_changed(spark, self._store, self._lake)
        self._streams = stream_of_views(self._store)
        names = {name for names in found.values() for name in names}
        fresh = changed | (names - self._frames.keys())  # a failed rebuild left some out
        for name in fresh:
            frame = spark.table(quoted(name))
            frame.createOrReplaceGlobalTempView(quoted(name))
            self._frames[name] = frame
        gone = self._names - names
        for name in gone:
            spark.catalog.dropTempView(name)
            spark.catalog.dropGlobalTempView(name)
            self._frames.pop(name, None)
        if fresh or gone or not self._walled:
            allow(spark, {a: [self._frames[n] for n in ns] for a, ns in found.items()})
            self._walled = True
            forget_unless(lake_tables(self._store, self._lake))  # a deleted stream's cache
        self._names = names
        if self._catalog is not None:
            self._sync_catalog(self._catalog)

    def _sync_catalog(self, catalog: HiveCatalog) -> None:
        """A metastore down or refusing leaves the views served (the next change retries)."""
        try:
            catalog.sync(catalog_entries(self._store, self._lake))
        except Exception as exc:
            log.error("sql service: catalog %s not synced: %s", catalog.uri, first_line(exc))

    class Java:
        implements = [f"{_RULE}$Refresher"]


def start_session(
    *,
    store_dir: Path,
    lake: Lake,
    listen: tuple[str, int],
    jdbc: tuple[str, int] | None,
    master: str | None,
    catalog: str | None = None,
    logins: str | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_result_size: str = DEFAULT_MAX_RESULT_SIZE,
    cache_lake: str = "auto",
    copies: ServerCopies | None = None,
) -> tuple[SparkSession, SharedViews]:
    """The service's session with its views published, Connect (and Thrift) listening, their
    clients logging in with NATS credentials checked at `logins` (a URL) when given; each
    refresh of the views first asks `copies` (the server beside) to show its copies current."""
    if jdbc is not None:  # Hive's Thrift service reads these before its own configuration
        os.environ["HIVE_SERVER2_THRIFT_BIND_HOST"] = jdbc[0]
        os.environ["HIVE_SERVER2_THRIFT_PORT"] = str(jdbc[1])
    conf = {
        # The Thrift server opens sessions on threads of its own, whose class loader sees the
        # JVM's class path, not the jars Spark adds at run time: Delta's catalog and the rule.
        "spark.driver.extraClassPath": os.pathsep.join(local_jars(s3a=lake.remote)),
        "spark.sql.extensions": _EXTENSIONS,
        "spark.connect.grpc.binding.address": listen[0],
        "spark.connect.grpc.binding.port": str(listen[1]),
        "spark.connect.grpc.interceptor.classes": "io.jetlake.sql.ConnectDoor",
        "spark.driver.maxResultSize": max_result_size,
        LAKE_CACHE: str(wanted(cache_lake, lake)).lower(),
    }
    if logins is not None:  # HiveServer2's CUSTOM authentication (its class: see below)
        conf["spark.hadoop.hive.server2.authentication"] = "CUSTOM"
    spark = build_session("jetlake-sql-service", master=master, lake=lake, conf=conf)
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = spark.sparkContext._gateway
    assert gateway is not None
    ensure_callback_server_started(gateway)
    jvm = spark._jvm
    assert jvm is not None
    bind(spark, None)  # the service's own session builds every account's views
    jvm.io.jetlake.sql.ConnectDoor.limit(max_rows)
    if logins is not None:  # before either door opens
        jvm.io.jetlake.sql.NatsLogins.require(NatsLogin(logins))
    hive = HiveCatalog(spark, catalog) if catalog else None
    views = SharedViews(spark, store_dir, lake, hive, copies)
    views.refresh()
    jvm.io.jetlake.sql.StreamViews.setRefresher(views)
    jvm.org.apache.spark.sql.connect.service.SparkConnectService.start(spark._jsc.sc())
    if jdbc is not None:
        # Hive's scratch metastore (Derby) logs to ./derby.log unless told otherwise.
        jvm.java.lang.System.setProperty("derby.stream.error.file", os.devnull)
        # Hive looks the class up in a HiveConf of its own, which takes system properties.
        custom = "hive.server2.custom.authentication.class"
        jvm.java.lang.System.setProperty(custom, "io.jetlake.sql.JdbcDoor")
        thrift = jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2
        try:
            server = thrift.startWithContext(spark._jsparkSession.sqlContext())
            jvm.io.jetlake.sql.JdbcDoor.serve(server)
        except Exception as exc:  # the port taken: Connect and NATS still serve
            log.error("sql service: no JDBC on %s:%d: %s", *jdbc, first_line(exc))
    return spark, views


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jetlake sql serve",
        description="Serve Spark SQL over every stream: Spark Connect, JDBC and NATS.",
    )
    p.add_argument("--store", required=True, help="store dir (the server's -sd)")
    p.add_argument("--lake", help="lake dir or s3://bucket/prefix (default: <store>/lake)")
    p.add_argument("--spark_master", help="Spark master (default: JETLAKE_SPARK_MASTER, local[*])")
    p.add_argument("--listen", default=DEFAULT_LISTEN, help="Spark Connect's host:port")
    p.add_argument("--jdbc", help="the Thrift (JDBC/ODBC) server's host:port (default: none)")
    p.add_argument("--nats", help="serve $JL.SQL on this NATS server (e.g. nats://127.0.0.1:4222)")
    p.add_argument(
        "--nats_creds",
        help="credentials file for --nats (or the environment's " + ", ".join(OWN_LOGIN_ENV) + ")",
    )
    p.add_argument(
        "--logins",
        help="Connect and JDBC clients log in with NATS credentials, checked on this NATS server",
    )
    p.add_argument(
        "--max_rows",
        type=int,
        default=DEFAULT_MAX_ROWS,
        help="rows a result may have at any door (past them: an error naming max_rows)",
    )
    p.add_argument(
        "--max_result_size",
        default=DEFAULT_MAX_RESULT_SIZE,
        help="bytes a query's result may take in the service (spark.driver.maxResultSize)",
    )
    p.add_argument(
        "--catalog", help="register every stream's lake table in this Hive metastore (thrift://…)"
    )
    p.add_argument(
        "--cache_lake",
        choices=CHOICES,
        default=os.environ.get(CHOICE_ENV, "auto"),
        help=f"cache the views' lake part in memory (auto: a bucket lake's only; ${CHOICE_ENV})",
    )
    p.add_argument("--parent", type=int, help="exit when this process (the server) is gone")
    return p


async def _serve(
    args: argparse.Namespace, spark: SparkSession, copies: ServerCopies, stop: asyncio.Event
) -> None:
    """Until stopped or orphaned: the NATS door (if asked for) and the parent watch.

    The NATS door starts aside: a server still starting, or refusing the service's
    credentials, must keep neither the parent watch nor the other doors waiting."""
    door = None
    opening = None
    if args.nats:
        from sql.nats_door.service import NatsSql

        store = Path(args.store)
        door = NatsSql(
            spark,
            args.nats,
            creds=args.nats_creds,
            login=own_login(),
            max_rows=args.max_rows,
            store=store,
            lake=lake_at(args.lake, store),
            copies=copies,
        )
        opening = asyncio.get_running_loop().create_task(_open(door, args.nats))
    try:
        while not stop.is_set():
            if args.parent is not None and os.getppid() != args.parent:
                log.info("sql service: server %d is gone; exiting", args.parent)
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    finally:
        if opening is not None:
            opening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await opening
        if door is not None:
            await door.stop()


async def _open(door: NatsSql, url: str) -> None:
    try:
        await door.start()
    except Exception as exc:  # refused (authorization), unreachable: the others serve
        log.error("sql service: no $JL.SQL on %s: %s", url, exc)


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
        listen = split_hostport(args.listen, "--listen")
        jdbc = split_hostport(args.jdbc, "--jdbc") if args.jdbc else None
    except SystemExit as exit_:
        return int(exit_.code or 0)
    except ValueError as exc:
        print(f"jetlake sql serve: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    quiet_query_errors()
    store = Path(args.store)
    if not store.is_dir():
        print(f"jetlake sql serve: store dir {store} does not exist", file=sys.stderr)
        return 2
    for what, address in (("--listen", listen), ("--jdbc", jdbc)):
        if address is not None and not _free(address):
            print(f"jetlake sql serve: {what} {address[0]}:{address[1]} is taken", file=sys.stderr)
            return ADDRESS_TAKEN
    lake = lake_at(args.lake, store)
    copies = ServerCopies()  # connected once the NATS door is
    spark, views = start_session(
        store_dir=store,
        lake=lake,
        listen=listen,
        jdbc=jdbc,
        master=args.spark_master,
        catalog=args.catalog,
        logins=args.logins,
        max_rows=args.max_rows,
        max_result_size=args.max_result_size,
        cache_lake=args.cache_lake,
        copies=copies,
    )
    endpoints = Endpoints(
        pid=os.getpid(),
        connect=f"sc://{args.listen}",
        jdbc=f"jdbc:hive2://{args.jdbc}" if args.jdbc else None,
        nats=args.nats,
    )
    endpoints.write(store)
    log.info("sql service: Spark Connect on %s%s", endpoints.connect, _and_jdbc(endpoints))

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if args.catalog:  # other engines' queries do not pass here to trigger a refresh
            syncing = loop.create_task(keep_synced(views.refresh, stop))
        warming = loop.create_task(keep_warm(spark, views.refresh, store, lake, stop))
        await _serve(args, spark, copies, stop)
        stop.set()  # orphaned: the watches end too
        await warming
        if args.catalog:
            await syncing

    try:
        asyncio.run(run())
    finally:
        if Endpoints.read(store) == endpoints:
            (store / SERVICE_FILE).unlink(missing_ok=True)
        spark.stop()
    return 0


def own_login() -> dict[str, str]:
    """The service's own NATS user and password or token, from the environment (the server
    passes its `lake { sql }` ones there: an argument would show in every `ps`)."""
    given = {
        key: os.environ.get(env)
        for key, env in zip(("user", "password", "token"), OWN_LOGIN_ENV, strict=True)
    }
    return {key: value for key, value in given.items() if value}


def _free(address: tuple[str, int]) -> bool:
    """Whether the address can be listened on now (checked before a JVM is spent on it)."""
    try:
        with socket.create_server(address, family=_family(address[0])):
            return True
    except OSError:
        return False


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _and_jdbc(endpoints: Endpoints) -> str:
    return f", JDBC on {endpoints.jdbc}" if endpoints.jdbc else ""
