"""The SQL service's walls between accounts at SQL over NATS (and the errors every door
gives alike): each account's queries see its own streams only, the system account's see
all; bad input (a syntax error, an unknown table, a query past its timeout, a client
gone, a result past `max_rows`) gets a clear error while the service goes on answering
others. The server and its service: `tests.sql.walls`.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time

import nats
import pytest
from pyspark.errors import AnalysisException

from log.compactor.compact import lake_progress
from log.compactor.layout import StreamRef, default_lake_dir, streams_root
from log.segments import list_segments
from sql.nats_door.client import query as nats_query
from tests.sql.test_service_e2e import (
    JETLAKE,
    _Answer,
    _ask,
    _until,
)
from tests.sql.walls import (
    ENDLESS,
    MAX_ROWS,
    TIMEOUT,
    Walled,
    count_logged,
    count_of,
    error_of,
    publish_stream,
    query_as,
    wait_logged,
)
from tests.support.poll import poll_async

pytestmark = TIMEOUT


async def test_an_account_reads_its_own_streams_only_and_the_system_account_all(
    walled: Walled,
) -> None:
    a, b, sys = walled.url("a"), walled.url("b"), walled.url("sys")
    await publish_stream(a, "ORDERS", 3)
    await publish_stream(b, "ORDERS", 5)
    await publish_stream(b, "SECRET", 2)
    count = "SELECT count(*) AS n FROM ORDERS"
    # Asked at once: the service plans and answers each query in a task of its own.
    own_a, own_b, forged, sys_a, sys_b, files = await asyncio.gather(
        query_as(a, count),  # the same name, each account its own
        query_as(b, count),
        # A header the client sends under the server's name is replaced as it crosses.
        query_as(a, count, **{"Nats-Request-Info": json.dumps({"acc": "B"})}),
        # The system account sees every account's streams, as ACCOUNT.STREAM.
        query_as(sys, "SELECT count(*) FROM A.ORDERS"),
        query_as(sys, "SELECT count(*) FROM B.SECRET"),
        query_as(sys, "SELECT DISTINCT input_file_name() AS f FROM B.SECRET"),
    )
    assert [count_of(x) for x in (own_a, own_b, forged, sys_a, sys_b)] == [3, 5, 3, 3, 2]
    described = await query_as(a, "DESCRIBE ORDERS")  # its own stream's columns
    assert described.table().column("col_name").to_pylist()[:2] == ["stream", "seq"]
    [secret_file] = files.table().column("f").to_pylist()

    refused = (
        ("SELECT * FROM SECRET", "`SECRET` cannot be found"),  # by name
        ("SELECT * FROM B.SECRET", "`B`.`SECRET` cannot be found"),
        ("SELECT * FROM global_temp.`B.SECRET`", "`b.secret` cannot be found"),  # by a view
        (f"SELECT * FROM parquet.`{secret_file}`", "account A may not read"),  # by path
        (
            "SELECT * FROM ORDERS WHERE seq IN (SELECT seq FROM global_temp.`B.SECRET`)",
            "`b.secret` cannot be found",
        ),
        (
            "SELECT reflect('java.lang.System', 'getProperty', 'user.dir')",
            "account A may not call reflect",
        ),
        ("SET spark.sql.ansi.enabled=false", "account A runs queries only"),
        ("SELECT TRANSFORM(1) USING 'cat' AS (x)", "account A may not run scripts"),
        ("DESCRIBE global_temp.`B.SECRET`", "`B.SECRET` cannot be found"),
    )
    answers = await asyncio.gather(*(query_as(a, sql) for sql, _ in refused))
    for (sql, text), answer in zip(refused, answers, strict=True):
        code, said = error_of(answer)
        assert code == "400" and text.lower() in said.lower(), (sql, said)


def _names(answer: _Answer) -> list[str]:
    """A listing's names (its second column: tableName, viewName), or SHOW DATABASES' own."""
    assert answer.end is not None and "Nats-Service-Error" not in (answer.end.headers or {})
    if answer.end.headers == {"Jl-Sql-Rows": "0"}:
        return []
    table = answer.table()
    return table.column(1 if table.num_columns > 1 else 0).to_pylist()


async def test_listings_name_an_accounts_own_views_only(walled: Walled) -> None:
    a, b, sys = walled.url("a"), walled.url("b"), walled.url("sys")
    await publish_stream(a, "LISTED", 1)
    await publish_stream(b, "HIDDEN", 1)
    listings = (
        "SHOW TABLES IN global_temp",
        "SHOW VIEWS IN global_temp",
        "SHOW TABLE EXTENDED IN global_temp LIKE '*'",
        "SHOW TABLES",  # the current database's: the metastore's tables are every account's
        "SHOW VIEWS",
        "SHOW DATABASES",
    )
    *globals_, tables, views, databases = await asyncio.gather(*(query_as(a, q) for q in listings))
    for sql, answer in zip(listings, globals_, strict=False):
        names = _names(answer)
        assert "a.listed" in names and all(n.startswith("a.") for n in names), (sql, names)
    assert (_names(tables), _names(views), _names(databases)) == ([], [], ["default"])
    assert "a.listed" not in _names(await query_as(b, "SHOW TABLES IN global_temp"))
    every = _names(await query_as(sys, "SHOW TABLES IN global_temp"))
    assert {"a.listed", "b.hidden"} <= set(every)  # the system account lists every account's
    described = await query_as(a, "SHOW COLUMNS IN LISTED")  # its own stream's columns
    assert described.table().column(0).to_pylist()[:2] == ["stream", "seq"]


async def test_an_error_tells_nothing_of_another_accounts_stream(walled: Walled) -> None:
    """A query naming another account's view fails as if the view did not exist, at every
    door, where Spark's own error would suggest the view's columns (a column not found) and
    Connect and JDBC would send its plan; an account's own errors keep Spark's suggestions."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    a_url = walled.url("a")
    await publish_stream(a_url, "EOWN", 1)
    await publish_stream(walled.url("b"), "EHIDDEN", 1)
    files = await query_as(
        walled.url("sys"), "SELECT DISTINCT input_file_name() AS f FROM B.EHIDDEN"
    )
    [hidden_file] = files.table().column("f").to_pylist()
    unknown = "`global_temp`.`b.ehidden` cannot be found"
    probes = (
        ("SELECT nosuch FROM global_temp.`b.ehidden`", unknown),
        ("SELECT o.seq FROM EOWN o JOIN global_temp.`B.EHIDDEN` h ON o.nosuch = h.seq", unknown),
        ("SELECT count(*) FROM EOWN WHERE seq IN (SELECT nosuch FROM global_temp.`b.ehidden`)",
         unknown),
        (f"SELECT nosuch FROM parquet.`{hidden_file}`", "account A may not read"),
    )  # fmt: skip
    own = "SELECT nosuch FROM EOWN"

    def hides(said: str, text: str) -> None:
        assert text in said, said
        said = re.sub(r"\S+\.parquet", "<the path it gave>", said)
        assert "`seq`" not in said and "B.EHIDDEN" not in said and "Did you mean" not in said

    answers = await asyncio.gather(*(query_as(a_url, sql) for sql, _ in (*probes, (own, ""))))
    for (sql, text), answer in zip(probes, answers, strict=False):
        code, said = error_of(answer)
        assert code == "400", (sql, said)
        hides(said, text)
    assert "`seq`" in error_of(answers[-1])[1]

    def over_connect() -> None:
        a = ConnectSession.builder.remote(walled.connect("a:a")).create()
        try:
            for sql, text in probes:
                with pytest.raises(AnalysisException) as caught:
                    a.sql(sql).collect()
                hides(str(caught.value), text)
                assert "proposal" not in (caught.value.getMessageParameters() or {})
            with pytest.raises(AnalysisException, match=r"Did you mean.*`seq`"):
                a.sql(own).collect()
        finally:
            a.stop()

    await asyncio.to_thread(over_connect)


