"""The Hive metastore catalog: which tables a store registers (pure, fast), and (soak) a
server whose SQL service registers them in a real metastore that a plain Spark session,
knowing nothing of jetlake, lists and reads, and drops a deleted stream's table from it
while leaving a table it did not register."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from log.compactor.layout import GLOBAL, Pin, StreamRef, streams_root, write_pin
from log.compactor.location import Lake
from log.state_file import write_state
from sql.catalog import catalog_entries, hive_name, metastore_command
from tests.sql.test_service_e2e import start_with_service
from tests.support.cluster import free_port
from tests.support.poll import poll

CREATED = "2026-11-21T10:54:17.123456789Z"
INCARNATION = "20261121T105417.123456789Z"


def _stream(
    store: Path,
    name: str,
    subjects: list[str],
    metadata: dict[str, str],
    seq: int,
    account: str = GLOBAL,
) -> None:
    folder = streams_root(store, account) / name
    folder.mkdir(parents=True)
    config = {"name": name, "subjects": subjects, "storage": "file", "metadata": metadata}
    write_state(folder / "stream.json", {"config": config, "created": CREATED})
    if seq:
        stream = StreamRef.load(folder)
        write_pin(stream, Pin(stream.app_id, "t", seq))


def test_hive_names_keep_only_what_hive_accepts() -> None:
    assert hive_name("ORDERS") == "orders"
    assert hive_name("$MQTT_msgs") == "_mqtt_msgs"
    assert hive_name("a-b.c") == "a_b_c"


def test_a_table_per_stream_in_the_lake_with_its_subjects_and_format(tmp_path: Path) -> None:
    store = tmp_path / "store"
    lake = Lake.at(str(tmp_path / "lake"))
    _stream(store, "ORDERS", ["orders.>", "refunds.*"], {}, seq=5)
    _stream(store, "EMPTY", ["empty.>"], {}, seq=0)  # nothing committed: no Delta log yet
    _stream(store, "OFF", ["off.>"], {"jetlake.lake": "off"}, seq=3)
    typed = {
        "jetlake.lake.format": "json",
        "jetlake.lake.tables": "iot.temp.>=temps",
    }
    _stream(store, "IOT", ["iot.>"], typed, seq=2)
    _stream(store, "orders", ["lower.>"], {}, seq=1)  # meets ORDERS' Hive name: not registered
    _stream(store, "ORDERS", ["orders.>"], {}, seq=4, account="A")  # a named account's
    entries = {e.name: e for e in catalog_entries(store, lake)}
    assert sorted(entries) == ["a_orders", "iot", "orders", "temps"]
    theirs = entries["a_orders"]
    assert theirs.location == (tmp_path / "lake" / "A.ORDERS" / INCARNATION).as_uri()
    assert theirs.comment == "jetlake stream A.ORDERS: subjects orders.>, format raw"
    assert theirs.params["jetlake.stream"] == "A.ORDERS"
    orders = entries["orders"]
    assert orders.location == (tmp_path / "lake" / "ORDERS" / INCARNATION).as_uri()
    assert orders.comment == "jetlake stream ORDERS: subjects orders.>,refunds.*, format raw"
    assert orders.params["jetlake.stream"] == "ORDERS"
    assert orders.params["jetlake.subjects"] == "orders.>,refunds.*"
    assert entries["iot"].params["jetlake.format"] == "json"
    temps = entries["temps"]
    assert temps.params["jetlake.subjects"] == "iot.temp.>"
    assert temps.comment == "jetlake table temps of stream IOT: subjects iot.temp.>, format json"
    assert temps.location.endswith(f"/IOT/{INCARNATION}.temps")


def test_the_metastore_runs_from_pyspark_jars_with_its_database_in_the_folder(
    tmp_path: Path,
) -> None:
    argv = metastore_command(tmp_path, 9999)
    assert argv[0] == "java" and "org.apache.hadoop.hive.metastore.HiveMetaStore" in argv
    assert argv[argv.index("-p") + 1] == "9999"
    classpath = argv[argv.index("-cp") + 1]
    assert list(Path(classpath[:-2]).glob("hive-metastore-*.jar")), classpath
    assert f"javax.jdo.option.ConnectionURL=jdbc:derby:;databaseName={tmp_path / 'db'}" in " ".join(
        argv
    )


START = 240.0  # a metastore's and a service's JVM, on a loaded two-core machine

# A plain PySpark session: Hive catalog, the metastore's URI, Delta; nothing of jetlake's
# (nats-py only to delete the stream once it has read it).
CLIENT = """
import asyncio, json, sys, time
import nats
from pyspark.sql import SparkSession
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.jars", sys.argv[2])
    .config("spark.sql.catalogImplementation", "hive")
    .config("spark.hadoop.hive.metastore.uris", sys.argv[1])
    .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
    .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
    .config("spark.sql.warehouse.dir", sys.argv[3])
    .getOrCreate()
)
deadline = time.monotonic() + float(sys.argv[5])
while True:  # the lake's commit, then the service's next sync, put the table there
    tables = set()
    if "jetlake" in [d.name for d in spark.catalog.listDatabases()]:
        tables = {t.name for t in spark.catalog.listTables("jetlake")}
    if "orders" in tables:
        spark.catalog.refreshTable("jetlake.orders")
        rows = spark.sql("SELECT subject, count(*) AS n FROM jetlake.orders GROUP BY 1").collect()
        counts = {r.subject: r.n for r in rows}
        # Delta's catalog describes the table from its log: the compactor's description.
        described = spark.sql("DESCRIBE TABLE EXTENDED jetlake.orders").collect()
        described = {r.col_name: r.data_type for r in described}.get("Comment")
        done = sum(counts.values()) == int(sys.argv[4]) and described
        if done or time.monotonic() > deadline:
            break
    elif time.monotonic() > deadline:
        break
    time.sleep(1)
