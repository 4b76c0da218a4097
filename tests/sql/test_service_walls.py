"""The SQL service on a server with accounts: each account's queries see its own streams
only, the system account's see all; and bad input (a syntax error, an unknown table, a
query past its timeout, a client gone, a result past `max_rows`) gets a clear error
while the service goes on answering others.

One server and one service JVM for the module, started as `jetlake serve` starts it:
the service joins the system account, which exports `$JL.SQL.>`; accounts A and B
import it, as an operator sets it up.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import SparkSession

from log.compactor.compact import lake_progress
from log.compactor.layout import StreamRef, default_lake_dir, streams_root
from log.segments import list_segments
from sql.nats_client import query as nats_query
from sql.service import quiet_query_errors
from tests.sql.test_service_e2e import (
    JETLAKE,
    START_DEADLINE,
    _Answer,
    _ask,
    _until,
    _wait_for_service,
    start_with_service,
)
from tests.support.cluster import free_port
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.timeout(START_DEADLINE + 180)
MAX_ROWS = 5000
IMPORT = '{service: {account: SYS, subject: "$JL.SQL.>"}}'


@dataclass
class Walled:
    server: ServerProcess
    store: Path
    connect_port: int
    jdbc: str
    spark: SparkSession  # Spark Connect, logged in as the system account's user

    def url(self, user: str) -> str:
        return f"nats://{user}:{user}@127.0.0.1:{self.server.port}"

    def connect(self, token: str | None) -> str:
        return connect_url(self.connect_port, token)


def connect_url(port: int, token: str | None) -> str:
    """Spark Connect's URL with a NATS login as its bearer token: pyspark sends a token in
    the clear to `localhost` only (elsewhere over TLS, which a proxy in front adds)."""
    login = f";token={token}" if token is not None else ""
    return f"sc://localhost:{port}/{login}"


@pytest.fixture(scope="module")
def walled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walled]:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    quiet_query_errors()
    tmp = tmp_path_factory.mktemp("sql-walls")
    store = tmp / "store"
    port, connect_port, jdbc_port = free_port(), free_port(), free_port()
    conf = f"""
jetstream {{ store_dir: "{store}" }}
lake {{ seal_interval: "200ms", compact_interval: 0,
  sql {{ listen: "127.0.0.1:{connect_port}", jdbc: "127.0.0.1:{jdbc_port}",
         nats: "nats://127.0.0.1:{port}", user: sys, password: sys, max_rows: {MAX_ROWS} }} }}
system_account: SYS
accounts {{
  SYS {{ users: [{{user: sys, password: sys}}],
         exports: [{{service: "$JL.SQL.>", response_type: stream}}] }}
  A {{ jetstream: enabled, users: [{{user: a, password: a}}], imports: [{IMPORT}] }}
  B {{ jetstream: enabled, users: [{{user: b, password: b}}], imports: [{IMPORT}] }}
}}
"""
    server = start_with_service("-p", str(port), config=conf, tmp_path=tmp)
    try:
        found = _wait_for_service(server, store, url=f"nats://sys:sys@127.0.0.1:{port}")
        assert found.jdbc is not None
        spark = ConnectSession.builder.remote(connect_url(connect_port, "sys:sys")).getOrCreate()
        yield Walled(server, store, connect_port, found.jdbc, spark)
        spark.stop()
    finally:
        server.stop()


async def _publish(url: str, stream: str, n: int) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
        for i in range(n):
            await js.publish(f"{stream.lower()}.x", b"m-%d" % i)
    finally:
        await nc.close()


async def _query(url: str, sql: str, **headers: str) -> _Answer:
    """The whole answer to one query, asked as a user of `url`'s account."""
    nc = await nats.connect(url)
    try:
        answer = await _ask(nc, sql, headers=headers or None)
        await _until(answer.done, f"the answer to {sql!r}")
        return answer
    finally:
        await nc.close()


def _error(answer: _Answer) -> tuple[str, str]:
    assert answer.end is not None and answer.end.headers is not None
    headers = answer.end.headers
    assert "Nats-Service-Error-Code" in headers, headers
    return headers["Nats-Service-Error-Code"], headers["Nats-Service-Error"]