async def test_a_bi_tools_listings_of_the_engine_pass_the_wall(walled: Walled) -> None:
    """What DBeaver and Superset ask as they connect names the engine, no account's stream."""
    a = walled.url("a")
    catalogs, functions, current, described = await asyncio.gather(
        query_as(a, "SHOW CATALOGS"),
        query_as(a, "SHOW FUNCTIONS LIKE 'ab*'"),
        query_as(a, "SHOW CURRENT NAMESPACE"),
        query_as(a, "DESCRIBE FUNCTION abs"),
    )
    assert _names(catalogs) == ["spark_catalog"]
    assert _names(functions) == ["abs"]
    assert current.table().column(1).to_pylist() == ["default"]
    assert "Function: abs" in described.table().column(0).to_pylist()
    code, said = error_of(await query_as(a, "SET spark.sql.ansi.enabled=false"))
    assert code == "400" and "runs queries only" in said


async def _queries_asked(sys_url: str) -> int:
    """How many queries the service was asked ($SRV.STATS, as `nats micro stats` reads it)."""
    nc = await nats.connect(sys_url)
    try:
        stats = json.loads((await nc.request("$SRV.STATS.jetlake-sql", b"", timeout=10)).data)
    finally:
        await nc.close()
    return sum(e["num_requests"] for e in stats["endpoints"] if e["name"] == "query")


