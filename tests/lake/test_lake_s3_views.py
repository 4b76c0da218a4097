"""What a user reads from a lake in a bucket, as from a disk: typed and rejects tables, KV and
Object Store views, compaction by `spark-submit`, and `jetlake inspect` (no JVM) with the
keys only in the AWS environment variables.

One scenario: a real server with the lake in a bucket of the test S3 server, a typed stream,
a KV bucket and an object store written by nats-py, the sealed history compacted (by the
shared session, or by the batch job under `spark-submit`, a JVM of its own; both under soak), then
read back by Spark's views on the shared session and by `jetlake inspect`, against what the
client reads.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import pytest
from nats.js import api
from nats.js.api import StreamConfig
from pyspark.sql import SparkSession

from benchmarks.seaweed import ACCESS_KEY, SECRET_KEY, SeaweedS3
from log.compactor.compact import lake_progress
from log.compactor.layout import StreamRef
from log.compactor.location import ENDPOINT_ENV, KEY_ENV, SECRET_ENV
from tests.conftest import Connect
from tests.lake.conftest import Lake
from tests.lake.test_bucket_views import kv_expected, kv_view, obj_expected, obj_view
from tests.lake.test_spark_submit import JARS, JOB, VENV_BIN

ORDERS = {"jetlake.lake.format": "json"}


def env_keys(seaweed: SeaweedS3) -> dict[str, str]:
    """The environment of a batch command whose bucket settings are only AWS_* variables."""
    scrubbed = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {
        **scrubbed,
        ENDPOINT_ENV[1]: seaweed.endpoint,
        KEY_ENV: ACCESS_KEY,
        SECRET_ENV: SECRET_KEY,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
    }


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "compact_by",
    [
        # Both soak, for the suite's time: the shared session compacts, as the server's
        # compactor would; spark-submit runs a JVM of its own.
        pytest.param("session", marks=pytest.mark.soak),
        pytest.param("spark-submit", marks=pytest.mark.soak),
    ],
)
async def test_typed_kv_and_object_views_compacted_into_a_bucket(
    lake: Lake, seaweed: SeaweedS3, spark: SparkSession, connect: Connect, compact_by: str
) -> None:
    bucket = seaweed.bucket()
    seaweed.bind(spark, bucket)
    lake.lake_dir = seaweed.lake(bucket)
    uri = lake.lake_dir.root
    timing = 'seal_interval: "200ms", compact_interval: 0'  # the job below compacts
    server = lake.start(config=seaweed.lake_config(uri, timing))
    js = (await connect(server)).jetstream()
    await js.add_stream(StreamConfig(name="ORDERS", subjects=["orders.>"], metadata=ORDERS))
    for i in range(5):
        await js.publish("orders.new", json.dumps({"id": i, "amount": i * 1.5}).encode())
    await js.publish("orders.new", b"{not json")  # a reject
    kv = await js.create_key_value(bucket="cfg", history=2)
    for key, value in (("a", b"1"), ("b", b"2"), ("a", b"3"), ("c", b"4")):
        await kv.put(key, value)
    await kv.delete("b")
    obs = await js.create_object_store("files")
    await obs.put("small", b"hello")
    chunks = api.ObjectMeta(options=api.ObjectMetaOptions(max_chunk_size=1024))
    await obs.put("big", bytes(range(256)) * 12, meta=chunks)
    await obs.delete("small")
    kv_rows = await kv_expected(js, kv, "KV_cfg")
    obj_rows = await obj_expected(js, obs, "files")
    lasts = {}
    for stream in ("ORDERS", "KV_cfg", "OBJ_files"):
        lasts[stream] = (await js.stream_info(stream)).state.last_seq
        await lake.sealed(stream, lasts[stream])

    if compact_by == "session":
        lake.compact()
    else:
        assert JARS, "make installs the lake's jars into .venv/jars"
        env = {**env_keys(seaweed), "PYSPARK_PYTHON": sys.executable}
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        submit = [str(VENV_BIN / "spark-submit"), "--master", "local[1]"]
        submit += ["--jars", ",".join(map(str, JARS)), str(JOB)]
        done = subprocess.run(
            [*submit, "compact", "--store", str(lake.store), "--lake", uri],
            capture_output=True,
            text=True,
            timeout=400,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert SECRET_KEY not in done.stdout + done.stderr
    for stream, last in lasts.items():  # every sealed row is in the bucket's tables
        table = StreamRef.load(lake.stream_dir(stream)).table_path(lake.lake_dir)
        assert table.uri.startswith(f"{uri}/{stream}/")
        assert lake_progress(table, StreamRef.load(lake.stream_dir(stream)).app_id) == last

    # Spark's views over the bucket (the tail is empty: everything was sealed and compacted).
    assert kv_view(lake, "cfg") == kv_rows
    assert obj_view(lake, "files") == obj_rows
    orders = lake.sql("SELECT id, amount FROM ORDERS ORDER BY seq")
    assert [(r.id, r.amount) for r in orders] == [(i, i * 1.5) for i in range(5)]
    rejects = lake.sql("SELECT seq, data FROM ORDERS_rejects")
    assert [(r.seq, bytes(r.data)) for r in rejects] == [(6, b"{not json")]

    # `jetlake inspect`: deltalake's and Arrow's S3 clients and DuckDB, keys from the env.
    argv = [str(VENV_BIN / "jetlake"), "inspect", "--store", str(lake.store), "--lake", uri]
    sql = (
        "SELECT (SELECT sum(id) FROM orders) AS ids, (SELECT min(seq) FROM orders_rejects) AS "
        'rejected, (SELECT count(*) FROM "KV_cfg") AS kv'  # the stream: inspect has no kv_ views
    )
    done = subprocess.run(
        [*argv, "--format", "csv", sql],
        capture_output=True,
        text=True,
        timeout=120,
        env=env_keys(seaweed),
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    found = list(csv.DictReader(io.StringIO(done.stdout)))
    assert found == [{"ids": "10", "rejected": "6", "kv": str(lasts["KV_cfg"])}]
