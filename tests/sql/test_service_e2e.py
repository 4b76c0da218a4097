"""The SQL service a lake server starts, through each door: Spark Connect, `jetlake sql`,
SQL over NATS, and (soak) JDBC with beeline.

One server and one service JVM for the module: the service starts as `jetlake serve`
starts it (`lake { sql { … } }`), and every test asks it over real sockets with the
real clients, right after nats-py's PubAcks, with no refresh between.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from sql.lake_cache import CHOICE_ENV
from sql.nats_door.client import SqlError
from sql.nats_door.client import query as nats_query
from sql.service import Endpoints, quiet_query_errors
from tests.support.cluster import free_port
from tests.support.poll import poll, poll_async
from tests.support.servers import ServerProcess, start_server

START_DEADLINE = 180.0  # a JVM on a loaded two-core machine
pytestmark = pytest.mark.timeout(START_DEADLINE + 120)  # the first test pays the start
NATS = Path(sys.executable).parent / "nats"
JETLAKE = Path(sys.executable).parent / "jetlake"
SUBJECTS = ("orders.eu", "orders.us", "orders.apac")


@dataclass
class Service:
    server: ServerProcess
    store: Path
    connect: str
    jdbc: str
    spark: SparkSession


def start_with_service(
    *args: str, config: str, tmp_path: Path, env: dict[str, str] | None = None
) -> ServerProcess:
    """A jetlake server whose lake starts its SQL service (the suite keeps it off elsewhere),
    `env` in its environment."""
    saved = {key: os.environ.pop(key, None) for key in ("JETLAKE_SQL", *(env or {}))}
    os.environ.update(env or {})
    try:
        return start_server("jetlake", *args, config=config, tmp_path=tmp_path)
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None)
            if value is not None:
                os.environ[key] = value


def _wait_for_service(server: ServerProcess, store: Path, url: str | None = None) -> Endpoints:
    """The service's addresses, once its NATS door answers `$SRV.PING` too (asked on
    `url`: the service's own account)."""

    def answering() -> Endpoints | None:
        assert server.running, server.log()
        found = Endpoints.read(store)
        return found if found is not None and asyncio.run(_pings(url or server.url)) else None

    return poll(answering, lambda: f"an SQL service:\n{server.log()}", START_DEADLINE, interval=0.2)


async def _pings(url: str) -> bool:
    nc = await nats.connect(url)
    try:
        await nc.request("$SRV.PING.jetlake-sql", b"", timeout=1.0)
        return True
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        return False
    finally:
        await nc.close()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    quiet_query_errors()  # the tests check the errors; PySpark need not log them
    tmp = tmp_path_factory.mktemp("sql-service")
    store = tmp / "store"
    listen, jdbc = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    conf = (
        f'jetstream {{ store_dir: "{store}" }}\n'
        f'lake {{ seal_interval: "200ms", compact_interval: 0,\n'
        f'  sql {{ listen: "{listen}", jdbc: "{jdbc}" }} }}\n'
    )
    # The lake cache on, as on a bucket lake, so its tests below reach it on a local one.
    server = start_with_service(config=conf, tmp_path=tmp, env={CHOICE_ENV: "on"})
    try:
        found = _wait_for_service(server, store)
        assert found.connect == f"sc://{listen}" and found.jdbc == f"jdbc:hive2://{jdbc}"
        spark = ConnectSession.builder.remote(found.connect).create()
        yield Service(server, store, found.connect, found.jdbc, spark)
        spark.stop()
    finally:
        server.stop()
    # The service leaves with its server, and takes its address file along.
    poll(lambda: Endpoints.read(store) is None, "the address file gone with the service", 30)


async def _publish(url: str, stream: str, subjects: tuple[str, ...], n: int) -> Counter[str]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[f"{s.split('.')[0]}.>" for s in subjects[:1]])
        sent: Counter[str] = Counter()
        for i in range(n):
            subject = subjects[i % len(subjects)]
            await js.publish(subject, b"m-%d" % i)
            sent[subject] += 1
        return sent
    finally:
        await nc.close()


