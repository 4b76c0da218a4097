"""The lake part of a view: one table version, read as its Parquet files when that is exact."""

from __future__ import annotations

from pathlib import Path

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from log.compactor.compact import Compactor
from log.compactor.layout import default_lake_dir
from sql.lake_snapshot import lake_frame, lake_snapshot
from sql.session import refresh
from sql.views import _staging_dir
from tests.lake.conftest import Folder


def compact(spark: SparkSession, folder: Folder) -> Path:
    store = folder.dir.parents[3]
    summary = Compactor(spark, store, default_lake_dir(store)).run_once()
    assert not summary.errors, summary.errors
    return folder.ref.table_path(default_lake_dir(store))


def view_seqs(spark: SparkSession, folder: Folder) -> list[int]:
    refresh(spark, store_dir=folder.dir.parents[3])
    return sorted(r.seq for r in spark.sql("SELECT seq FROM S").collect())


def test_one_version_is_read_as_its_files_and_kept_while_current(
    spark: SparkSession, folder: Folder
) -> None:
    folder.publish(300)
    table = compact(spark, folder)
    snapshot = lake_snapshot(table, folder.ref.app_id)
    assert snapshot is not None and snapshot.done == 300
    assert snapshot.files is not None
    assert sorted(snapshot.files) == sorted(DeltaTable(str(table)).file_uris())
    frame = lake_frame(spark, snapshot)
    assert sorted(r.seq for r in frame.select("seq").collect()) == list(range(1, 301))
    same = lake_snapshot(table, folder.ref.app_id)
    assert same is not None and lake_frame(spark, same) is frame  # the version did not move

    folder.publish(50)
    compact(spark, folder)
    newer = lake_snapshot(table, folder.ref.app_id)
    assert newer is not None and (newer.version, newer.done) == (snapshot.version + 1, 350)
    assert lake_frame(spark, newer) is not frame
    assert lake_frame(spark, snapshot) is not frame  # one frame kept per table: the newest
    assert view_seqs(spark, folder) == list(range(1, 351))


def test_deletion_vectors_send_the_read_through_delta(spark: SparkSession, folder: Folder) -> None:
    """Rows a deletion vector hides are still in the Parquet file: only Delta reads them right."""
    folder.publish(100)
    table = compact(spark, folder)
    spark.sql(
        f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)"
    )
    spark.sql(f"DELETE FROM delta.`{table}` WHERE seq <= 10")
    assert DeltaTable(str(table)).protocol().min_reader_version == 3
    snapshot = lake_snapshot(table, folder.ref.app_id)
    assert snapshot is not None and snapshot.files is None
    folder.publish(5, seal=False)  # and the tail still joins it
    assert view_seqs(spark, folder) == list(range(11, 106))


def test_an_empty_tail_stages_no_file(spark: SparkSession, folder: Folder) -> None:
    def staged() -> set[Path]:
        """Tail files staged since the test began (replaced ones stay a while for the
        queries still reading them, so earlier tests' may be there too)."""
        return {p for p in _staging_dir().iterdir() if p.name.startswith("S-")} - before

    before: set[Path] = set()
    before = staged()
    folder.publish(40)
    compact(spark, folder)
    assert view_seqs(spark, folder) == list(range(1, 41))
    assert staged() == set()
    folder.publish(3, seal=False)
    assert view_seqs(spark, folder) == list(range(1, 44))
    assert len(staged()) == 1
