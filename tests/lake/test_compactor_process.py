"""The compactor as the server runs it: started on the first sealed segment, visible, stopped.

Also `jetlake sql` as a user types it. Both cost a JVM start each, so they
are the only tests here that do not use the shared session.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import Connect
from tests.lake.conftest import Lake
from tests.support.http import get_json, http_get
from tests.support.poll import poll_async

# An interval no test waits out: every pass after the first is one a seal started.
SERVE_CONF = 'lake { seal_interval: "1s", compact_interval: "300s" }\n'


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.timeout(300)  # a compactor JVM's start, then passes on two cores shared with Spark
async def test_server_starts_compactor_reports_lag_and_stops_it(
    lake: Lake, connect: Connect
) -> None:
    """Also the follower's rule: a seal starts a pass at once, not at the (300 s) interval;
    and on SIGTERM the compactor ends its pass and exits 0 (the server logs another code)."""
    server = lake.start(config=SERVE_CONF)
    jsz = await get_json(server.http_url + "/jsz")
    assert jsz["lake"]["compactor"] == {"running": False, "pid": 0}  # no JVM until work exists
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(name="FRESH", subjects=["f.>"])
    acked = time.monotonic()
    for i in range(200):
        await js.publish(f"f.{i % 2}", b"%d" % i)

    async def in_lake() -> bool:
        doc = await get_json(server.http_url + "/jsz")
        return doc["lake"]["streams"].get("FRESH", {}).get("lake_seq") == 200

    await poll_async(in_lake, "FRESH in the lake up to seq 200", timeout=120)
    print(f"freshness with a cold compactor: {time.monotonic() - acked:.1f}s")
    doc = (await get_json(server.http_url + "/jsz"))["lake"]
    assert doc["streams"]["FRESH"]["lag_messages"] == 0
    pid = doc["compactor"]["pid"]
    assert doc["compactor"]["running"] and pid > 0
    metrics = (await http_get(server.http_url + "/metrics")).body.decode()
    assert 'jetlake_lake_lag_messages{server_id="' in metrics
    assert 'stream="FRESH"} 0\n' in metrics

    # A warm compactor: one more message reaches Delta within the freshness target, on its seal.
    acked = time.monotonic()
    ack = await js.publish("f.0", b"warm")

    async def warm() -> bool:
        doc = await get_json(server.http_url + "/jsz")
        return doc["lake"]["streams"]["FRESH"]["lake_seq"] == ack.seq

    await poll_async(warm, "the new message in the lake", timeout=60)
    print(f"freshness with a warm compactor: {time.monotonic() - acked:.1f}s")

    await server.stop_async()
    await poll_async(lambda: not _alive(pid), "the compactor gone with the server", timeout=30)
    assert "exited with code" not in server.log()
    rows = lake.sql("SELECT count(*) AS n FROM FRESH")
    assert rows[0].n == 201


async def test_jetlake_sql_command(lake: Lake, connect: Connect) -> None:
    server = lake.start()
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(name="CLI", subjects=["cli.>"])
    for i in range(30):
        await js.publish(f"cli.{i % 3}", b"%d" % i)
    await lake.sealed("CLI", 30)
    lake.compact()
    await js.publish("cli.0", b"live")  # after L: comes from the live segment
    query = "SELECT subject, count(*) AS n FROM CLI GROUP BY subject ORDER BY subject"
    argv = [sys.executable, "-m", "jobs.cli", "sql", "--store", str(lake.store)]
    out = subprocess.run(
        [*argv, "--spark_master", "local[1]", "--format", "csv", query],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    rows = list(csv.reader(io.StringIO(out.stdout)))
    assert rows == [["subject", "n"], ["cli.0", "11"], ["cli.1", "10"], ["cli.2", "10"]]
