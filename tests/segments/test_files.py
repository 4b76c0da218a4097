"""Segment files as others see them: sealing, reclaim, pyarrow and DuckDB readers."""

from __future__ import annotations

import os
import threading
from itertools import pairwise
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from log.segments import SCHEMA, FileStore, MemoryStore, SegmentConfig, list_segments, read_table
from log.segments.segment import read_entries
from tests.segments.conftest import msgs


def open_store(path: Path, **config: int) -> FileStore:
    return FileStore(path, name="S", config=SegmentConfig(**config))


def test_seals_by_size_count_and_age(tmp_path: Path) -> None:
    by_size = open_store(tmp_path / "a", max_bytes=1000)  # one batch (~900 bytes) fills it
    by_count = open_store(tmp_path / "b", max_msgs=10)
    by_age = open_store(tmp_path / "c", max_age_ns=1_000)
    for b in range(6):
        for store in (by_size, by_count):
            store.append(msgs(["x"] * 5, size=100))
        by_age.append(msgs(["x"] * 5, ts=b * 600))
    for store, segments in ((by_size, 6), (by_count, 3), (by_age, 3)):
        store.close()
        infos = list_segments(store.dir)
        assert len(infos) == segments
        assert [i.sealed for i in infos] == [True] * (segments - 1) + [False]
        assert infos[0].first_seq == 1 and infos[-1].last_seq == 30
        assert sum(i.rows for i in infos) == 30
        assert all(a.last_seq + 1 == b.first_seq for a, b in pairwise(infos))


def test_reclaim_rewrites_half_dead_and_drops_dead_segments(tmp_path: Path) -> None:
    store = open_store(tmp_path, max_msgs=20)
    for _ in range(4):
        store.append(msgs(["keep", "drop"] * 5))  # segments: 1-20, 21-40, active
    store.append(msgs(["tail"]))
    before = {i.path.name: i.bytes for i in list_segments(tmp_path)}
    assert store.purge("drop") == 20
    infos = list_segments(tmp_path)
    assert [i.path.name.split(".")[1] for i in infos] == ["1", "1", "0"]  # rewritten
    assert all(i.bytes < before[i.path.name.replace(".1.", ".0.")] for i in infos[:2])
    assert store.purge("keep", upto_seq=21) == 10
    assert len(list_segments(tmp_path)) == 2  # the first one is gone
    for _ in range(2):
        st = store.state()
        assert (st.msgs, st.first_seq, st.last_seq) == (11, 21, 41)
        assert [m.seq for m in map(store.load, range(1, 42)) if m] == [*range(21, 41, 2), 41]
        assert list(store.seqs_for("keep", 0)) == list(range(21, 41, 2))
        assert store.load(21).subject == "keep" and store.load(22) is None
        store.close()
        store = open_store(tmp_path, max_msgs=20)
    store.close()


def test_memory_store_reclaims_batches() -> None:
    store = MemoryStore(name="S")
    for _ in range(4):
        store.append(msgs(["a", "b"] * 20))
    store.purge("b")
    store.purge(upto_seq=41)
    assert len(store._refs) == 3 and all(r.rows == 20 for r in store._refs)
    assert list(store.seqs_for(">", 0)) == list(range(41, 161, 2))


def test_readable_with_pyarrow_and_duckdb_while_open(tmp_path: Path) -> None:
    store = open_store(tmp_path, max_msgs=20)
    for b in range(5):
        store.append(msgs([f"s.{b}"] * 10))
    store.remove(3)
    store.purge("s.4")
    paths = [i.path for i in list_segments(tmp_path)]
    assert len(paths) == 3
    tables = [pa.ipc.open_stream(p).read_all() for p in paths]  # plain pyarrow, while open
    assert all(t.schema == SCHEMA for t in tables)
    assert pa.concat_tables(tables).column("seq").to_pylist() == list(range(1, 51))

    live = read_table(tmp_path)
    assert live.schema == SCHEMA
    assert live.column("seq").to_pylist() == [s for s in range(1, 41) if s != 3]
    assert read_table(tmp_path, include_deleted=True).num_rows == 50
    rows = duckdb.sql("select subject, count(*) n from live group by 1 order by 1").fetchall()
    assert rows == [("s.0", 9), ("s.1", 10), ("s.2", 10), ("s.3", 10)]
    first = duckdb.sql("select data from live where seq = 1").fetchall()
    assert first == [(store.load(1).data,)]

    with open(paths[-1], "ab") as f:  # a write in progress: half a batch on disk
        f.write(b"\xff\xff\xff\xff\x10\x01\x00\x00partial")
    assert read_table(tmp_path).num_rows == 39
    store.close()


def test_sync_from_a_worker_thread_while_appending(tmp_path: Path) -> None:
    store = open_store(tmp_path, max_msgs=50)
    stop = threading.Event()
    syncs = 0

    def syncer() -> None:
        nonlocal syncs
        while not stop.is_set():
            store.sync()
            syncs += 1

    worker = threading.Thread(target=syncer)
    worker.start()
    try:
        for b in range(200):
            store.append(msgs([f"t.{b % 7}"] * 10))
    finally:
        stop.set()
        worker.join()
    assert syncs > 0
    store.close()
    store = open_store(tmp_path, max_msgs=50)
    assert store.state().msgs == 2000 and len(list_segments(tmp_path)) == 40
    assert all(store.load(s).seq == s for s in range(1, 2001, 37))
    assert sum(len(read_entries(p)) for p in tmp_path.glob("*.idx")) == 200
    store.close()


def test_read_table_after_seq_skips_only_segments_wholly_below(tmp_path: Path) -> None:
    """The union read skips what the lake holds; a straddling segment is read whole."""
    store = FileStore(tmp_path, name="S", config=SegmentConfig(max_msgs=10))
    for i in range(7):
        store.append(msgs([f"s.{i}"] * 5))  # segments 1-10, 11-20, 21-30, active 31-35
    store.sync()
    seqs = {
        after: read_table(tmp_path, after_seq=after).column("seq").to_pylist()
        for after in (0, 10, 15, 30, 35)
    }
    assert seqs[0] == list(range(1, 36))
    assert seqs[10] == list(range(11, 36))
    assert seqs[15] == list(range(11, 36))  # 11-20 straddles 15: read, caller filters
    assert seqs[30] == list(range(31, 36))
    assert seqs[35] == list(range(31, 36))  # the active segment is always read
    store.close()


def test_a_new_store_syncs_its_directory_with_its_first_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening an empty store waits for no fsync (a stream's create fsyncs the folder
    with its config); its first sync makes the segment's entry durable, a roll at once."""
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    store = open_store(tmp_path, max_msgs=5)
    assert synced == []
    store.append(msgs(["x"] * 2))
    store.sync()
    assert synced.count(str(tmp_path)) == 1
    store.sync()
    assert synced.count(str(tmp_path)) == 1  # once: nothing new in the directory
    store.append(msgs(["x"] * 5))  # fills the segment: the next append rolls
    store.append(msgs(["x"]))
    assert synced.count(str(tmp_path)) == 2
    store.close()
