"""The lake in a bucket of a real S3-compatible server (SeaweedFS): everything the lake does on a
disk, done there, and commits that stay exact with more than one writer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from benchmarks.seaweed import ACCESS_KEY, SECRET_KEY, SeaweedS3
from log.compactor import maintain
from log.compactor.compact import Compactor, lake_progress
from log.compactor.layout import StreamRef, read_shared_pin
from log.compactor.location import Lake
from sql.inspect import query
from sql.session import refresh
from tests.conftest import Connect
from tests.lake.conftest import DEADLINE, Folder
from tests.lake.conftest import Lake as LakeServer
from tests.lake.test_lake_cluster_writers import Replica
from tests.support.http import get_json, http_get
from tests.support.poll import poll_async
from tests.support.s3faults import Fault, FaultProxy
from tests.support.servers import ServerProcess


def store_of(folder: Folder) -> Path:
    return folder.dir.parents[3]


async def lake_reaches(server: ServerProcess, stream: str, seq: int) -> None:
    async def there() -> bool:
        doc = await get_json(server.http_url + "/jsz")
        return doc["lake"]["streams"].get(stream, {}).get("lake_seq") == seq

    await poll_async(there, f"{stream} in the bucket up to seq {seq}", timeout=300)


def server_conf(seaweed: SeaweedS3, uri: str, **keys: str) -> str:
    """A server whose lake is `uri` on the test server, its keys in the config file."""
    timing = 'seal_interval: "200ms", compact_interval: "500ms"'
    return seaweed.lake_config(uri, timing, **keys)


@pytest.mark.timeout(600)  # a Delta table's first commits, an optimize and two views
def test_compaction_views_inspect_and_upkeep_in_a_bucket(
    spark: SparkSession, folder: Folder, bucket_lake: Lake
) -> None:
    folder.publish(300)
    folder.publish(40, seal=False)  # the live tail stays on the server's disk
    compactor = Compactor(spark, store_of(folder), bucket_lake)
    summary = compactor.run_once()
    assert not summary.errors and summary.rows == 300
    table = folder.ref.table_path(bucket_lake)
    assert table.uri.startswith("s3://") and lake_progress(table, folder.ref.app_id) == 300
    shared = read_shared_pin(folder.ref, bucket_lake)
    assert shared is not None and shared.seq == 300
    assert not list(bucket_lake.path("_staging").children())  # staged Parquet removed

    # Spark's union view and DuckDB's (`jetlake inspect`, no JVM) read the same 340 rows.
    refresh(spark, store_dir=store_of(folder), lake_dir=bucket_lake)
    spark_count = spark.sql("SELECT count(*) AS n, max(seq) AS top FROM S").collect()[0]
    assert (spark_count.n, spark_count.top) == (340, 340)
    rows = query("SELECT count(*) AS n FROM S", {"S": folder.dir}, print, bucket_lake)
    assert rows is not None and rows.column("n").to_pylist() == [340]

    folder.publish(60)
    assert compactor.run_once().rows == 100  # the 40 of the tail, sealed now, and 60 more
    assert [t.uri for t in maintain.delta_tables(bucket_lake)] == [table.uri]
    optimized = maintain.optimize(spark, "S", table)
    assert optimized.files >= 1
    assert maintain.vacuum(spark, table, retain_hours=168) == 0  # retention keeps them
    seqs = DeltaTable(table.uri, storage_options=table.delta_options).to_pyarrow_table(
        columns=["seq"]
    )
    assert sorted(seqs.column("seq").to_pylist()) == list(range(1, 401))


@pytest.mark.timeout(300)
def test_the_store_lets_one_writer_create_a_table_version(
    spark: SparkSession, seaweed: SeaweedS3, bucket_lake: Lake
) -> None:
    """Two writers of version 0 with no existence probe before the PUT (S3A's create
    performance mode), so only the store's `If-None-Match: *` can refuse the second:
    SeaweedFS does, and the log store turns it into the exception Delta's commit expects."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    conf = jvm.org.apache.hadoop.conf.Configuration(spark.sparkContext._jsc.hadoopConfiguration())
    conf.set(f"fs.s3a.bucket.{bucket_lake.bucket}.create.performance", "true")
    conf.set("fs.s3a.impl.disable.cache", "true")
    commit = bucket_lake.path("t", "_delta_log", "00000000000000000000.json")
    path = jvm.org.apache.hadoop.fs.Path(commit.spark)
    store = jvm.io.jetlake.delta.ConditionalS3LogStore(conf)

    def write(action: str) -> None:
        actions = jvm.java.util.ArrayList()
        actions.add(action)
        store.write(path, actions.iterator(), False, conf)

    write('{"first":1}')
    with pytest.raises(Exception, match=r"java\.nio\.file\.FileAlreadyExistsException") as lost:
        write('{"second":2}')
    assert "412" in str(lost.value)  # the store's refusal, not a probe of S3A's
    assert commit.read_bytes() == b'{"first":1}\n'


