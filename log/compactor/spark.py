"""The one way jetlake builds a SparkSession with Delta: compactor, jobs and `jetlake sql`.

Delta's jars are resolved from Maven Central when the project is set up
(`make` copies them into `.venv/jars/`), never at a first query: a session
started here only reads local files. S3A's jars (hadoop-aws and the AWS SDK
bundle, 0.7 GB) are added only for a lake in object storage, whose S3A
settings come from the lake (`log.compactor.location`). Under `spark-submit` the submitter's own
`--jars`/`--packages` win and no local jar is added.

Master: the argument, else `JETLAKE_SPARK_MASTER`, else `local[*]`. The small
defaults (4 shuffle partitions, 2 snapshot partitions, 8 listing tasks, no UI) suit one machine
and small per-stream appends; a cluster user overrides them with `--conf`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from log.compactor.layout import LakeError
from log.compactor.location import Lake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MASTER_ENV = "JETLAKE_SPARK_MASTER"
JARS_ENV = "JETLAKE_JARS"
DEFAULT_MASTER = "local[*]"
S3A_JARS = ("hadoop-aws-", "bundle-", "analyticsaccelerator-s3-")  # only a remote lake's

_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "8",  # vacuum's listing tasks
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Parquet's standard timestamp (INT96 is deprecated) for the files the lake gets from now on;
    # tables written before keep their INT96 files, and every reader reads both.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


def resolve_master(master: str | None = None) -> str:
    return master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER


def local_jars(*, s3a: bool = False) -> list[str]:
    """The lake's jars installed at set-up (`$JETLAKE_JARS` or `<venv>/jars/`): Delta's, and
    with `s3a` S3A's too."""
    folder = Path(os.environ.get(JARS_ENV) or Path(sys.prefix) / "jars")
    found = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    return [str(p) for p in found if s3a or not p.name.startswith(S3A_JARS)]


def under_submit() -> bool:
    """True when spark-submit launched us (its JVM is up and passed us its gateway port)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT"))


def build_session(
    app_name: str,
    *,
    master: str | None = None,
    lake: Lake | None = None,
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """A session with Delta configured (or the running one, e.g. in a notebook or under submit),
    able to reach `lake` (its S3A settings and jars when it is in object storage); `conf` adds
    to or overrides the defaults (the SQL service's extension and ports)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    remote = lake is not None and lake.remote
    settings = {**_CONF, **(lake.spark_conf() if lake is not None else {}), **(conf or {})}
    for key, value in settings.items():
        builder = builder.config(key, value)
    if not under_submit():
        jars = local_jars(s3a=remote)
        if not jars:
            raise LakeError(
                f"no Delta jars in {os.environ.get(JARS_ENV) or Path(sys.prefix) / 'jars'}: "
                "run `make` (it installs them) or set JETLAKE_JARS"
            )
        chosen = resolve_master(master)
        builder = builder.master(chosen).config("spark.jars", ",".join(jars))
        if chosen.startswith("local"):  # one process: keep the driver off the network
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = builder.config("spark.driver.host", "127.0.0.1").config(
                "spark.driver.bindAddress", "127.0.0.1"
            )
        elif lake is not None:
            # A cluster's executors are no children of ours and lack the environment S3A's
            # credential chain reads here: hand them the lake's (Spark redacts the secret
            # from its UI and logs). Executors with credentials of their own (an instance
            # role) get none when the server has none.
            for key, value in lake.child_env().items():
                builder = builder.config(f"spark.executorEnv.{key}", value)
    log4j = Path(__file__).with_name("log4j2.properties")
    builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j}")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
