"""SQL over NATS on the DuckDB engine (`Jl-Sql-Engine: duckdb`): a real jetlake server with
accounts, the `$JL.SQL` door in the system account (no Spark: the DuckDB engine needs
none), real nats-py clients of accounts A and B through the door's export."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pyarrow as pa
import pytest

from log.compactor.layout import lake_at
from sql.nats_door.service import NatsSql
from tests.sql.walls import ACCOUNTS, error_of, publish_stream, query_as
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess, start_server

DUCK = {"Jl-Sql-Engine": "duckdb"}
MAX_ROWS = 50


@dataclass
class Door:
    server: ServerProcess
    store: Path

    def url(self, user: str) -> str:
        return f"nats://{user}:{user}@127.0.0.1:{self.server.port}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Door]:
    tmp = tmp_path_factory.mktemp("duck-door")
    store = tmp / "store"
    conf = f"""
jetstream {{ store_dir: "{store}" }}
{ACCOUNTS}"""
    server = start_server("jetlake", config=conf, tmp_path=tmp)
    try:
        yield Door(server, store)
    finally:
        server.stop()


@pytest.fixture
async def door(server: Door) -> AsyncIterator[Door]:
    """The door on the test's own loop, as the SQL service runs it, with no Spark."""
    service = NatsSql(
        None,  # type: ignore[arg-type]  # Spark is not asked
        server.url("sys"),
        max_rows=MAX_ROWS,
        store=server.store,
        lake=lake_at(None, server.store),
    )
    await service.start()
    try:
        yield server
    finally:
        await service.stop()


async def _ready(door: Door) -> None:
    """ORDERS in A (10 messages) and in B (3), SECRET in B, once."""
    if (door.store / "jetstream" / "B" / "streams" / "SECRET").exists():
        return
    await publish_stream(door.url("a"), "ORDERS", 10)
    await publish_stream(door.url("b"), "ORDERS", 3)
    await publish_stream(door.url("b"), "SECRET", 2)


async def test_an_account_counts_its_own_stream_in_arrow_and_json(door: Door) -> None:
    await _ready(door)
    answer = await query_as(
        door.url("a"), "SELECT subject, count(*) AS n FROM orders GROUP BY 1", **DUCK
    )
    assert answer.end is not None and answer.end.headers == {"Jl-Sql-Rows": "1"}
    assert answer.table().to_pylist() == [{"subject": "orders.x", "n": 10}]
    rows = await query_as(
        door.url("b"), "SELECT data FROM ORDERS ORDER BY seq LIMIT 1", **DUCK, **_JSON
    )
    assert [m.data for m in rows.chunks] == [b'{"data": "m-0"}\n']


_JSON = {"Jl-Sql-Format": "json"}


async def test_account_a_cannot_read_b_by_name_schema_path_or_setting(door: Door) -> None:
    await _ready(door)
    secret = door.store / "jetstream" / "B" / "streams" / "SECRET"
    segment = next(p for p in secret.iterdir() if p.is_file())
    for sql, text in (
        ("SELECT * FROM SECRET", "SECRET does not exist"),
        ("SELECT * FROM B.SECRET", 'schema "B" does not exist'),
        (f"SELECT * FROM read_blob('{segment}')", "disabled by configuration"),
        (f"SELECT * FROM read_parquet('{door.store}/**/*.parquet')", "disabled by configuration"),
        ("SET enable_external_access = true", "answers one SELECT query"),
        ("SELECT 1; SELECT * FROM B.SECRET", "answers one SELECT query"),
    ):
        code, said = error_of(await query_as(door.url("a"), sql, **DUCK))
        assert (code, text in said) == ("400", True), (sql, said)
    # A's ORDERS is A's own, not B's of the same name.
    answer = await query_as(door.url("a"), "SELECT count(*) AS n FROM ORDERS", **DUCK)
    assert answer.table().to_pylist() == [{"n": 10}]


async def test_the_system_account_reads_every_account_by_schema(door: Door) -> None:
    await _ready(door)
    sql = "SELECT (SELECT count(*) FROM A.ORDERS) AS a, (SELECT count(*) FROM B.SECRET) AS b"
    answer = await query_as(door.url("sys"), sql, **DUCK)
    assert answer.table().to_pylist() == [{"a": 10, "b": 2}]


async def test_bad_input_gets_the_spark_doors_errors_and_the_door_stays_up(door: Door) -> None:
    await _ready(door)
    for sql, code, text in (
        ("SELEKT 1", "400", "syntax error"),
        ("SELECT * FROM NOPE", "400", "NOPE does not exist"),
        ("SELECT * FROM range(1000)", "413", f"more than {MAX_ROWS} rows"),
    ):
        found, said = error_of(await query_as(door.url("a"), sql, **DUCK))
        assert (found, text in said) == (code, True), (sql, said)
    found, said = error_of(await query_as(door.url("a"), "SELECT 1", **{"Jl-Sql-Engine": "x"}))
    assert found == "400" and "neither spark nor duckdb" in said
    answer = await query_as(door.url("a"), "SELECT 42 AS x", **DUCK)
    assert answer.table() == pa.table({"x": pa.array([42], pa.int32())})


async def test_every_acknowledged_message_is_in_the_next_answer(door: Door) -> None:
    """The union is exact: each publish's ack comes before the query that must see it."""
    nc = await nats.connect(door.url("a"))
    try:
        js = nc.jetstream()
        await js.add_stream(name="PROBE", subjects=["probe.>"])
        for i in range(1, 31):
            ack = await js.publish("probe.x", b"%d" % i)
            answer = await query_as(door.url("a"), "SELECT max(seq) AS top FROM PROBE", **DUCK)
            assert answer.table().to_pylist() == [{"top": ack.seq}], i
    finally:
        await nc.close()


async def test_jetlake_sql_with_the_duckdb_engine_and_no_service_reads_the_store_here(
    door: Door,
) -> None:
    await _ready(door)
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "sql", "--store", str(door.store), "--engine",
         "duckdb", "--format", "csv", "SELECT count(*) AS n FROM B.SECRET"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "DuckDB over the store here" in done.stderr
    assert done.stdout.split() == ["n", "2"]


async def test_a_query_past_its_timeout_is_interrupted_and_answered_408(door: Door) -> None:
    sql = "SELECT count(*) AS n FROM range(100000000000) a WHERE a.range % 7 = 3"
    code, said = error_of(await query_as(door.url("a"), sql, **DUCK, **{"Jl-Sql-Timeout": "0.5"}))
    assert code == "408" and "ran past its Jl-Sql-Timeout of 0.5s" in said
    # Interrupted, not left running: its thread ends (the scan alone would take minutes).
    await poll_async(
        lambda: not any(t.name.startswith("jetlake-duck") for t in threading.enumerate()),
        "the timed-out query's thread ended",
        5,
    )
    answer = await query_as(door.url("a"), "SELECT 1 AS x", **DUCK)
    assert answer.table().to_pylist() == [{"x": 1}]
