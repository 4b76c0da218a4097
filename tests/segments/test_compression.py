"""Compressed sealed segments (`compression: s2`): smaller, and still plain Arrow IPC."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from log.segments import FileStore, SegmentConfig
from tests.segments.conftest import msgs


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_sealed_segments_are_compressed_and_readable_directly(tmp_path: Path, codec: str) -> None:
    subjects = [f"orders.{i % 5}" for i in range(3000)]
    plain_dir, packed_dir = tmp_path / "plain", tmp_path / "packed"
    for folder, compression in ((plain_dir, None), (packed_dir, codec)):
        store = FileStore(
            folder, name="S", config=SegmentConfig(max_msgs=1000, compression=compression)
        )
        for start in range(0, 3000, 250):
            store.append(msgs(subjects[start : start + 250], size=200))
        store.seal(older_than_ns=2**62)
        store.close()
    plain = sum(f.stat().st_size for f in plain_dir.glob("*.arrows"))
    packed = sum(f.stat().st_size for f in packed_dir.glob("*.arrows"))
    assert packed < plain / 2, (plain, packed)
    files = sorted(packed_dir.glob("*.arrows"))
    segments = pa.concat_tables(pa.ipc.open_stream(pa.memory_map(str(f))).read_all() for f in files)
    assert segments.num_rows == 3000
    rows = duckdb.sql("select min(seq), max(seq), count(distinct subject) from segments").fetchall()
    assert rows == [(1, 3000, 5)]
    reopened = FileStore(packed_dir, name="S", config=SegmentConfig(compression=codec))
    got = reopened.load(1234)
    assert got is not None and got.subject == "orders.3"
    assert got.data == msgs(subjects[1000:1250], size=200)[233].data
    reopened.close()


def test_a_segment_with_rows_the_lake_lacks_is_not_rewritten(tmp_path: Path) -> None:
    """Deleted rows above the lake's mark must stay on disk for the lake: no compression then."""
    store = FileStore(tmp_path, name="S", config=SegmentConfig(compression="zstd"))
    store.hold_for_lake(0)
    store.append(msgs(["a"] * 100, size=200))
    store.remove(5)
    before = sorted(p.name for p in tmp_path.glob("*.arrows"))
    store.seal(older_than_ns=2**62)
    assert sorted(p.name for p in tmp_path.glob("*.arrows"))[0] == before[0]
    store.close()


def test_compression_follows_set_compression(tmp_path: Path) -> None:
    store = FileStore(tmp_path, name="S", config=SegmentConfig())
    store.append(msgs(["a"] * 500, size=300))
    store.seal(older_than_ns=2**62)
    plain = sum(f.stat().st_size for f in tmp_path.glob("*.arrows"))
    store.set_compression("zstd")
    store.append(msgs(["a"] * 500, size=300))
    store.seal(older_than_ns=2**62)
    both = sum(f.stat().st_size for f in tmp_path.glob("*.arrows"))
    assert both - plain < plain / 2
    store.close()
