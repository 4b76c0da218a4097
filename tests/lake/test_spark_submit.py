"""The batch jobs under spark-submit, as a Spark user schedules them outside jetlake."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from deltalake import DeltaTable

from log.compactor.spark import local_jars
from tests.conftest import Connect
from tests.lake.conftest import Lake

VENV_BIN = Path(sys.executable).parent
JARS = local_jars(s3a=False)  # as the job takes them for a folder lake: no S3A bundle to load
# spark-submit takes the job as a file, not a module.
JOB = Path(__file__).resolve().parents[2] / "jobs" / "lake_job.py"


async def test_compact_job_under_spark_submit(lake: Lake, connect: Connect) -> None:
    server = lake.start()
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(name="SUBMIT", subjects=["submit.>"])
    for i in range(40):
        await js.publish(f"submit.{i % 4}", b"%d" % i)
    await lake.sealed("SUBMIT", 40)
    assert JARS, "make test installs Delta's jars into .venv/jars"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    done = subprocess.run(
        [
            str(VENV_BIN / "spark-submit"),
            "--master",
            "local[1]",
            "--jars",
            ",".join(JARS),
            str(JOB),
            "compact",
            "--store",
            str(lake.store),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows" in done.stdout, done.stdout
    # The Delta table itself, not the union view (whose live tail would hide a no-op job).
    (log_dir,) = (Path(lake.lake_dir.root) / "SUBMIT").glob("**/_delta_log")
    table = DeltaTable(str(log_dir.parent)).to_pyarrow_table(columns=["seq", "subject"])
    assert sorted(table.column("seq").to_pylist()) == list(range(1, 41))
    assert len(set(table.column("subject").to_pylist())) == 4
