"""The lake on a Spark standalone cluster: `spark_master: spark://…` end to end.

A real master and worker (`tests.support.spark_cluster`, one pair for the
module) run the server's compactor and `jetlake sql`, with the lake in a
folder and then in a bucket of the test S3 server (SeaweedFS): nats-py
publishes, the compactor started by the server takes the rows (on a disk,
small appends go without Spark) and carries a delete into the table with a
Delta DELETE on the cluster's executor, and the command's query reads the
table there. Neither driver may fall back to a local master unnoticed: the
master must list both applications, and the executor's folder must hold
Delta's jars (and S3A's for a bucket), fetched from the driver
(`spark.jars`), without which an executor cannot reach the table.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from benchmarks.seaweed import SECRET_KEY, SeaweedS3
from log.compactor.layout import STREAMS, StreamRef
from log.compactor.location import Lake
from tests.conftest import Connect
from tests.support.http import get_json, http_get
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess, start_server
from tests.support.spark_cluster import SparkCluster, start_cluster

SUBJECTS = ("c.eu", "c.us", "c.apac", "c.af")
COUNT = 120
GONE = 7  # the seq deleted once the lake has it
LAKE_SECONDS = 240.0  # the compactor's JVM, then the executor's, on a loaded 2-core machine


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    started = start_cluster(tmp_path_factory.mktemp("spark-cluster"))
    yield started
    started.stop()


@pytest.fixture
def on_cluster(cluster: SparkCluster, monkeypatch: pytest.MonkeyPatch) -> SparkCluster:
    """The server (and so its compactor) and the commands inherit the cluster's app settings."""
    for key, value in cluster.app_env().items():
        monkeypatch.setenv(key, value)
    return cluster


async def _apps(cluster: SparkCluster) -> list[str]:
    doc = json.loads((await http_get(cluster.ui + "/json/")).body)  # served as text/json
    return [app["name"] for app in doc.get("activeapps", []) + doc.get("completedapps", [])]


# A standalone master and worker are two more JVMs (over a minute on two cores): both
# cases run with the soak marker, to keep the suite's time; the bucket is the case a
# cluster meets, the folder one the same paths less S3A.
@pytest.fixture(
    params=[pytest.param(case, marks=pytest.mark.soak) for case in ("bucket", "folder")]
)
def where(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Lake:
    """A folder on this machine (the workers run here), or a bucket of the test S3 server,
    its keys in the AWS environment variables the server, its compactor and `jetlake sql`
    all read."""
    if request.param == "folder":
        return Lake.at(tmp_path / "lake")
    seaweed: SeaweedS3 = request.getfixturevalue("seaweed")
    for key, value in seaweed.options().env().items():
        monkeypatch.setenv(key, value)
    return seaweed.lake(seaweed.bucket())


@pytest.fixture
def server(on_cluster: SparkCluster, where: Lake, tmp_path: Path) -> Iterator[ServerProcess]:
    """jetlake with the lake on, its compactor on the cluster (the config file's way)."""
    config = (
        f'lake {{ dir: "{where.root}", spark_master: "{on_cluster.url}", '
        'seal_interval: "500ms", compact_interval: "500ms" }\n'
    )
    store = str(tmp_path / "store")
    started = start_server(
        "jetlake", "-js", "-sd", store, "-m", "-1", config=config, tmp_path=tmp_path
    )
    yield started
    started.stop(expect_code=None)


@pytest.mark.timeout(600)  # six JVMs (master, worker, two drivers, their executors), two cores
async def test_compaction_and_sql_run_on_a_standalone_cluster(
    server: ServerProcess, on_cluster: SparkCluster, where: Lake, connect: Connect, tmp_path: Path
) -> None:
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(name="CLUSTER", subjects=["c.>"])
    sent: Counter[str] = Counter()
    for i in range(COUNT):
        subject = SUBJECTS[i % len(SUBJECTS)]
        await js.publish(subject, b"%d" % i)
        sent[subject] += 1

    async def landed() -> bool:
        doc = await get_json(server.http_url + "/jsz")
        return doc["lake"]["streams"].get("CLUSTER", {}).get("lake_seq") == COUNT

    await poll_async(landed, f"CLUSTER in the lake up to seq {COUNT}", timeout=LAKE_SECONDS)
    assert "jetlake-compact" in await _apps(on_cluster)
    assert SECRET_KEY not in server.log()  # handed to the executors, never printed
    # Small appends go without Spark; a delete is a Delta DELETE, run by the executor.
    await js.delete_msg("CLUSTER", GONE)
    sent[SUBJECTS[(GONE - 1) % len(SUBJECTS)]] -= 1
    ref = StreamRef.load(tmp_path / "store" / STREAMS / "CLUSTER")
    table = ref.table_path(where)

    def erased() -> bool:
        found = DeltaTable(table.uri, storage_options=table.delta_options)
        seqs = found.to_pyarrow_table(columns=["seq"]).column("seq").to_pylist()
        return len(seqs) == COUNT - 1 and GONE not in seqs

    await poll_async(erased, f"seq {GONE} erased from {table}", timeout=LAKE_SECONDS)
    jars = {p.name for p in on_cluster.work_dir.glob("app-*/*/*.jar")}
    assert any(name.startswith("delta-spark_") for name in jars), jars
    assert not where.remote or any(name.startswith("hadoop-aws-") for name in jars), jars

    query = "SELECT subject, count(*) AS n, count(DISTINCT seq) AS d FROM CLUSTER GROUP BY 1"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "jetlake"),
            "sql",
            "--store",
            str(tmp_path / "store"),
            "--lake",
            where.root,
            "--spark_master",
            on_cluster.url,
            "--format",
            "json",
            query,
        ],
        capture_output=True,
        text=True,
        timeout=LAKE_SECONDS,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)
    assert Counter({r["subject"]: r["n"] for r in rows}) == sent
    assert all(r["n"] == r["d"] for r in rows)  # every seq once
    assert "jetlake-sql" in await _apps(on_cluster)