def _counts(spark: SparkSession, stream: str) -> Counter[str]:
    rows = spark.sql(f"SELECT subject, count(*) AS n FROM {stream} GROUP BY 1").collect()
    return Counter({r.subject: r.n for r in rows})


async def test_connect_sees_every_acknowledged_message_and_new_and_deleted_streams(
    service: Service,
) -> None:
    spark, url = service.spark, service.server.url
    sent = await _publish(url, "ORDERS", SUBJECTS, 30)
    assert _counts(spark, "ORDERS") == sent
    described = [r.col_name for r in spark.sql("DESCRIBE ORDERS").collect()]
    assert described[:4] == ["stream", "seq", "ts", "subject"]
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        ack = await js.publish("orders.eu", b"just now")  # no refresh: the next query has it
        row = spark.sql(f"SELECT data FROM ORDERS WHERE seq = {ack.seq}").collect()
        assert [r.data for r in row] == [b"just now"]
        await js.add_stream(name="LATE", subjects=["late.>"])
        await js.publish("late.x", b"1")
        assert spark.sql("SELECT count(*) AS n FROM LATE").collect()[0].n == 1
        await js.delete_stream("LATE")
        with pytest.raises(AnalysisException, match="`LATE`"):
            spark.sql("SELECT count(*) FROM LATE").collect()
    finally:
        await nc.close()
    # Other sessions of the service see the same views (each client has its own session).
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    other = ConnectSession.builder.remote(service.connect).create()
    assert other.sql("SELECT count(*) AS n FROM ORDERS").collect()[0].n == 31


@pytest.mark.soak  # the first query of each of these plans costs seconds in a cold JVM
async def test_kv_views_typed_tables_and_new_columns_show_at_the_next_query(
    service: Service,
) -> None:
    from nats.js.api import StreamConfig

    spark = service.spark
    nc = await nats.connect(service.server.url)
    try:
        js = nc.jetstream()
        config = StreamConfig(
            name="TYPED", subjects=["typed.>"], metadata={"jetlake.lake.format": "json"}
        )
        await js.add_stream(config)
        kv = await js.create_key_value(bucket="CFG")
        await kv.put("region", b"eu")
        rows = spark.sql("SELECT key, CAST(value AS STRING) AS v FROM kv_CFG").collect()
        assert [(r.key, r.v) for r in rows] == [("region", "eu")]
        await js.publish("typed.a", b'{"a": 1}')
        assert [r.a for r in spark.sql("SELECT a FROM TYPED").collect()] == [1]
        await js.publish("typed.a", b'{"a": 2, "b": "x"}')  # a new field: a new column
        rows = spark.sql("SELECT a, b FROM TYPED ORDER BY a").collect()
        assert [(r.a, r.b) for r in rows] == [(1, None), (2, "x")]
    finally:
        await nc.close()


