"""A query through the SQL service beside a follower of an R3 stream sees every message
acknowledged before it started: three real jetlake servers with a named account and a
system account, a real nats-py publisher on the stream's leader; beside one follower the
`$JL.SQL` door on the DuckDB engine (in the test's process), beside the other a real
`jetlake sql serve` read through Spark Connect; then the leader and the second follower
killed with SIGKILL for the quorum-lost case.

A follower's files trail the commit by up to a tick (a spare follower's by a batch of
entries too), so without the door asking its server to show its copies current
(`$JL.STORE.CURRENT`) most probes here would miss the message just acknowledged."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import cast

import nats
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.connect.session import SparkSession as ConnectSession

from ingest.server.child import stop_child
from log.compactor.layout import lake_at
from sql.current import SUBJECT, WAIT, ask
from sql.nats_door.service import NatsSql
from tests.jscluster.support import (
    APP_LOGIN,
    NAMED_ACCOUNTS,
    eventually,
    js_cluster,
    server_name,
)
from tests.sql.walls import count_of, query_as
from tests.support.cluster import free_port
from tests.support.servers import ServerProcess, start_server

JVM_DEADLINE = 180.0  # the service's start on a loaded two-core machine
pytestmark = pytest.mark.timeout(JVM_DEADLINE + 120)

PROBES = 60
SPARK_PROBES = 20
Reader = Callable[[], Awaitable[int]]  # the stream's last seq, as one door's query finds it
DUCK = {"Jl-Sql-Engine": "duckdb"}
LAST_SEQ = "SELECT coalesce(max(seq), 0) FROM RS"


def _app_url(server: ServerProcess) -> str:
    return f"nats://app:app@127.0.0.1:{server.port}"


def _store(server: ServerProcess) -> Path:
    return Path(server.args[server.args.index("-sd") + 1])


@asynccontextmanager
async def _door(server: ServerProcess) -> AsyncIterator[None]:
    """The door as the SQL service beside `server` runs it, in account APP."""
    store = _store(server)
    door = NatsSql(
        None,  # type: ignore[arg-type]  # Spark is not asked
        _app_url(server),
        store=store,
        lake=lake_at(None, store),
    )
    await door.start()
    try:
        yield
    finally:
        await door.stop()


async def _last_seq(server: ServerProcess) -> int:
    """The stream's last seq, as a query through the door beside `server` finds it."""
    return count_of(await query_as(_app_url(server), LAST_SEQ, **DUCK))


async def _readable(server: ServerProcess) -> bool:
    """Once the lake marked the replica's folder, the door finds the stream."""
    return await _last_seq(server) >= 0


async def _current(
    server: ServerProcess, url: str, asked: dict[str, object] | None = None
) -> dict[str, object]:
    nc = await nats.connect(url)
    try:
        answer = await nc.request(SUBJECT, json.dumps(asked).encode() if asked else b"", timeout=10)
    finally:
        await nc.close()
    body: dict[str, object] = json.loads(answer.data)
    assert body["server"] == server_name(server), body
    return body


async def test_a_query_beside_either_follower_sees_what_was_acknowledged(tmp_path: Path) -> None:
    # The lake marks each replica's folder (what the SQL service finds streams by); no
    # compactor, and the SQL services are the test's.
    lake_dir = tmp_path / "lake"
    config = NAMED_ACCOUNTS + f'lake {{ dir: "{lake_dir}", compact_interval: 0, sql: off }}\n'
    async with js_cluster("jetlake", tmp_path, config=config, timeout=5, **APP_LOGIN) as c:
        await c.add_stream("RS", ["rs.*"])
        leader = await c.leader("RS")
        near, far = [s for s in c.servers if s is not leader]
        listen = f"127.0.0.1:{free_port()}"
        service = _service(far, lake_dir, listen)  # its JVM starts while `near` is probed
        publisher = await nats.connect(_app_url(leader))
        js = publisher.jetstream(timeout=5)

        async def missed(
            probes: int, last_seq: Callable[[], Awaitable[int]]
        ) -> list[tuple[int, int]]:
            out = []
            for i in range(probes):
                ack = await js.publish("rs.x", b"probe %d" % i)
                if (seen := await last_seq()) < ack.seq:
                    out.append((ack.seq, seen))
            return out

        try:
            async with _door(near):
                await eventually(lambda: _readable(near), f"RS read beside {server_name(near)}")
                assert await missed(PROBES, lambda: _last_seq(near)) == [], "(acked, seen)"

            await eventually(
                lambda: _pings(_app_url(far)), "the SQL service beside the far one", JVM_DEADLINE
            )
            spark = ConnectSession.builder.remote(f"sc://{listen}").create()
            try:
                spark_seq = partial(asyncio.to_thread, _spark_last_seq, spark)
                assert await missed(SPARK_PROBES, spark_seq) == [], "(acked, seen)"
            finally:
                spark.stop()

            # The system account asks for every account's streams; APP's only hears of APP's.
            sys_url = f"nats://sys:sys@127.0.0.1:{near.port}"
            assert (await _current(near, sys_url))["streams"] == 1
            assert (await _current(near, _app_url(near)))["behind"] == []
            for named, rounds in (("RS", 1), ("NOPE", 0)):
                asked = {"streams": [{"account": "APP", "stream": named}]}
                assert (await _current(near, sys_url, asked))["streams"] == rounds
            refused = await _current(near, sys_url, {"stream": "RS"})
            assert cast(dict[str, object], refused["error"])["code"] == 400, refused

            # Alone, the survivor cannot show its copy current: it says so, and still answers.
            leader.kill()
            far.kill()
            body = await _current(near, _app_url(near))
            behind = cast(list[dict[str, str]], body["behind"])
            assert [(b["account"], b["stream"]) for b in behind] == [("APP", "RS")], body
            async with _door(near):
                assert await _last_seq(near) == PROBES + SPARK_PROBES
        finally:
            await publisher.close()
            await stop_child(service, 60)


def _service(server: ServerProcess, lake_dir: Path, listen: str) -> subprocess.Popen[bytes]:
    """`jetlake sql serve` beside `server`, as its lake would start it, in account APP."""
    argv = [sys.executable, "-m", "jobs.cli", "sql", "serve", "--store", str(_store(server))]
    argv += ["--lake", str(lake_dir), "--listen", listen, "--nats", _app_url(server)]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL)


async def _pings(url: str) -> bool:
    nc = await nats.connect(url)
    try:
        await nc.request("$SRV.PING.jetlake-sql", b"", timeout=1.0)
        return True
    finally:
        await nc.close()


def _spark_last_seq(spark: SparkSession) -> int:
    return int(spark.sql(LAST_SEQ.replace("FROM RS", "FROM APP.RS")).collect()[0][0])


async def test_a_server_that_does_not_answer_the_subject_is_not_waited_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The door may run on nats-server, which has no copies to show: the ask is over at
    its no-responders status, and a closed connection ends it too; neither fails a query."""
    server = start_server("nats-server", tmp_path=tmp_path)
    try:
        nc = await nats.connect(server.url)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await ask(nc, [("$G", "ORDERS")])
        assert loop.time() - started < WAIT / 2
        assert not caplog.records
        await nc.close()
        await ask(nc)
        assert [r.getMessage() for r in caplog.records] == [
            f"sql service: {SUBJECT} not asked (nats: connection closed); "
            "reading the store as it is"
        ]
    finally:
        server.stop()