def _count(answer: _Answer) -> int:
    assert answer.end is not None and answer.end.headers == {"Jl-Sql-Rows": "1"}, (
        answer.end and answer.end.headers
    )
    return int(answer.table().column(0)[0].as_py())


async def test_an_account_reads_its_own_streams_only_and_the_system_account_all(
    walled: Walled,
) -> None:
    a, b, sys = walled.url("a"), walled.url("b"), walled.url("sys")
    await _publish(a, "ORDERS", 3)
    await _publish(b, "ORDERS", 5)
    await _publish(b, "SECRET", 2)
    count = "SELECT count(*) AS n FROM ORDERS"
    # Asked at once: the service plans and answers each query in a task of its own.
    own_a, own_b, forged, sys_a, sys_b, files = await asyncio.gather(
        _query(a, count),  # the same name, each account its own
        _query(b, count),
        # A header the client sends under the server's name is replaced as it crosses.
        _query(a, count, **{"Nats-Request-Info": json.dumps({"acc": "B"})}),
        # The system account sees every account's streams, as ACCOUNT.STREAM.
        _query(sys, "SELECT count(*) FROM A.ORDERS"),
        _query(sys, "SELECT count(*) FROM B.SECRET"),
        _query(sys, "SELECT DISTINCT input_file_name() AS f FROM B.SECRET"),
    )
    assert [_count(x) for x in (own_a, own_b, forged, sys_a, sys_b)] == [3, 5, 3, 3, 2]
    described = await _query(a, "DESCRIBE ORDERS")  # its own stream's columns
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
    answers = await asyncio.gather(*(_query(a, sql) for sql, _ in refused))
    for (sql, text), answer in zip(refused, answers, strict=True):
        code, said = _error(answer)
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
    await _publish(a, "LISTED", 1)
    await _publish(b, "HIDDEN", 1)
    listings = (
        "SHOW TABLES IN global_temp",
        "SHOW VIEWS IN global_temp",
        "SHOW TABLE EXTENDED IN global_temp LIKE '*'",
        "SHOW TABLES",  # the current database's: the metastore's tables are every account's
        "SHOW VIEWS",
        "SHOW DATABASES",
    )
    *globals_, tables, views, databases = await asyncio.gather(*(_query(a, q) for q in listings))
    for sql, answer in zip(listings, globals_, strict=False):
        names = _names(answer)
        assert "a.listed" in names and all(n.startswith("a.") for n in names), (sql, names)
    assert (_names(tables), _names(views), _names(databases)) == ([], [], ["default"])
    assert "a.listed" not in _names(await _query(b, "SHOW TABLES IN global_temp"))
    every = _names(await _query(sys, "SHOW TABLES IN global_temp"))
    assert {"a.listed", "b.hidden"} <= set(every)  # the system account lists every account's
    described = await _query(a, "SHOW COLUMNS IN LISTED")  # its own stream's columns
    assert described.table().column(0).to_pylist()[:2] == ["stream", "seq"]


def test_spark_connect_catalog_lists_an_accounts_own_views_only(walled: Walled) -> None:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    asyncio.run(_publish(walled.url("a"), "CLISTED", 1))
    asyncio.run(_publish(walled.url("b"), "CHIDDEN", 1))
    a = ConnectSession.builder.remote(walled.connect("a:a")).create()
    try:
        names = [t.name for t in a.catalog.listTables("global_temp")]
        assert "a.clisted" in names and all(n.startswith("a.") for n in names), names
        assert a.catalog.listTables() == []
        assert [d.name for d in a.catalog.listDatabases()] == ["default"]
        assert a.catalog.tableExists("global_temp.`a.clisted`")
        assert not a.catalog.tableExists("global_temp.`b.chidden`")  # as if it did not exist
    finally:
        a.stop()
    every = [t.name for t in walled.spark.catalog.listTables("global_temp")]
    assert {"a.clisted", "b.chidden"} <= set(every)