PASS_FAILED = "ERROR compact S3: table s3://"  # the compactor's log: a pass failed


@pytest.fixture
def proxy(seaweed: SeaweedS3) -> Iterator[FaultProxy]:
    """A fault-injecting proxy before the test S3 server (no fault until one is set)."""
    made = FaultProxy(seaweed.s3).start()
    yield made
    made.stop()


def profile_env(home: Path) -> list[str]:
    """An `env` wrapper for a server whose keys come only from the AWS profile chain: a HOME
    whose `~/.aws` names them under a profile, AWS_PROFILE naming it, no key variables."""
    aws = home / ".aws"
    aws.mkdir(parents=True)
    (aws / "credentials").write_text(
        f"[lake]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
    )
    (aws / "config").write_text("[profile lake]\nregion = us-east-1\n")
    unset = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE")
    unset += ("AWS_SHARED_CREDENTIALS_FILE",)
    return ["env", *(f"-u{name}" for name in unset), f"HOME={home}", "AWS_PROFILE=lake"]


@pytest.mark.timeout(600)  # the server's compactor is a JVM of its own
async def test_the_servers_compactor_fills_a_bucket_through_store_faults(
    lake: LakeServer, seaweed: SeaweedS3, proxy: FaultProxy, connect: Connect, tmp_path: Path
) -> None:
    """The keys from an AWS profile only; the store behind a proxy that answers 503 SlowDown,
    then 500, then nothing at all. Through each: publishes acknowledged, /healthz ok, the lag
    growing and the store's answer naming the bucket on /jsz, the compactor retrying; after,
    the table caught up with every seq once."""
    bucket = seaweed.bucket()
    timing = 'seal_interval: "200ms", compact_interval: "500ms"'
    config = (
        f'lake {{ dir: "s3://{bucket}/lake", {timing},\n'
        f'  s3 {{ endpoint: "{proxy.endpoint}", path_style: true }} }}\n'
    )
    server = lake.start(config=config, wrapper=profile_env(tmp_path / "home"))
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(name="S3", subjects=["s3.>"])
    for i in range(200):
        await js.publish(f"s3.{i % 3}", b"%d" % i)
    await lake_reaches(server, "S3", 200)
    jsz = (await get_json(server.http_url + "/jsz"))["lake"]
    assert jsz["dir"] == f"s3://{bucket}/lake" and "error" not in jsz
    assert jsz["streams"]["S3"]["table"].startswith(f"s3://{bucket}/lake/S3/")

    said = {Fault.SLOW_DOWN: "SLOW_DOWN", Fault.INTERNAL: "INTERNAL_FAILURE"}
    seq = 200
    for fault in (Fault.SLOW_DOWN, Fault.INTERNAL, Fault.STALL):
        proxy.set(fault)
        failed = server.log().count(PASS_FAILED)
        for i in range(50):
            seq += 1
            assert (await js.publish("s3.late", b"%d" % i)).seq == seq  # the live log buffers
        await lake.sealed("S3", seq)

        async def held(fault: Fault = fault, seq: int = seq, failed: int = failed) -> bool:
            doc = (await get_json(server.http_url + "/jsz"))["lake"]
            lag = doc["streams"]["S3"]
            assert lag["lake_seq"] == 200 and lag["lag_messages"] == seq - 200
            named = f"lake bucket {bucket}: " in doc.get("error", "")
            if fault is Fault.STALL:  # calls time out slowly: the last answer stays on /jsz
                return named and proxy.counts[fault] > 0 and lag["lag_seconds"] >= 3.0
            retried = server.log().count(PASS_FAILED) > failed  # a pass failed, naming the table
            return named and said[fault] in doc["error"] and retried

        await poll_async(
            held, f"{fault.value}: the lag growing, /jsz naming the bucket", timeout=180
        )
        assert (await http_get(server.http_url + "/healthz")).status == 200
        metrics = (await http_get(server.http_url + "/metrics")).body.decode()
        assert 'jetlake_lake_lag_messages{server_id="' in metrics
    proxy.set(Fault.NONE)
    await lake_reaches(server, "S3", seq)

    async def cleared() -> bool:
        return "error" not in (await get_json(server.http_url + "/jsz"))["lake"]

    await poll_async(cleared, "/jsz's lake error gone once the store answers", timeout=DEADLINE)
    table = StreamRef.load(lake.stream_dir("S3")).table_path(seaweed.lake(bucket))
    seqs = DeltaTable(table.uri, storage_options=table.delta_options).to_pyarrow_table(
        columns=["seq"]
    )
    assert sorted(seqs.column("seq").to_pylist()) == list(range(1, seq + 1))
    for page in ("/varz", "/jsz", "/metrics"):
        assert SECRET_KEY not in (await http_get(server.http_url + page)).body.decode()
    assert SECRET_KEY not in server.log()


