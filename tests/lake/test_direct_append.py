"""The compactor's append without Spark (`log.compactor.direct`) keeps the lake exact.

Its condition is the one Spark's conditional append has: a writer that read
the table's progress before another writer's commit must lose, whichever
engine each used, and the table must then hold every seq once. The races
here are forced: both writers read the progress before either commits.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from log.compactor.compact import Compactor, lake_progress
from log.compactor.direct import append_direct
from log.compactor.layout import default_lake_dir
from log.compactor.rows import spark_schema, to_lake
from log.compactor.txn import LakeMoved, append_after
from log.segments import list_segments, read_segment
from tests.lake.conftest import Folder


def compactor(spark: SparkSession, folder: Folder) -> Compactor:
    store = folder.dir.parents[3]
    return Compactor(spark, store, default_lake_dir(store))


def rows_of(folder: Folder, first: int, last: int) -> pa.Table:
    """The lake rows of seqs first..last, as the compactor builds them."""
    parts = [read_segment(s) for s in list_segments(folder.dir)]
    table = pa.concat_tables(parts)
    seq = table.column("seq")
    keep = pc.and_(pc.greater_equal(seq, first), pc.less_equal(seq, last))
    return to_lake(folder.ref.name, table.filter(keep))


def seqs(table: Path) -> list[int]:
    return sorted(DeltaTable(str(table)).to_pyarrow_table(columns=["seq"]).column(0).to_pylist())


def test_a_small_pass_goes_without_spark_and_reads_back_in_spark(
    spark: SparkSession, folder: Folder
) -> None:
    folder.publish(30)
    comp = compactor(spark, folder)
    assert comp.run_once().rows == 30
    table = folder.ref.table_path(comp.lake_dir)
    history = DeltaTable(str(table)).history()
    assert history[0]["clientVersion"].startswith("delta-rs"), history[0]
    frame = spark.read.format("delta").load(str(table))
    got = frame.groupBy("subject").count().collect()
    assert sorted((r.subject, r["count"]) for r in got) == [
        (f"s.{i}", 8 - (i > 1)) for i in range(4)
    ]
    folder.publish(10)
    assert comp.run_once().rows == 10
    assert seqs(table) == list(range(1, 41))
    assert lake_progress(table, folder.ref.app_id) == 40


Writer = Callable[[SparkSession, Path, pa.Table, int, int, str], None]


def _direct(
    spark: SparkSession, table: Path, rows: pa.Table, after: int, last: int, app: str
) -> None:
    append_direct(str(table), rows, app_id=app, after=after, version=last)


def _spark(
    spark: SparkSession, table: Path, rows: pa.Table, after: int, last: int, app: str
) -> None:
    frame = spark.createDataFrame(rows).select(*spark_schema(rows.schema).names)
    append_after(spark, frame, table, app_id=app, after=after, version=last)


@pytest.mark.parametrize(
    ("first", "second"),
    [(_direct, _direct), (_direct, _spark), (_spark, _direct)],
    ids=["direct-direct", "direct-spark", "spark-direct"],
)
def test_of_two_writers_that_read_the_same_progress_one_commits(
    spark: SparkSession,
    folder: Folder,
    monkeypatch: pytest.MonkeyPatch,
    first: Writer,
    second: Writer,
) -> None:
    folder.publish(20)
    comp = compactor(spark, folder)
    assert comp.run_once().rows == 20  # the table exists and records 20
    folder.publish(30)
    table = folder.ref.table_path(comp.lake_dir)
    app = folder.ref.app_id
    # The two compactors' groups overlap at different boundaries, as two replicas seal.
    first(spark, table, rows_of(folder, 21, 50), 20, 50, app)
    with pytest.raises(LakeMoved):
        second(spark, table, rows_of(folder, 21, 40), 20, 40, app)
    assert seqs(table) == list(range(1, 51))
    assert lake_progress(table, app) == 50