async def test_an_error_tells_nothing_of_another_accounts_stream(walled: Walled) -> None:
    """A query naming another account's view fails as if the view did not exist, at every
    door, where Spark's own error would suggest the view's columns (a column not found) and
    Connect and JDBC would send its plan; an account's own errors keep Spark's suggestions."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    a_url = walled.url("a")
    await _publish(a_url, "EOWN", 1)
    await _publish(walled.url("b"), "EHIDDEN", 1)
    files = await _query(walled.url("sys"), "SELECT DISTINCT input_file_name() AS f FROM B.EHIDDEN")
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

    answers = await asyncio.gather(*(_query(a_url, sql) for sql, _ in (*probes, (own, ""))))
    for (sql, text), answer in zip(probes, answers, strict=False):
        code, said = _error(answer)
        assert code == "400", (sql, said)
        hides(said, text)
    assert "`seq`" in _error(answers[-1])[1]

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
        _query(a, "SHOW CATALOGS"),
        _query(a, "SHOW FUNCTIONS LIKE 'ab*'"),
        _query(a, "SHOW CURRENT NAMESPACE"),
        _query(a, "DESCRIBE FUNCTION abs"),
    )
    assert _names(catalogs) == ["spark_catalog"]
    assert _names(functions) == ["abs"]
    assert current.table().column(1).to_pylist() == ["default"]
    assert "Function: abs" in described.table().column(0).to_pylist()
    code, said = _error(await _query(a, "SET spark.sql.ansi.enabled=false"))
    assert code == "400" and "runs queries only" in said


ENDLESS = "SELECT count(*) FROM range(0, 1000000000000, 1, 2)"


async def _logged(server: ServerProcess, pattern: str, after: int, timeout: float = 90) -> None:
    """Until the log has more than `after` lines matching `pattern` (each test's own)."""
    deadline = time.monotonic() + timeout
    while _count_logged(server, pattern) <= after:
        assert time.monotonic() < deadline, f"no {pattern!r} in the log in {timeout}s"
        await asyncio.sleep(0.1)


def _count_logged(server: ServerProcess, pattern: str) -> int:
    return len(re.findall(pattern, server.log_path.read_text(errors="replace")))


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
    await _publish(b, "GOESON", 2)
    by_client = r"stopped \(cancelled by its client\): no Spark task left"
    before = _count_logged(walled.server, by_client)
    nc = await nats.connect(a)
    try:
        with pytest.raises(TimeoutError):
            await nats_query(nc, ENDLESS, timeout=2)
    finally:
        await nc.close()
    assert _count(await _query(b, "SELECT count(*) FROM GOESON")) == 2
    await _logged(walled.server, by_client, before)

    asked = await _queries_asked(sys_url)
    env = {**os.environ, "SPARK_CONNECT_AUTHENTICATE_TOKEN": "a:a"}
    argv = [str(JETLAKE), "sql", "--store", str(walled.store), ENDLESS]
    cli = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while await _queries_asked(sys_url) <= asked:  # its request reached the service
            assert time.monotonic() < deadline and cli.poll() is None, cli.stderr
            await asyncio.sleep(0.1)
        cli.send_signal(signal.SIGINT)
        assert await asyncio.to_thread(cli.wait, 60) == 130
    finally:
        cli.kill()
    assert "jetlake sql: cancelled" in cli.stderr.read()
    await _logged(walled.server, by_client, before + 1)


@pytest.mark.soak  # a Python process importing Spark Connect's client: 5-20 s
async def test_a_spark_connect_client_killed_mid_query_has_its_job_stopped(
    walled: Walled,
) -> None:
    b = walled.url("b")
    await _publish(b, "STILLON", 2)
    gone = r"Connect operation \S+ stopped \(its client went\): no Spark task left"
    before = _count_logged(walled.server, gone)
    client = subprocess.Popen(
        [sys.executable, "-c", _CONNECT_CLIENT, walled.connect("a:a"), ENDLESS],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert client.stdout is not None
        # Its job has started: a line, or nothing if the client ends first.
        line = await asyncio.wait_for(asyncio.to_thread(client.stdout.readline), 120)
        assert line.startswith("running"), line
    finally:
        client.kill()  # its connection closes with it
    assert _count(await _query(b, "SELECT count(*) FROM STILLON")) == 2
    await _logged(walled.server, gone, before)


_CONNECT_CLIENT = """
import sys
from pyspark.sql.connect.session import SparkSession

spark = SparkSession.builder.remote(sys.argv[1]).create()
said = []
def progress(stages, inflight_tasks, operation_id, done):
    if (stages or inflight_tasks) and not said:
        said.append(operation_id)
        print("running", operation_id, flush=True)
spark.registerProgressHandler(progress)
spark.sql(sys.argv[2]).collect()
"""


@pytest.mark.soak  # a timeout and an ack wait run out, with their jobs' cancels: ~50 s
async def test_bad_input_gets_a_clear_error_and_others_go_on(walled: Walled) -> None:
    a, b = walled.url("a"), walled.url("b")
    await _publish(b, "LIVE", 4)
    for sql, code, text in (
        ("SELEC 1", "400", "PARSE_SYNTAX_ERROR"),
        ("SELECT * FROM NOPE", "400", "`NOPE` cannot be found"),
        ("SELECT id FROM range(20000)", "413", f"more than {MAX_ROWS} rows"),
    ):
        code_got, text_got = _error(await _query(a, sql))
        assert code_got == code and text in text_got, (sql, text_got)
    assert "max_rows" in _error(await _query(a, "SELECT id FROM range(20000)"))[1]

    # A query past its timeout: its Spark job is stopped, and B's query meanwhile answers.
    endless = "SELECT count(*) FROM range(0, 1000000000000, 1, 2)"
    nc = await nats.connect(a)
    try:
        slow = await _ask(nc, endless, headers={"Jl-Sql-Timeout": "3"})
        started = time.monotonic()
        assert _count(await _query(b, "SELECT count(*) FROM LIVE")) == 4
        await _until(slow.done, "the timeout's error", timeout=60)
        took = time.monotonic() - started
        code, text = _error(slow)
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
    assert _count(await _query(b, "SELECT count(*) FROM LIVE")) == 4  # still answering


@pytest.mark.soak
def test_spark_connect_bad_input_and_a_cancelled_query(walled: Walled) -> None:
    spark = walled.spark
    with pytest.raises(ParseException, match="PARSE_SYNTAX_ERROR"):
        spark.sql("SELEC 1").collect()
    with pytest.raises(AnalysisException, match="`NOPE` cannot be found"):
        spark.sql("SELECT * FROM NOPE").collect()
    failed: list[BaseException] = []

    def endless() -> None:
        try:
            spark.sql("SELECT count(*) FROM range(0, 1000000000000, 1, 2)").collect()
        except BaseException as exc:  # the interrupt, as the client sees it
            failed.append(exc)

    runner = threading.Thread(target=endless)
    runner.start()
    deadline = time.monotonic() + 60
    while not spark.interruptAll() and time.monotonic() < deadline:  # until it has started
        time.sleep(0.2)
    runner.join(60)
    assert not runner.is_alive() and failed, "the query went on after interruptAll"
    assert "OPERATION_CANCELED" in str(failed[0]) or "cancel" in str(failed[0]).lower()
    assert spark.sql("SELECT 41 + 1 AS n").collect()[0].n == 42


@pytest.mark.soak  # a compactor JVM of its own: ~30-60 s
async def test_an_accounts_lake_table_stands_behind_its_wall(walled: Walled) -> None:
    a, b, sys_url = walled.url("a"), walled.url("b"), walled.url("sys")
    await _publish(a, "LAKED", 6)
    await _publish(b, "LAKED", 4)
    refs = {acc: StreamRef.load(streams_root(walled.store, acc) / "LAKED") for acc in "AB"}

    def sealed(acc: str, seq: int) -> bool:
        return any(s.sealed and s.last_seq >= seq for s in list_segments(refs[acc].dir))

    deadline = time.monotonic() + 30
    while not (sealed("A", 6) and sealed("B", 4)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
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
        _query(a, "SELECT count(*) AS n FROM LAKED"),
        _query(b, "SELECT count(*) AS n FROM LAKED"),
        _query(sys_url, "SELECT DISTINCT input_file_name() AS f FROM A.LAKED"),
    )
    assert (_count(own_a), _count(own_b)) == (7, 4)
    lake_files = [f for f in files.table().column("f").to_pylist() if "A.LAKED" in f]
    assert lake_files, files.table()
    refused = (f"SELECT * FROM parquet.`{lake_files[0]}`", f"SELECT * FROM delta.`{tables['A']}`")
    for answer in await asyncio.gather(*(_query(b, sql) for sql in refused)):
        code, said = _error(answer)
        assert code == "400" and "account B may not read" in said, said


def test_spark_connect_logs_in_with_nats_credentials_and_is_walled(walled: Walled) -> None:
    from pyspark.sql.connect.functions import udf
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    asyncio.run(_publish(walled.url("a"), "MINE", 4))
    asyncio.run(_publish(walled.url("b"), "THEIRS", 2))
    sys_spark = walled.spark  # the system account's login: every account's streams
    assert sys_spark.sql("SELECT count(*) AS n FROM B.THEIRS").collect()[0].n == 2
    [theirs] = sys_spark.sql("SELECT DISTINCT input_file_name() AS f FROM B.THEIRS").collect()
    a = ConnectSession.builder.remote(walled.connect("a:a")).create()
    try:
        assert a.sql("SELECT count(*) AS n FROM MINE").collect()[0].n == 4
        for sql, said in (
            ("SELECT * FROM THEIRS", "`THEIRS` cannot be found"),  # by name
            ("SELECT * FROM global_temp.`B.THEIRS`", "(?i)`b.theirs` cannot be found"),  # by a view
            (f"SELECT * FROM parquet.`{theirs.f}`", "account A may not read"),  # by path
        ):
            with pytest.raises(AnalysisException, match=said):
                a.sql(sql).collect()
        with pytest.raises(AnalysisException, match="account A may not run user-defined"):
            a.range(1).select(udf(lambda x: x)("id")).collect()
        # A result past the service's max_rows ends with an error naming the key.
        with pytest.raises(Exception, match=f"more than {MAX_ROWS} rows.*max_rows"):
            a.sql(f"SELECT id FROM range({MAX_ROWS * 4})").collect()
        assert a.sql("SELECT count(*) AS n FROM MINE").collect()[0].n == 4  # still serves
        # A's login may not take over a session another account's login opened.
        taken = f"{walled.connect('a:a')};session_id={sys_spark.session_id}"
        hijack = ConnectSession.builder.remote(taken).create()
        with pytest.raises(Exception, match="is account the system's, not A's"):
            hijack.sql("SELECT 1").collect()
    finally:
        a.stop()
    for token, said in ((None, "takes a NATS login"), ("a:wrong", "refused the login")):
        nobody = ConnectSession.builder.remote(walled.connect(token)).create()
        with pytest.raises(Exception, match=said):
            nobody.sql("SELECT 1").collect()


async def _beeline(script: str) -> subprocess.CompletedProcess:
    """One beeline runs `script`, every statement whatever the ones before did: `!connect
    <url> <user> <password>` logs in anew. Its class is run on one JVM, not through pyspark's
    `bin/beeline`, whose launcher starts a JVM first to build the command of the second."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    java = Path(os.environ["JAVA_HOME"]) / "bin" / "java" if "JAVA_HOME" in os.environ else "java"
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as file:
        file.write(script)
        file.flush()
        argv = [str(java), "-cp", f"{jars}/*", "org.apache.hive.beeline.BeeLine"]
        argv += ["--silent=true", "--outputformat=csv2", "--force=true", "-f", file.name]
        return await asyncio.to_thread(
            subprocess.run, argv, capture_output=True, text=True, timeout=180
        )


async def test_jdbc_is_walled_bounded_and_answers_a_bi_tools_connect(walled: Walled) -> None:
    """The JDBC door in the default run, one beeline JVM: an account's own stream, another's
    refused with no word of its columns, a BI tool's calls on connect, a result of ~80 GB
    stopped at max_rows without being gathered, and the system account's login."""
    await _publish(walled.url("a"), "JOWN", 3)
    await _publish(walled.url("b"), "JOTHER", 2)
    url = walled.jdbc
    done = await _beeline(
        f"!connect {url} a a\n"
        "SELECT count(*) AS own FROM JOWN;\n"
        "SELECT nosuch FROM global_temp.`b.jother`;\n"  # a column of B's view, as a probe
        "SELECT nosuch FROM JOWN;\n"
        "SHOW CATALOGS;\n"
        "SHOW FUNCTIONS LIKE 'ab*';\n"
        "!tables\n"
        # 10^10 rows: gathered before a fetch, this would never answer (nor fit the heap).
        "SELECT id AS huge FROM range(0, 10000000000, 1, 10000);\n"
        "SELECT count(*) AS still FROM JOWN;\n"
        f"!connect {url} sys sys\n"
        "SELECT count(*) AS other FROM B.JOTHER;\n"
    )
    out, err = done.stdout, done.stderr
    assert "own\n3\n" in out and "still\n3\n" in out and "other\n2\n" in out, out + err
    assert "catalog\nspark_catalog\n" in out and "function\nabs\n" in out, out + err
    a_sees = out.split("other\n2\n")[0]
    assert ",global_temp,a.jown,VIEW" in a_sees and "jother" not in a_sees.lower(), out
    errors = err.split("Error: ")
    [probe] = [e for e in errors if "jother" in e.lower()]
    assert "`global_temp`.`b.jother` cannot be found" in probe, err
    assert "B.JOTHER" not in probe and "`seq`" not in probe, probe  # no plan, no columns
    [own] = [e for e in errors if "Did you mean" in e]  # A's own: Spark's suggestions stay
    assert "`seq`" in own, err
    assert f"more than {MAX_ROWS} rows" in err and "max_rows" in err, err
    assert f"\n{MAX_ROWS * 2}\n" not in out, "rows past max_rows reached the client"


@pytest.mark.soak  # beeline is a JVM of its own: 12-40 s
async def test_jdbc_logs_in_with_nats_credentials_and_is_walled(walled: Walled) -> None:
    await _publish(walled.url("a"), "JMINE", 3)
    await _publish(walled.url("b"), "JTHEIRS", 2)
    files = await _query(walled.url("sys"), "SELECT DISTINCT input_file_name() AS f FROM B.JTHEIRS")
    [theirs] = files.table().column("f").to_pylist()
    url = walled.jdbc
    done = await _beeline(
        f"!connect {url} a a\n"
        "SELECT count(*) AS mine FROM JMINE;\n"
        "SELECT * FROM JTHEIRS;\n"  # by name
        "SELECT * FROM global_temp.`B.JTHEIRS`;\n"  # by a view
        f"SELECT * FROM parquet.`{theirs}`;\n"  # by path
        "!tables\n"  # JDBC's getTables, as BI tools browse
        "!columns b.jtheirs\n"
        "SHOW TABLES IN global_temp;\n"
        f"SELECT id AS past_max_rows FROM range({MAX_ROWS * 4});\n"
        "SELECT count(*) AS still FROM JMINE;\n"  # the door goes on
        f"!connect {url} sys sys\n"  # the system account: every account's streams
        "SELECT count(*) AS theirs FROM B.JTHEIRS;\n"
        "!tables\n"
        "!closeall\n"  # so the last statement has only the refused login to run on
        f"!connect {url} a wrong\n"
        "SELECT 1 AS leaked;\n"
    )
    out, err = done.stdout, done.stderr
    assert "mine\n3\n" in out and "theirs\n2\n" in out and "still\n3\n" in out, out + err
    assert "NullPointerException" not in err and "ConcurrentModification" not in err, err
    assert "`JTHEIRS` cannot be found" in err, err
    assert "`b.jtheirs` cannot be found" in err.lower(), err
    a_sees, sys_sees = out.split("theirs\n2\n")
    assert ",global_temp,a.jmine,VIEW" in a_sees and "global_temp,a.jmine,true" in a_sees, out + err
    assert "b.jtheirs" not in a_sees, out  # in no listing: tables, columns, SHOW TABLES
    assert ",global_temp,b.jtheirs,VIEW" in sys_sees, out
    assert f"more than {MAX_ROWS} rows" in err and "max_rows" in err, err
    assert f"\n{MAX_ROWS * 2}\n" not in out, "rows past max_rows reached the client"
    assert "it is no stream of the account" in err, err
    assert "Error validating the login" in err and "leaked" not in out, out + err