async def test_jetlake_sql_goes_to_the_service_and_says_so(service: Service) -> None:
    await _publish(service.server.url, "CLI", ("cli.a",), 3)
    started = time.monotonic()
    done = subprocess.run(
        [str(JETLAKE), "sql", "--store", str(service.store), "SELECT count(*) AS n FROM CLI"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert f"querying the SQL service over NATS at {service.server.url}" in done.stderr
    assert "sc://" not in done.stderr  # no Connect client needed
    assert re.search(r"^\s*3\s*$", done.stdout, re.M), done.stdout
    print(f"jetlake sql through the service: {took:.2f}s end to end")
    through = ("--service", service.connect, "SELECT count(*) AS n FROM CLI")
    connect = subprocess.run(
        [str(JETLAKE), "sql", "--store", str(service.store), *through],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert connect.returncode == 0, connect.stderr
    assert f"querying the SQL service at {service.connect}" in connect.stderr
    assert re.search(r"^\s*3\s*$", connect.stdout, re.M), connect.stdout
    bad = subprocess.run(
        [str(JETLAKE), "sql", "--store", str(service.store), "SELECT * FROM NOPE"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 1 and "`NOPE` cannot be found" in bad.stderr
    assert "JVM stacktrace" not in bad.stderr


class _Answer:
    """What one `$JL.SQL.query` request got back: chunks, the end, or an error."""

    def __init__(self, *, ack: bool) -> None:
        self.ack = ack
        self.chunks: list[nats.aio.msg.Msg] = []
        self.end: nats.aio.msg.Msg | None = None
        self.done = asyncio.Event()
        self.moved = asyncio.Event()

    async def on_msg(self, msg: nats.aio.msg.Msg) -> None:
        headers = msg.headers or {}
        if "Jl-Sql-Chunk" in headers:
            self.chunks.append(msg)
            if self.ack:
                await msg.respond(b"")
        else:
            self.end = msg
            self.done.set()
        self.moved.set()

    def table(self) -> pa.Table:
        return pa.concat_tables(pa.ipc.open_stream(m.data).read_all() for m in self.chunks)


async def _ask(
    nc: nats.NATS, sql: str, *, ack: bool = True, headers: dict[str, str] | None = None
) -> _Answer:
    answer = _Answer(ack=ack)
    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=answer.on_msg)
    await nc.publish("$JL.SQL.query", sql.encode(), reply=inbox, headers=headers)
    return answer


async def _until(event: asyncio.Event, what: str, timeout: float = 60.0) -> None:
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        raise AssertionError(f"no {what} in {timeout}s") from None


async def test_sql_over_nats_streams_arrow_json_and_errors(service: Service) -> None:
    listed = subprocess.run(
        [str(NATS), "-s", service.server.url, "micro", "ls"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert listed.returncode == 0 and "jetlake-sql" in listed.stdout, listed
    await _publish(service.server.url, "NQ", ("nq.a", "nq.b"), 10)
    nc = await nats.connect(service.server.url)
    try:
        arrow = await _ask(nc, "SELECT seq, subject, data FROM NQ ORDER BY seq")
        await _until(arrow.done, "end of the Arrow answer")
        assert arrow.end is not None and arrow.end.headers == {"Jl-Sql-Rows": "10"}
        table = arrow.table()
        assert table.column("seq").to_pylist() == list(range(1, 11))
        assert table.column("data").to_pylist()[0] == b"m-0"

        as_json = await _ask(
            nc, "SELECT subject FROM NQ WHERE seq = 2", headers={"Jl-Sql-Format": "json"}
        )
        await _until(as_json.done, "end of the JSON answer")
        assert [m.data for m in as_json.chunks] == [b'{"subject": "nq.b"}\n']

        for sql, code, text in (
            ("SELECT * FROM NOPE", "400", "`NOPE` cannot be found"),
            ("SELEC 1", "400", "PARSE_SYNTAX_ERROR"),
        ):
            bad = await _ask(nc, sql)
            await _until(bad.done, f"error for {sql!r}")
            assert bad.end is not None and bad.end.headers is not None
            assert bad.end.headers["Nats-Service-Error-Code"] == code
            assert text in bad.end.headers["Nats-Service-Error"]
        # The Python client does the same: the whole result as Arrow, or the error.
        many = await nats_query(nc, "SELECT id FROM range(5000)", headers={"Jl-Sql-Window": "2"})
        assert many.column("id").to_pylist() == list(range(5000))
        with pytest.raises(SqlError, match=r"400: .*PARSE_SYNTAX_ERROR") as refused:
            await nats_query(nc, "SELEC 1")
        assert refused.value.code == "400"
    finally:
        await nc.close()


async def test_sql_over_nats_sends_no_more_than_a_window_ahead_of_the_acks(
    service: Service,
) -> None:
    nc = await nats.connect(service.server.url)
    try:
        slow = await _ask(
            nc, "SELECT id FROM range(20000)", ack=False, headers={"Jl-Sql-Window": "2"}
        )
        while len(slow.chunks) < 2:
            slow.moved.clear()
            await _until(slow.moved, "the first chunks")
        slow.moved.clear()
        with pytest.raises(TimeoutError):  # a third chunk would mean no flow control
            await asyncio.wait_for(slow.moved.wait(), 1.0)
        assert len(slow.chunks) == 2
        slow.ack = True
        for msg in slow.chunks:
            await msg.respond(b"")
        await _until(slow.done, "the rest of the answer")
        assert slow.end is not None and slow.end.headers == {"Jl-Sql-Rows": "20000"}
        assert slow.table().column("id").to_pylist() == list(range(20000))
    finally:
        await nc.close()


@pytest.mark.soak
async def test_beeline_over_jdbc_sees_the_views(service: Service) -> None:
    import pyspark

    await _publish(service.server.url, "BEE", ("bee.a", "bee.b"), 5)
    beeline = Path(pyspark.__file__).parent / "bin" / "beeline"
    query = "SELECT subject, count(*) AS n FROM BEE GROUP BY 1 ORDER BY 1"
    done = await asyncio.to_thread(
        subprocess.run,
        [str(beeline), "-u", service.jdbc, "--silent=true", "--outputformat=csv2", "-e", query],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert "bee.a,3" in done.stdout and "bee.b,2" in done.stdout, done.stdout
    # A BI tool's table browser asks the driver's metadata: the views are under global_temp.
    listed = await asyncio.to_thread(
        subprocess.run,
        [str(beeline), "-u", service.jdbc, "--silent=true", "--outputformat=csv2", "-e", "!tables"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert ",global_temp,bee,VIEW," in listed.stdout, listed.stdout


@pytest.mark.soak
def test_jetlake_sql_without_a_service_starts_a_local_session_and_says_so(
    tmp_path: Path,
) -> None:
    (tmp_path / "jetstream").mkdir()
    done = subprocess.run(
        [str(JETLAKE), "sql", "--store", str(tmp_path), "SELECT 41 + 1 AS answer"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert f"no SQL service up for {tmp_path}; starting a local Spark session" in done.stderr
    assert re.search(r"^\s*42\s*$", done.stdout, re.M), done.stdout


def _compact(store: Path, name: str) -> None:
    """Append the stream's rows past the lake's L to its Delta table in one commit, as the
    compactor's small appends do (`log.compactor.direct`): in milliseconds, with no JVM (the
    module's server runs no compactor)."""
    import pyarrow.compute as pc
    from deltalake import CommitProperties, Transaction, write_deltalake

    from log.compactor.compact import lake_progress
    from log.compactor.direct import append_direct
    from log.compactor.layout import STREAMS, StreamRef, default_lake_dir
    from log.compactor.rows import to_lake
    from log.segments import read_table

    ref = StreamRef.load(store / STREAMS / name)
    table = ref.table_path(default_lake_dir(store))
    done = lake_progress(table, ref.app_id)
    live = read_table(ref.dir, include_deleted=True, after_seq=done)
    rows = to_lake(name, live.filter(pc.greater(live.column("seq"), done)))
    last = pc.max(rows.column("seq")).as_py()
    if done:
        append_direct(table.uri, rows, app_id=ref.app_id, after=done, version=last)
    else:
        txn = CommitProperties(app_transactions=[Transaction(ref.app_id, last)])
        write_deltalake(table.uri, rows, partition_by=["date"], commit_properties=txn)


async def test_cached_lake_part_misses_no_acknowledged_message(service: Service) -> None:
    """The lake part of a view comes from memory once a query scanned it: each round adds a
    file to the Delta table (read beside the cached ones, then a new base once more than
    MIN_ADDED were added) and messages to the tail, and a query right after the PubAcks finds
    every acknowledged row, in the tail and in a Delta version newer than the cached one."""
    from sql.lake_cache import MIN_ADDED

    nc = await nats.connect(service.server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="WARM", subjects=["warm.>"])
        last = 0
        for round_ in range(MIN_ADDED + 2):  # the base, MIN_ADDED files added, a new base
            for part in ("lake", "tail"):
                for i in range(5):
                    last = (await js.publish(f"warm.{i}", part.encode())).seq
                if part == "lake":
                    await asyncio.to_thread(_compact, service.store, "WARM")
            found = await nats_query(
                nc, "SELECT count(DISTINCT seq) AS n, max(seq) AS top FROM WARM"
            )
            assert found.to_pylist() == [{"n": last, "top": last}], f"round {round_}"
        plan = service.spark.sql("SELECT count(*) FROM WARM")._explain_string()
        assert "InMemoryTableScan" in plan, plan
    finally:
        await nc.close()


async def _lake_cache(nc: nats.NATS) -> dict[str, dict[str, object]]:
    """What the service's lake cache holds, as `$SRV.STATS` (`nats micro stats`) says."""
    stats = json.loads((await nc.request("$SRV.STATS.jetlake-sql", b"", timeout=10)).data)
    (query,) = (e for e in stats["endpoints"] if e["name"] == "query")
    return dict(query["data"]["lake_cache"])


async def test_a_commit_is_cached_before_any_query_and_a_deleted_stream_leaves_the_cache(
    service: Service,
) -> None:
    """No query between: the service sees the commit and fills its new base itself, and
    drops the base once the stream is deleted."""
    from log.compactor.layout import STREAMS, StreamRef, default_lake_dir

    nc = await nats.connect(service.server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="FILLED", subjects=["filled.>"])
        for i in range(20):
            await js.publish(f"filled.{i % 2}", b"x")
        ref = StreamRef.load(service.store / STREAMS / "FILLED")
        table = ref.table_path(default_lake_dir(service.store)).uri
        await asyncio.to_thread(_compact, service.store, "FILLED")
        await poll_async(
            lambda: _lake_cache(nc),
            f"{table} filled in the lake cache",
            60,
            until=lambda held: held.get(table) == {"files": 1, "filled": True},
            interval=0.1,
        )
        await js.delete_stream("FILLED")
        await poll_async(
            lambda: _lake_cache(nc),
            f"{table} gone from the lake cache",
            60,
            until=lambda held: table not in held,
            interval=0.1,
        )
    finally:
        await nc.close()


async def test_a_client_gone_without_a_cancel_has_its_query_stopped(service: Service) -> None:
    """It asked for heartbeats, saw one (its query runs), and its connection closed with no
    cancel sent: the next heartbeat finds no one, and the service stops the Spark job."""
    endless = "SELECT count(*) FROM range(0, 1000000000000, 1, 2)"
    beat = asyncio.Event()

    async def on_msg(msg: nats.aio.msg.Msg) -> None:
        assert msg.headers == {"Jl-Sql-Heartbeat": "0.5"}, msg.headers
        beat.set()

    nc = await nats.connect(service.server.url)
    try:
        inbox = nc.new_inbox()
        await nc.subscribe(inbox, cb=on_msg)
        headers = {"Jl-Sql-Heartbeat": "0.5"}
        await nc.publish("$JL.SQL.query", endless.encode(), reply=inbox, headers=headers)
        await _until(beat, "a heartbeat")
    finally:
        await nc.close()
    await service.server.wait_for_log_async(r"stopped \(its client went\): no Spark task left", 60)
    # The service answers the next query.
    nc = await nats.connect(service.server.url)
    try:
        assert (await nats_query(nc, "SELECT 42 AS n")).to_pylist() == [{"n": 42}]
    finally:
        await nc.close()
