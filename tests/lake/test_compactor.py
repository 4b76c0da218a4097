"""The compactor on the shared session: parallel appends, warming, and what its follower watches."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from log.compactor import compact
from log.compactor.compact import Compactor, lake_progress
from log.compactor.follow import store_state
from log.compactor.layout import default_lake_dir
from tests.lake.conftest import Folder


def compactor(spark: SparkSession, folder: Folder) -> Compactor:
    store = folder.dir.parents[3]
    return Compactor(spark, store, default_lake_dir(store))


def test_a_large_append_is_one_file_per_core_in_seq_order(
    spark: SparkSession, folder: Folder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compact, "SLICE_ROWS", 100)
    monkeypatch.setattr(compact, "DIRECT_ROWS", 0)  # Spark's parallel writer, as a catch-up takes
    folder.publish(1000)
    comp = compactor(spark, folder)
    assert comp.run_once().rows == 1000
    table = DeltaTable(str(folder.ref.table_path(comp.lake_dir)))
    adds = pa.table(table.get_add_actions(flatten=True))
    lows, highs = adds.column("min.seq").to_pylist(), adds.column("max.seq").to_pylist()
    ranges = sorted(zip(lows, highs, strict=True))
    assert ranges == [(1, 500), (501, 1000)]  # local[2]: two slices, one write task each
    assert adds.column("num_records").to_pylist() == [500, 500]
    assert not list(comp.lake_dir.path(compact.STAGING).children())


def test_warm_commits_nothing_and_claims_no_row(spark: SparkSession, folder: Folder) -> None:
    folder.publish(20)
    comp = compactor(spark, folder)
    comp.run_once()
    table = folder.ref.table_path(comp.lake_dir)
    version = DeltaTable(str(table)).version()
    comp.warm()
    assert DeltaTable(str(table)).version() == version
    folder.publish(10)
    assert comp.run_once().rows == 10
    shutil.rmtree(table.uri)  # lost between a pass and the warming after it
    comp.warm()
    assert lake_progress(table, folder.ref.app_id) == 0
    assert comp.run_once().rows == 30  # so the next pass appends everything again


def test_the_follower_sees_seals_and_deletes_not_appends(folder: Folder) -> None:
    store = folder.dir.parents[3]
    folder.publish(10)
    before = store_state(store)
    folder.publish(10, seal=False)
    assert store_state(store) == before  # the active segment grew: nothing for the lake
    folder.segments.seal(older_than_ns=2**62)
    sealed = store_state(store)
    assert sealed != before
    folder.segments.remove(3, explicit=True)
    folder.segments.sync()
    assert store_state(store) != sealed


def test_store_state_skips_a_folder_removed_while_listing(tmp_path: Path) -> None:
    Folder(tmp_path / "store", "GONE").segments.delete()
    assert store_state(tmp_path / "store") == ()