async def test_a_query_its_client_gives_up_on_is_stopped_and_others_go_on(
    walled: Walled,
) -> None:
    """Given up on by its client, a query's Spark job is cancelled, not left to run: a NATS
    request past the client's own timeout, Ctrl-C of `jetlake sql`; B's queries answer
    meanwhile (a Spark Connect client killed mid-query: the soak test below)."""
    a, b, sys_url = walled.url("a"), walled.url("b"), walled.url("sys")
    await publish_stream(b, "GOESON", 2)
    by_client = r"stopped \(cancelled by its client\): no Spark task left"
    before = count_logged(walled.server, by_client)
    nc = await nats.connect(a)
    try:
        with pytest.raises(TimeoutError):
            await nats_query(nc, ENDLESS, timeout=2)
    finally:
        await nc.close()
    assert count_of(await query_as(b, "SELECT count(*) FROM GOESON")) == 2
    await wait_logged(walled.server, by_client, before)

    asked = await _queries_asked(sys_url)
    env = {**os.environ, "SPARK_CONNECT_AUTHENTICATE_TOKEN": "a:a"}
    argv = [str(JETLAKE), "sql", "--store", str(walled.store), ENDLESS]
    cli = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:

        async def reached() -> bool:
            assert cli.poll() is None, cli.stderr
            return await _queries_asked(sys_url) > asked

        await poll_async(reached, "the CLI's request at the service", 60, interval=0.1)
        cli.send_signal(signal.SIGINT)
        assert await asyncio.to_thread(cli.wait, 60) == 130
    finally:
        cli.kill()
    assert "jetlake sql: cancelled" in cli.stderr.read()
    await wait_logged(walled.server, by_client, before + 1)


async def test_a_client_of_another_account_gone_without_a_cancel_has_its_query_stopped(
    walled: Walled,
) -> None:
    """A's client reaches the service through an import, so no 503 tells the service its
    inbox went: it answered the heartbeats, then its connection closed with no cancel, and
    the heartbeats it leaves unanswered stop the Spark job."""
    went = r"stopped \(its client went\): no Spark task left"
    before = count_logged(walled.server, went)
    answered = asyncio.Event()

    async def on_msg(msg: nats.aio.msg.Msg) -> None:
        assert msg.headers == {"Jl-Sql-Heartbeat": "0.5"}, msg.headers
        await msg.respond(b"")
        answered.set()

    nc = await nats.connect(walled.url("a"))
    try:
        inbox = nc.new_inbox()
        await nc.subscribe(inbox, cb=on_msg)
        headers = {"Jl-Sql-Heartbeat": "0.5"}
        await nc.publish("$JL.SQL.query", ENDLESS.encode(), reply=inbox, headers=headers)
        await _until(answered, "a heartbeat")
    finally:
        await nc.close()
    await wait_logged(walled.server, went, before, timeout=60)
    # Its job holds none of the executors' cores: a query that needs them answers.
    answer = await query_as(walled.url("a"), "SELECT sum(id) AS s FROM range(0, 1000, 1, 2)")
    assert answer.table().column("s").to_pylist() == [499500]


