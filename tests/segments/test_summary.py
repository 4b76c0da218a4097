"""Segment summaries: an open that trusts a valid one decodes no sealed segment, and a
torn, damaged or stale one is ignored (the segment is read, the summary written again)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from log.segments import FileStore, SegmentConfig
from log.segments import segment as segment_module
from log.segments.segment import read_entries, summary_path
from log.segments.summary import identity, read_summary
from tests.segments.conftest import msgs
from tests.segments.test_merge import check_indexes, snapshot

CONFIG = SegmentConfig(max_msgs=12)  # sealed segments of 12 rows (3 batches of 4)


def build(path: Path) -> tuple:
    """5 sealed segments (one rewritten by a reclaim) and an active one; headers in some
    batches, deletes of every kind. Returns what an open that reads every segment sees."""
    store = FileStore(path, name="S", config=CONFIG)
    for b in range(16):
        subjects = [f"k.{b % 3}", "c", f"one.{b}", "c"]
        batch = msgs(subjects, ts=b * 100)
        if b % 4:  # whole batches without headers, which restarts skip when scanning
            batch = [m._replace(hdr=None) for m in batch]
        store.append(batch)
    store.remove(7)
    store.purge("c", upto_seq=20)
    store.trim_subjects(["k.1"], 2)
    live = snapshot(store)
    store.close()  # waits for the summaries written in the background
    for arrows in sealed(path):
        summary_path(arrows).unlink()
    before = reopen(path)  # written again on close
    assert before[0] == live
    return before


def headers(store: FileStore) -> list[bool]:
    return [ref.headers for ref in store._refs]


def sealed(path: Path) -> list[Path]:
    return sorted(path.glob("*.arrows"))[:-1]


def valid(arrows: Path) -> bool:
    base, gen = (int(part) for part in arrows.name.split(".")[:2])
    idx = arrows.with_suffix(".idx")
    ident = identity(base, gen, arrows.stat().st_size, idx.read_bytes(), FileStore.overhead)
    rows = sum(entry[4] for entry in read_entries(idx))
    return read_summary(summary_path(arrows), ident, rows) is not None


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the segments an open reads and decodes whole."""
    seen: list[str] = []
    real = segment_module.read_batches

    def counting(arrows: Path, idx: Path) -> tuple:
        seen.append(arrows.name)
        return real(arrows, idx)

    monkeypatch.setattr(segment_module, "read_batches", counting)
    return seen


def reopen(path: Path) -> tuple:
    store = FileStore(path, name="S", config=CONFIG)
    check_indexes(store)
    got = snapshot(store), headers(store)
    store.close()
    return got


def test_an_open_with_summaries_decodes_only_the_active_segment(
    tmp_path: Path, decoded: list[str]
) -> None:
    before = build(tmp_path)
    assert len(sealed(tmp_path)) == 5 and all(valid(p) for p in sealed(tmp_path))
    assert any(not p.name.endswith(".0.arrows") for p in sealed(tmp_path))  # a reclaim's
    assert any(before[1]) and not all(before[1])
    decoded.clear()
    assert reopen(tmp_path) == before
    assert decoded == [sorted(tmp_path.glob("*.arrows"))[-1].name]


def _truncate(path: Path, _other: Path) -> None:
    path.write_bytes(path.read_bytes()[:-9])


def _flip(path: Path, _other: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def _empty(path: Path, _other: Path) -> None:
    path.write_bytes(b"")


def _stale(path: Path, other: Path) -> None:
    """Another segment's summary, whole and well formed, under this one's name."""
    shutil.copyfile(other, path)


@pytest.mark.parametrize("damage", [_truncate, _flip, _empty, _stale])
def test_a_torn_damaged_or_stale_summary_is_ignored_and_written_again(
    tmp_path: Path, decoded: list[str], damage: Callable[[Path, Path], None]
) -> None:
    before = build(tmp_path)
    target, other = (summary_path(p) for p in sealed(tmp_path)[1:3])
    damage(target, other)
    decoded.clear()
    assert reopen(tmp_path) == before
    assert sealed(tmp_path)[1].name in decoded
    assert all(valid(p) for p in sealed(tmp_path))  # the ignored one is valid again
    decoded.clear()
    assert reopen(tmp_path) == before
    assert len(decoded) == 1


def test_a_missing_summary_is_written_at_the_next_open(tmp_path: Path) -> None:
    before = build(tmp_path)
    for arrows in sealed(tmp_path):
        summary_path(arrows).unlink()
    assert reopen(tmp_path) == before
    assert all(valid(p) for p in sealed(tmp_path))


def test_a_corrupt_segment_with_a_valid_summary_is_still_quarantined(tmp_path: Path) -> None:
    build(tmp_path)
    bad = sealed(tmp_path)[2]
    assert valid(bad)
    data = bytearray(bad.read_bytes())
    data[-3] ^= 0x10
    bad.write_bytes(bytes(data))
    store = FileStore(tmp_path, name="S", config=CONFIG)
    assert len(store.corrupt) == 1 and str(bad) in str(store.corrupt[0])
    first = int(bad.name.split(".")[0])
    assert all(store.load(s) is None for s in range(first, first + 12))
    store.close()
