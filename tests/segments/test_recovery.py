"""Crash damage at open: torn or flipped tails are cut, corrupt sealed segments quarantined."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from log.segments import CorruptSegmentError, FileStore, SegmentConfig, read_table
from log.segments.segment import read_entries
from tests.segments.conftest import msgs

BIG = SegmentConfig()
PER = 5


def build(path: Path, batches: int, config: SegmentConfig = BIG) -> list[bytes]:
    store = FileStore(path, name="S", config=config)
    for b in range(batches):
        store.append(msgs([f"s.{b}"] * PER, ts=b * 100))
    store.close()
    return sorted(p.name for p in path.glob("*.arrows"))  # type: ignore[return-value]


def entries(path: Path) -> list[tuple]:
    (idx,) = sorted(path.glob("*.idx"))[-1:]
    return read_entries(idx)


def active(path: Path) -> Path:
    return sorted(path.glob("*.arrows"))[-1]


def check_reopen(path: Path, kept: int, numbered: int) -> None:
    """`kept` messages survive the cut; seqs up to `numbered` (indexed once) are never reused."""
    store = FileStore(path, name="S")
    st = store.state()
    gaps = numbered - kept if kept else 0  # an empty stream has no interior gaps
    assert (st.msgs, st.last_seq, st.num_deleted) == (kept, numbered, gaps)
    assert store.append(msgs(["after"])) == numbered + 1
    store.close()
    store = FileStore(path, name="S")
    assert store.load(numbered + 1).subject == "after"
    assert [store.load(s).seq for s in range(1, kept + 1)] == list(range(1, kept + 1))
    assert all(store.load(s) is None for s in range(kept + 1, numbered + 1))
    store.close()


def test_torn_tail_at_every_offset_of_the_last_batches(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    original = tmp_path / "orig"
    build(original, 4)
    ents = entries(original)
    start = ents[-2][0]
    end = ents[-1][0] + ents[-1][1]
    for cut in range(start, end, 7):
        path = tmp_path / f"cut{cut}"
        shutil.copytree(original, path)
        with open(active(path), "r+b") as f:
            f.truncate(cut)
        kept = sum(1 for e in ents if e[0] + e[1] <= cut)
        caplog.clear()
        with caplog.at_level(logging.WARNING, "jetlake.segments"):
            check_reopen(path, kept * PER, ents[-1][3])
        good = ents[kept][0] if kept < len(ents) else end
        assert f"{active(path)}" in caplog.text and f"at byte {good}" in caplog.text


def test_torn_index_entry(tmp_path: Path) -> None:
    build(tmp_path, 3)
    idx = sorted(tmp_path.glob("*.idx"))[-1]
    with open(idx, "r+b") as f:
        f.truncate(idx.stat().st_size - 10)
    check_reopen(tmp_path, 2 * PER, 2 * PER)  # the torn entry cannot vouch for its seqs


@pytest.mark.parametrize("where", ["header", "first", "middle", "last"])
def test_flipped_byte_in_active_segment(tmp_path: Path, where: str) -> None:
    build(tmp_path, 4)
    ents = entries(tmp_path)
    pos, kept = {
        "header": (3, 0),
        "first": (ents[0][0] + 5, 0),
        "middle": (ents[2][0] + ents[2][1] // 2, 2),
        "last": (ents[3][0] + ents[3][1] - 1, 3),
    }[where]
    flip(active(tmp_path), pos)
    check_reopen(tmp_path, kept * PER, ents[-1][3])


def flip(path: Path, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x10]))


def test_corrupt_sealed_segment_is_reported_and_never_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = SegmentConfig(max_msgs=2 * PER)
    build(tmp_path, 6, config)  # segments of 2 batches: 1-10, 11-20, 21-30
    sealed = sorted(tmp_path.glob("*.arrows"))[1]
    flip(sealed, sealed.stat().st_size - 3)
    for _ in range(2):  # reported again at every open
        caplog.clear()
        with caplog.at_level(logging.ERROR, "jetlake.segments"):
            store = FileStore(tmp_path, name="S", config=config)
        assert len(store.corrupt) == 1 and str(sealed) in str(store.corrupt[0])
        assert str(sealed) in caplog.text
        assert all(store.load(s) is None for s in range(11, 21))
        assert store.load_next(11).seq == 21 and store.load(10).seq == 10
        st = store.state()
        assert (st.msgs, st.num_deleted, st.last_seq) == (20, 10, 30)
        assert 15 not in list(store.seqs_for("s.*", 0))
        assert not store.remove(15)
        store.close()
    with pytest.raises(CorruptSegmentError):
        read_table(tmp_path)
    assert read_table(tmp_path, skip_corrupt=True).num_rows == 20


def test_restored_segment_is_served_again(tmp_path: Path) -> None:
    config = SegmentConfig(max_msgs=2 * PER)
    build(tmp_path, 6, config)
    sealed = sorted(tmp_path.glob("*.arrows"))[0]
    backup = sealed.read_bytes()
    flip(sealed, len(backup) - 3)
    store = FileStore(tmp_path, name="S", config=config)
    assert store.state().msgs == 20
    store.remove(25)  # forces the delete log through a write
    store.close()
    sealed.write_bytes(backup)
    store = FileStore(tmp_path, name="S", config=config)
    assert store.state().msgs == 29 and store.load(3) is not None
    store.close()


def test_torn_delete_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    build(tmp_path, 3)
    store = FileStore(tmp_path, name="S")
    store.remove(4)
    store.remove(7)
    store.close()
    log = tmp_path / "tombstones.log"
    with open(log, "r+b") as f:
        f.truncate(log.stat().st_size - 3)
    with caplog.at_level(logging.WARNING, "jetlake.segments"):
        store = FileStore(tmp_path, name="S")
    assert "tombstones.log" in caplog.text
    assert store.load(4) is None and store.load(7) is not None
    store.close()


def test_a_replicated_store_numbers_a_cut_tail_again(tmp_path: Path) -> None:
    """Behind a Raft log the cut seqs are applied again, so they must not stay unused:
    the replica would hold holes where the log (and every other replica) has messages."""
    build(tmp_path, 3)
    ents = entries(tmp_path)
    with open(active(tmp_path), "r+b") as f:
        f.truncate(ents[-1][0] + 3)  # tear the last batch
    refill = SegmentConfig(refill_from_log=True)
    store = FileStore(tmp_path, name="S", config=refill)
    kept = 2 * PER
    st = store.state()
    assert (st.msgs, st.last_seq, st.num_deleted) == (kept, kept, 0)
    assert store.append(msgs(["again"] * PER)) == kept + 1  # the log's next entry
    store.close()
    store = FileStore(tmp_path, name="S", config=refill)
    assert [store.load(s).subject for s in range(kept + 1, kept + PER + 1)] == ["again"] * PER
    store.close()
