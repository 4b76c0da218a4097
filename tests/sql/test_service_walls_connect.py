"""The SQL service's walls at Spark Connect: NATS logins, an account's own views in its
catalog, bad input and cancels, and a client killed mid-query. The server and its
service: `tests.sql.walls`.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import pytest
from pyspark.errors import AnalysisException, ParseException

from tests.sql.walls import (
    ENDLESS,
    MAX_ROWS,
    TIMEOUT,
    Walled,
    count_logged,
    count_of,
    publish_stream,
    query_as,
    wait_logged,
)
from tests.support.poll import poll

pytestmark = TIMEOUT


def test_spark_connect_catalog_lists_an_accounts_own_views_only(walled: Walled) -> None:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    asyncio.run(publish_stream(walled.url("a"), "CLISTED", 1))
    asyncio.run(publish_stream(walled.url("b"), "CHIDDEN", 1))
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


@pytest.mark.soak  # a Python process importing Spark Connect's client: 5-20 s
async def test_a_spark_connect_client_killed_mid_query_has_its_job_stopped(
    walled: Walled,
) -> None:
    b = walled.url("b")
    await publish_stream(b, "STILLON", 2)
    gone = r"Connect operation \S+ stopped \(its client went\): no Spark task left"
    before = count_logged(walled.server, gone)
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
    assert count_of(await query_as(b, "SELECT count(*) FROM STILLON")) == 2
    await wait_logged(walled.server, gone, before)


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
    # interruptAll names what it interrupted: nothing until the query has started.
    poll(spark.interruptAll, "the query started and interrupted", 60, interval=0.2)
    runner.join(60)
    assert not runner.is_alive() and failed, "the query went on after interruptAll"
    assert "OPERATION_CANCELED" in str(failed[0]) or "cancel" in str(failed[0]).lower()
    assert spark.sql("SELECT 41 + 1 AS n").collect()[0].n == 42


def test_spark_connect_logs_in_with_nats_credentials_and_is_walled(walled: Walled) -> None:
    from pyspark.sql.connect.functions import udf
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    asyncio.run(publish_stream(walled.url("a"), "MINE", 4))
    asyncio.run(publish_stream(walled.url("b"), "THEIRS", 2))
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
    # Refused at once with its reason: not a reset stream, which the client retries with
    # backoff for minutes as if the service were unavailable.
    for token, said in ((None, "takes a NATS login"), ("a:wrong", "refused the login")):
        nobody = ConnectSession.builder.remote(walled.connect(token)).create()
        started = time.monotonic()
        with pytest.raises(Exception, match=said) as refused:
            nobody.sql("SELECT 1").collect()
        assert time.monotonic() - started < 10, refused.value
        assert "UNAVAILABLE" not in str(refused.value), refused.value
