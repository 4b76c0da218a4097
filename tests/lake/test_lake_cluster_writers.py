"""Two compactors on one stream's table: a replicated stream's old and new leader.

The replicas hold the same seqs sealed at different boundaries (each server
seals on its own timer), and both compactors write the one table of a shared
lake dir. Whatever the interleaving, every seq is in the table exactly once.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from log.compactor import compact
from log.compactor.compact import Compactor, lake_progress
from log.compactor.layout import META_FILE, STREAMS, StreamRef, describe_replica, lake_seq
from log.compactor.location import Lake, LakePath
from log.segments import FileStore, NewMsg
from tests.lake.conftest import Folder


class Replica:
    """Another server's copy of `folder`'s stream: same name, incarnation and seqs."""

    def __init__(self, store: Path, folder: Folder, *, leader: bool) -> None:
        self.store = store
        self.dir = store / STREAMS / folder.ref.name
        self.segments = FileStore(self.dir, name=folder.ref.name)
        doc = json.loads((folder.dir / META_FILE).read_bytes())
        describe_replica(self.dir, doc, leader=leader)
        self.ref = StreamRef.load(self.dir)
        self.folder = folder

    def publish(self, count: int) -> None:
        """Copy the next `count` messages of the original replica and seal them here."""
        first = self.segments.state().last_seq + 1
        stored = [self.folder.segments.load(seq) for seq in range(first, first + count)]
        self.segments.append([NewMsg(m.subject, m.hdr, m.data, m.ts) for m in stored if m])
        self.segments.seal(older_than_ns=2**62)
        self.segments.sync()


@pytest.fixture
def replica(tmp_path: Path, folder: Folder) -> Iterator[Replica]:
    made = Replica(tmp_path / "store-b", folder, leader=True)
    yield made
    made.segments.close()


def store_of(folder: Folder) -> Path:
    return folder.dir.parents[3]


def seqs(spark: SparkSession, table: LakePath) -> list[int]:
    rows = spark.read.format("delta").load(table.spark).select("seq").collect()
    return sorted(int(r.seq) for r in rows)


def test_replica_folders_describe_the_same_table(folder: Folder, replica: Replica) -> None:
    assert replica.ref.leads and replica.ref.app_id == folder.ref.app_id
    assert replica.ref.table_path("/lake") == folder.ref.table_path("/lake")
    describe_replica(replica.dir, json.loads((folder.dir / META_FILE).read_bytes()), leader=False)
    assert not StreamRef.load(replica.dir).leads


def test_the_new_leader_continues_from_the_table_and_the_old_one_adds_nothing(
    spark: SparkSession,
    folder: Folder,
    replica: Replica,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lake_dir = tmp_path / "lake"
    table = folder.ref.table_path(lake_dir)
    old = Compactor(spark, store_of(folder), lake_dir)
    folder.publish(60)
    assert old.run_once().rows == 60  # the old leader took 1..60, then lost the lead
    folder.publish(40)
    folder.publish(50)  # its replica sealed 61..100, 101..150
    replica.publish(30)
    replica.publish(120)  # the new leader's sealed 1..30, 31..150: across the table's 60
    new = Compactor(spark, replica.store, lake_dir)
    assert new.run_once().rows == 90
    assert seqs(spark, table) == list(range(1, 151))
    # The deposed leader's pass read the lake's progress (60) before the new leader's
    # commit and appends after it: nothing of that may land, whatever its boundaries.
    monkeypatch.setattr(compact, "lake_progress", lambda table, app_id: 60)
    assert old.run_once().rows == 0
    assert seqs(spark, table) == list(range(1, 151))
    assert lake_seq(folder.ref, lake_dir) == 150  # the shared pin, though this replica's is 60


@pytest.mark.timeout(600)  # on a bucket too: a Delta table's first commits there
def test_two_compactors_racing_commit_each_seq_once(
    spark: SparkSession,
    folder: Folder,
    replica: Replica,
    shared_lake: Lake,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lake_dir = shared_lake
    folder.publish(70)
    replica.publish(45)
    replica.publish(25)
    both_read = threading.Barrier(2, timeout=60)

    def racing(real: Callable[..., None]) -> Callable[..., None]:
        def after_both_read(*args: Any, **kwargs: Any) -> None:
            both_read.wait()  # both compactors have read the table's progress: 0
            real(*args, **kwargs)

        return after_both_read

    # Whichever way the append goes: Spark's, or delta-rs's for a few rows (disk or bucket).
    for name in ("append_after", "append_direct"):
        monkeypatch.setattr(compact, name, racing(getattr(compact, name)))
    results: dict[str, compact.Summary] = {}

    def run(name: str, store: Path) -> None:
        results[name] = Compactor(spark, store, lake_dir).run_once()

    threads = [
        threading.Thread(target=run, args=("a", store_of(folder))),
        threading.Thread(target=run, args=("b", replica.store)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not results["a"].errors and not results["b"].errors
    assert sorted(r.rows for r in results.values()) == [0, 70]  # one won, one lost
    table = folder.ref.table_path(lake_dir)
    assert seqs(spark, table) == list(range(1, 71))
    monkeypatch.undo()
    folder.publish(30)  # the loser, next pass, continues from the winner's 70
    assert Compactor(spark, store_of(folder), lake_dir).run_once().rows == 30
    assert seqs(spark, table) == list(range(1, 101))
    assert lake_progress(table, folder.ref.app_id) == 100


def test_a_follower_replica_is_not_compacted(
    spark: SparkSession, folder: Folder, tmp_path: Path
) -> None:
    follower = Replica(tmp_path / "store-c", folder, leader=False)
    try:
        folder.publish(10)
        follower.publish(10)
        summary = Compactor(spark, follower.store, tmp_path / "lake").run_once()
        assert summary.streams == 0 and summary.rows == 0
    finally:
        follower.segments.close()
