"""The lake on a Spark standalone cluster: `spark_master: spark://…` end to end.

A real master and worker (`tests.support.spark_cluster`, one pair for the
module) run the server's compactor and `jetlake sql`: nats-py publishes, the
compactor started by the server appends through the cluster's executor, and
the command's query reads the Delta table there. Neither driver may fall back
to a local master unnoticed: the master must list both applications, and the
executor's folder must hold Delta's jars, fetched from the driver
(`spark.jars`), without which an executor cannot write or read a Delta table.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Connect
from tests.lake.conftest import poll
from tests.support.http import get_json, http_get
from tests.support.servers import ServerProcess, start_server
from tests.support.spark_cluster import SparkCluster, start_cluster

SUBJECTS = ("c.eu", "c.us", "c.apac", "c.af")
COUNT = 120
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


@pytest.fixture
def server(on_cluster: SparkCluster, tmp_path: Path) -> Iterator[ServerProcess]:
    """jetlake with the lake on, its compactor on the cluster (the config file's way)."""
    config = (
        f'lake {{ spark_master: "{on_cluster.url}", seal_interval: "500ms", '
        'compact_interval: "500ms" }\n'
    )
    store = str(tmp_path / "store")
    started = start_server(
        "jetlake", "-js", "-sd", store, "-m", "-1", config=config, tmp_path=tmp_path
    )
    yield started
    started.stop(expect_code=None)


async def test_compaction_and_sql_run_on_a_standalone_cluster(
    server: ServerProcess, on_cluster: SparkCluster, connect: Connect, tmp_path: Path
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

    await poll(landed, f"CLUSTER in the lake up to seq {COUNT}", deadline=LAKE_SECONDS)
    assert "jetlake-compact" in await _apps(on_cluster)
    jars = {p.name for p in on_cluster.work_dir.glob("app-*/*/*.jar")}
    assert any(name.startswith("delta-spark_") for name in jars), jars

    query = "SELECT subject, count(*) AS n, count(DISTINCT seq) AS d FROM CLUSTER GROUP BY 1"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "jetlake"),
            "sql",
            "--store",
            str(tmp_path / "store"),
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