# The metastore's own entry, as engines that read only the metastore see it:
raw = spark._jsparkSession.sharedState().externalCatalog().getTable("jetlake", "orders")
params = {k: raw.properties().get(k).get() for k in ("jetlake.stream", "jetlake.subjects")}
found = {"tables": sorted(tables), "counts": counts, "params": params, "described": described}
found["comment"] = raw.comment().get()
# A table of someone else's stays; a deleted stream's goes at the service's next sync.
spark.sql("CREATE TABLE jetlake.mine (a INT) USING parquet")
async def delete():
    nc = await nats.connect(sys.argv[6])
    await nc.jetstream().delete_stream("ORDERS")
    await nc.close()
asyncio.run(delete())
while "orders" in tables and time.monotonic() < deadline:
    time.sleep(1)
    tables = {t.name for t in spark.catalog.listTables("jetlake")}
print(json.dumps({**found, "after": sorted(tables)}))
"""


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    def listening() -> bool:
        assert proc.poll() is None, log.read_text()
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True

    poll(
        listening,
        lambda: f"a metastore on {port}:\n{log.read_text()}",
        START,
        interval=0.5,
        retry=OSError,
    )


@pytest.fixture
def metastore(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = tmp_path / "metastore.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(metastore_command(tmp_path / "hms", port), stdout=out, stderr=out)
    try:
        _wait_port(port, proc, log)
        yield f"thrift://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)


async def _publish(url: str, n: int) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        for i in range(n):
            await js.publish(("orders.eu", "orders.us")[i % 2], b"m-%d" % i)
    finally:
        await nc.close()


@pytest.mark.soak
@pytest.mark.timeout(3 * START)
def test_a_plain_spark_session_lists_and_reads_the_registered_tables(
    tmp_path: Path, metastore: str
) -> None:
    from log.compactor.spark import local_jars

    store = tmp_path / "store"
    conf = (
        f'jetstream {{ store_dir: "{store}" }}\n'
        'lake { seal_interval: "200ms", compact_interval: "500ms",\n'
        f'  sql {{ listen: "127.0.0.1:{free_port()}", jdbc: off, nats: off,'
        f' catalog: "{metastore}" }} }}\n'
    )
    server = start_with_service(config=conf, tmp_path=tmp_path)
    try:
        asyncio.run(_publish(server.url, 20))
        delta = [jar for jar in local_jars(s3a=False) if Path(jar).name.startswith("delta-")]
        argv = [sys.executable, "-c", CLIENT, metastore, ",".join(delta)]
        argv += [str(tmp_path / "warehouse"), "20", str(START), server.url]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=2 * START)
        assert done.returncode == 0, done.stderr[-3000:] + server.log()
        found = json.loads(done.stdout.strip().splitlines()[-1])
        assert found["tables"] == ["orders"]
        assert found["counts"] == {"orders.eu": 10, "orders.us": 10}
        comment = "jetlake stream ORDERS: subjects orders.>, format raw"
        assert found["comment"] == found["described"] == comment
        assert found["params"] == {"jetlake.stream": "ORDERS", "jetlake.subjects": "orders.>"}
        assert found["after"] == ["mine"]
    finally:
        server.stop()
