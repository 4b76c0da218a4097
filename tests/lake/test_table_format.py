"""The tables are plain Delta: other engines read them with no jetlake code at all."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pyarrow.compute as pc
from deltalake import DeltaTable

from log.compactor.follow import RECENT
from log.compactor.layout import StreamRef
from log.compactor.maintain import current_tables, delta_tables, optimize, vacuum
from tests.conftest import Connect
from tests.lake.conftest import Lake

# Only pyspark, Delta's jars as set-up installed them, and Delta's documented session settings:
# nothing of jetlake's (its log store, its views) and no S3A (a 650 MB jar for a folder lake).
PLAIN_SPARK = """
import glob, json, sys
from pyspark.sql import SparkSession
jars = ",".join(sorted(glob.glob(sys.prefix + "/jars/delta-*.jar")))
spark = (SparkSession.builder.master("local[1]")
    .config("spark.jars", jars)
    .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
    .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
    .getOrCreate())
rows = spark.read.format("delta").load(sys.argv[1]).groupBy("subject").count().collect()
print(json.dumps({r["subject"]: r["count"] for r in rows}))
"""


async def test_plain_spark_and_deltalake_read_the_table(lake: Lake, connect: Connect) -> None:
    server = lake.start()
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(name="PLAIN", subjects=["p.>"])
    sent: Counter[str] = Counter()
    for i in range(300):
        await js.publish(f"p.{i % 4}", b"%d" % i, headers={"N": str(i)})
        sent[f"p.{i % 4}"] += 1
    await lake.sealed("PLAIN", 300)
    lake.compact()
    table = StreamRef.load(lake.stream_dir("PLAIN")).table_path(lake.lake_dir)

    out = subprocess.run(
        [sys.executable, "-c", PLAIN_SPARK, str(table)],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    assert Counter(json.loads(out.stdout.strip().splitlines()[-1])) == sent

    arrow = DeltaTable(str(table)).to_pyarrow_table()
    assert arrow.num_rows == 300
    assert arrow.schema.names == ["stream", "seq", "ts", "subject", "headers", "data", "date"]
    assert DeltaTable(str(table)).metadata().partition_columns == ["date"]
    first = arrow.filter(pc.equal(arrow.column("seq"), 1)).to_pylist()[0]
    assert first["data"] == b"0" and dict(first["headers"]) == {"N": ["0"]}


async def test_optimize_and_vacuum_keep_every_row(lake: Lake, connect: Connect) -> None:
    server = lake.start()
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(name="SMALLFILES", subjects=["s.>"])
    for batch in range(3):  # three appends: three sets of small files
        for i in range(50):
            await js.publish(f"s.{i % 3}", b"%d" % i)
        await lake.sealed("SMALLFILES", 50 * (batch + 1))
        lake.compact()
    [(name, table)] = current_tables(lake.store, lake.lake_dir)
    assert name == "SMALLFILES" and delta_tables(lake.lake_dir) == [table]
    summary = optimize(lake.spark, name, table, where=RECENT)  # as the server's schedule does
    assert summary.files > 0
    assert vacuum(lake.spark, table, retain_hours=168) == 0  # too young to go
    assert lake.sql("SELECT count(*) AS n FROM SMALLFILES")[0].n == 150