@pytest.mark.soak  # a timeout and an ack wait run out, with their jobs' cancels: ~50 s
async def test_bad_input_gets_a_clear_error_and_others_go_on(walled: Walled) -> None:
    a, b = walled.url("a"), walled.url("b")
    await publish_stream(b, "LIVE", 4)
    for sql, code, text in (
        ("SELEC 1", "400", "PARSE_SYNTAX_ERROR"),
        ("SELECT * FROM NOPE", "400", "`NOPE` cannot be found"),
        ("SELECT id FROM range(20000)", "413", f"more than {MAX_ROWS} rows"),
    ):
        code_got, text_got = error_of(await query_as(a, sql))
        assert code_got == code and text in text_got, (sql, text_got)
    assert "max_rows" in error_of(await query_as(a, "SELECT id FROM range(20000)"))[1]

    # A query past its timeout: its Spark job is stopped, and B's query meanwhile answers.
    endless = "SELECT count(*) FROM range(0, 1000000000000, 1, 2)"
    nc = await nats.connect(a)
    try:
        slow = await _ask(nc, endless, headers={"Jl-Sql-Timeout": "3"})
        started = time.monotonic()
        assert count_of(await query_as(b, "SELECT count(*) FROM LIVE")) == 4
        await _until(slow.done, "the timeout's error", timeout=60)
        took = time.monotonic() - started
        code, text = error_of(slow)
        assert code == "408" and "ran past its Jl-Sql-Timeout of 3s" in text
        assert took < 30, took
    finally:
        await nc.close()
    stopped = r"stopped \(past its Jl-Sql-Timeout\): no Spark task left"
    await walled.server.wait_for_log_async(stopped, 60)

    # A client gone mid-result (its connection closed, no more acks): the job is stopped.
    nc = await nats.connect(a)
    gone = await _ask(
        nc,
        "SELECT id, repeat('x', 1000) AS pad FROM range(0, 4000, 1, 4)",  # ~4 MB: chunks
        ack=False,
        headers={"Jl-Sql-Window": "1", "Jl-Sql-Ack-Wait": "1"},
    )
    await _until(gone.moved, "the first chunk")
    await nc.close()
    await walled.server.wait_for_log_async(r"stopped \(no ack\): no Spark task left", 60)
    assert count_of(await query_as(b, "SELECT count(*) FROM LIVE")) == 4  # still answering


@pytest.mark.soak  # a compactor JVM of its own: ~30-60 s
async def test_an_accounts_lake_table_stands_behind_its_wall(walled: Walled) -> None:
    a, b, sys_url = walled.url("a"), walled.url("b"), walled.url("sys")
    await publish_stream(a, "LAKED", 6)
    await publish_stream(b, "LAKED", 4)
    refs = {acc: StreamRef.load(streams_root(walled.store, acc) / "LAKED") for acc in "AB"}

    def sealed(acc: str, seq: int) -> bool:
        return any(s.sealed and s.last_seq >= seq for s in list_segments(refs[acc].dir))

    await poll_async(lambda: sealed("A", 6) and sealed("B", 4), "LAKED sealed in A and B", 30)
    job = [sys.executable, "-m", "jobs.lake_job", "compact", "--store", str(walled.store)]
    done = await asyncio.to_thread(subprocess.run, job, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    lake = default_lake_dir(walled.store)
    tables = {acc: ref.table_path(lake) for acc, ref in refs.items()}
    assert tables["A"].parent.name == "A.LAKED"
    assert lake_progress(tables["A"], refs["A"].app_id) == 6
    assert lake_progress(tables["B"], refs["B"].app_id) == 4
    nc = await nats.connect(a)
    await nc.jetstream().publish("laked.x", b"tail")  # after the lake: the live tail
    await nc.close()
    own_a, own_b, files = await asyncio.gather(
        query_as(a, "SELECT count(*) AS n FROM LAKED"),
        query_as(b, "SELECT count(*) AS n FROM LAKED"),
        query_as(sys_url, "SELECT DISTINCT input_file_name() AS f FROM A.LAKED"),
    )
    assert (count_of(own_a), count_of(own_b)) == (7, 4)
    lake_files = [f for f in files.table().column("f").to_pylist() if "A.LAKED" in f]
    assert lake_files, files.table()
    refused = (f"SELECT * FROM parquet.`{lake_files[0]}`", f"SELECT * FROM delta.`{tables['A']}`")
    for answer in await asyncio.gather(*(query_as(b, sql) for sql in refused)):
        code, said = error_of(answer)
        assert code == "400" and "account B may not read" in said, said