@pytest.mark.parametrize("refused", ["bucket", "keys"])
async def test_a_missing_bucket_or_refused_keys_are_named_once_and_publishes_go_on(
    lake: LakeServer, seaweed: SeaweedS3, connect: Connect, refused: str
) -> None:
    bucket = "no-such-bucket" if refused == "bucket" else seaweed.bucket()
    wrong = {"secret_key": "not-the-secret"} if refused == "keys" else {}
    server = lake.start(config=server_conf(seaweed, f"s3://{bucket}/lake", **wrong))
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(name="HELD", subjects=["h.>"])
    for i in range(50):
        assert (await js.publish("h.x", b"%d" % i)).seq == i + 1  # the live log is the buffer

    async def named() -> bool:
        doc = (await get_json(server.http_url + "/jsz"))["lake"]
        return f"lake bucket {bucket}: " in doc.get("error", "")

    await poll_async(named, f"the {refused} refused, naming the bucket in /jsz", timeout=DEADLINE)
    await lake.sealed("HELD", 50)
    doc = (await get_json(server.http_url + "/jsz"))["lake"]
    assert doc["compactor"] == {"running": False, "pid": 0}  # nothing to restart in a loop
    assert doc["streams"]["HELD"]["lag_messages"] == 50
    assert (await http_get(server.http_url + "/healthz")).status == 200
    assert server.log().count(f"Lake unavailable: lake bucket {bucket}: ") == 1
    pages = [
        (await http_get(server.http_url + page)).body.decode() for page in ("/varz", "/metrics")
    ]
    assert "not-the-secret" not in server.log() + json.dumps(doc) + "".join(pages)


@pytest.mark.soak  # two compactor JVMs racing for minutes on two cores
@pytest.mark.timeout(900)
async def test_two_compactor_processes_racing_on_a_bucket_commit_each_seq_once(
    folder: Folder, tmp_path: Path, bucket_lake: Lake
) -> None:
    """A deposed leader's compactor and the new leader's, each a JVM of its own: Delta's
    default S3 log store would let both commit one table version and lose a group; with the
    conditional log store one of them loses each race and starts over from the table."""
    replica = Replica(tmp_path / "store-b", folder, leader=True)
    for _ in range(30):
        folder.publish(50)
    for _ in range(15):
        replica.publish(100)  # the same 1500 seqs, sealed at other boundaries
    env = {**os.environ, **bucket_lake.child_env()}
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    job = [sys.executable, "-m", "jobs.lake_job", "compact", "--follow", "--interval", "1"]
    procs = [
        subprocess.Popen(
            [*job, "--store", str(store), "--lake", bucket_lake.root, "--max_rows", str(rows)],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            env=env,
        )
        for store, rows, log in ((store_of(folder), 50, logs[0]), (replica.store, 100, logs[1]))
    ]
    table = folder.ref.table_path(bucket_lake)
    try:
        await poll_async(
            lambda: lake_progress(table, folder.ref.app_id) == 1500,
            "the table up to seq 1500",
            timeout=600,
        )
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(60)
        replica.segments.close()
    seqs = DeltaTable(table.uri, storage_options=table.delta_options).to_pyarrow_table(
        columns=["seq"]
    )
    assert sorted(seqs.column("seq").to_pylist()) == list(range(1, 1501))
    said = [log.read_text() for log in logs]
    assert all("appending" in text for text in said)  # both committed groups
    assert any("another compactor" in text for text in said)  # and they raced
