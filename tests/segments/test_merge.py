"""Merging small sealed segments: the policy (pure), then real files through the store."""

from __future__ import annotations

import logging
import math
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import pytest

from log.segments import FileStore, SegmentConfig, list_segments, read_segment, read_table
from log.segments import segment as segment_module
from log.segments.merging import plan_merge
from log.segments.segment import discover
from tests.segments.conftest import msgs
from tests.segments.test_recovery import flip

MIB = 1024 * 1024
CFG = SegmentConfig()


class P(NamedTuple):
    """A segment as the policy sees it."""

    size: int
    rows: int = 10
    batches: int = 1
    min_ts: int = 0


# -- the policy ----------------------------------------------------------------------


def test_waits_for_enough_segments() -> None:
    assert plan_merge([P(1000)] * 15, CFG) is None
    assert plan_merge([P(1000)] * 16, CFG) == slice(0, 16)
    assert plan_merge([P(1000)] * 300, CFG) == slice(0, 256)  # files per merge are bounded


def test_a_full_run_needs_fewer_segments() -> None:
    assert plan_merge([P(4 * MIB)] * 4, CFG) is None  # 16 MiB, but the next may still come
    assert plan_merge([P(4 * MIB)] * 5, CFG) == slice(0, 4)  # the 5th does not fit: full
    batches = [P(1000, batches=3000)] * 3
    assert plan_merge(batches, CFG) == slice(0, 2)  # 6000 batches; 9000 would pass 8192
    rows = [P(1000, rows=400_000)] * 3
    assert plan_merge(rows, CFG) == slice(0, 2)
    hour = 3600 * 10**9
    aged = [P(1000, min_ts=k * hour // 4) for k in range(6)]
    assert plan_merge(aged, CFG) == slice(0, 4)  # a merged segment spans under max_age


def test_a_segment_no_run_can_hold_is_a_wall() -> None:
    wall = P(1000, batches=9000)
    assert plan_merge([P(1000), P(1000), wall], CFG) is None  # not "full": nothing fits it
    assert plan_merge([P(1000), wall, *[P(1000)] * 16], CFG) == slice(2, 18)
    assert plan_merge([P(20 * MIB), *[P(1000)] * 16], CFG) == slice(1, 17)


def test_a_big_segment_is_not_rewritten_for_crumbs() -> None:
    assert plan_merge([P(2 * MIB), *[P(1000)] * 20], CFG) == slice(1, 21)
    assert plan_merge([P(20_000), *[P(1000)] * 19], CFG) == slice(1, 20)
    assert plan_merge([P(20_000), *[P(1000)] * 20], CFG) == slice(0, 21)  # 20,000 <= the rest


@pytest.mark.parametrize(("seal_bytes", "batches"), [(2_000, 1), (240_000, 20), (64_000, 100)])
def test_an_hour_of_two_second_seals(seal_bytes: int, batches: int) -> None:
    """The tick's loop in miniature: few files stay, and each row is rewritten O(log) times."""
    pieces: list[P] = []
    rewrites: list[list[int]] = []  # per piece: times each of its seals was rewritten
    for k in range(1800):
        pieces.append(P(seal_bytes, rows=batches, batches=batches, min_ts=k * 2 * 10**9))
        rewrites.append([0])
        for _ in range(2):  # two ticks a seal, one merge a tick at most
            run = plan_merge(pieces, CFG)
            if run is None:
                continue
            merged = P(
                sum(p.size for p in pieces[run]),
                sum(p.rows for p in pieces[run]),
                max(1, math.ceil(sum(p.rows for p in pieces[run]) / CFG.rewrite_batch_rows)),
                pieces[run][0].min_ts,
            )
            pieces[run] = [merged]
            rewrites[run] = [[n + 1 for r in rewrites[run] for n in r]]
    assert len(pieces) < 64
    worst = max(n for r in rewrites for n in r)
    assert worst <= math.log2(CFG.merge_target_bytes / seal_bytes) + 1


# -- the store -----------------------------------------------------------------------


def build(path: Path, segments: int, config: SegmentConfig = CFG) -> FileStore:
    """`segments` sealed segments of 5 messages (subjects a, b, c), an active one of 3."""
    store = FileStore(path, name="S", config=config)
    store.hold_for_lake(0)
    for k in range(segments):
        store.append(msgs(["a", "b", "c", "a", "b"], ts=k * 100))
        assert store.seal(older_than_ns=10**19)
    store.append(msgs(["tail"] * 3, ts=segments * 100))
    return store


def snapshot(store: FileStore) -> tuple:
    st = store.state(with_deleted=True)
    names = store.subjects()
    return (
        st,
        [store.load(s) for s in range(st.first_seq - 1, st.last_seq + 2)],
        names,
        {
            n: (list(store.seqs_for(n, 0)), store.subject_state(n), store.load_last(n))
            for n in names
        },
        walk(store),
        store.load_next(1, "c"),
    )


def walk(store: FileStore) -> list:
    """Every live message as a consumer reads them: a batch at a time (batches differ)."""
    out, seq = [], 1
    while run := store.load_run(seq, store.state().last_seq, 7):
        out += run
        seq = run[-1].seq + 1
    return out


def check_indexes(store: FileStore) -> None:
    assert store._firsts == [r.first for r in store._refs]
    assert all(a.last < b.first for a, b in pairwise(store._refs))
    assert [r for seg in store._segments for r in seg.refs] == store._refs


def files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.glob("*.arrows"))}


def test_merge_keeps_every_message_and_drops_deleted_rows(tmp_path: Path) -> None:
    store = build(tmp_path, 40)  # seqs 1..200 sealed, 201..203 active
    store.remove(7)
    assert store.purge("c", upto_seq=60) == 12
    store.remove(180)  # above the mark: stays on disk for the lake
    store.hold_for_lake(150)  # the lake has the first 30 segments
    assert [store.load(s) for s in (1, 2, 3)]  # fills the batch cache with soon-stale refs
    before, disk = snapshot(store), files(tmp_path)
    newer = {n: b for n, b in disk.items() if int(n.split(".")[0]) > 150}
    assert store.merge_small() == 29
    assert store.merge_small() == 0  # what is left is above the mark or too few
    infos = list_segments(tmp_path)
    assert len(infos) == 12 and len(disk) == 41
    assert (infos[0].first_seq, infos[0].last_seq) == (1, 150)
    assert infos[0].path.name == f"{1:020d}.1.arrows"  # the first base, a newer generation
    assert {n: b for n, b in files(tmp_path).items() if n != infos[0].path.name} == newer
    merged = read_segment(infos[0]).column("seq").to_pylist()
    dead = {7, *range(3, 61, 5)}
    assert merged == [s for s in range(1, 151) if s not in dead]
    assert 180 in read_table(tmp_path, include_deleted=True).column("seq").to_pylist()
    assert snapshot(store) == before
    check_indexes(store)
    store.close()
    store = FileStore(tmp_path, name="S")
    assert snapshot(store) == before
    check_indexes(store)
    assert store.append(msgs(["after"])) == 204
    store.close()


def test_merge_never_passes_the_lake_mark(tmp_path: Path) -> None:
    store = build(tmp_path, 40)
    assert store.merge_small() == 0  # the lake has nothing yet
    store.hold_for_lake(152)  # inside the 31st segment (151..155): it stays whole
    assert store.merge_small() == 29
    assert [(i.first_seq, i.last_seq) for i in list_segments(tmp_path)][:2] == [
        (1, 150),
        (151, 155),
    ]
    store.hold_for_lake(200)  # the lake took the rest, but 11 segments are too few
    assert store.merge_small() == 0
    for k in range(40, 60):  # the first takes the 3 tail messages too: 201..208
        store.append(msgs(["d"] * 5, ts=k * 100))
        store.seal(older_than_ns=10**19)
    store.hold_for_lake(store.sealed_last_seq)
    assert store.merge_small() == 30
    first = list_segments(tmp_path)[0]
    assert (first.first_seq, first.last_seq, first.path.name) == (1, 303, f"{1:020d}.2.arrows")
    assert store.state().msgs == 303
    store.close()


def test_with_the_lake_off_every_sealed_segment_merges_but_never_the_active(
    tmp_path: Path,
) -> None:
    store = build(tmp_path, 20)
    store.hold_for_lake(None)
    active = sorted(tmp_path.glob("*.arrows"))[-1]
    data = active.read_bytes()
    assert store.merge_small() == 19
    assert [(i.first_seq, i.last_seq, i.sealed) for i in list_segments(tmp_path)] == [
        (1, 100, True),
        (101, 103, False),
    ]
    assert active.read_bytes() == data
    assert store.append(msgs(["x"])) == 104  # the active segment is still the one written
    assert active.read_bytes() != data
    store.close()


def test_a_wholly_deleted_run_just_goes(tmp_path: Path) -> None:
    store = build(tmp_path, 20)
    store.purge(">", upto_seq=101)  # the lake has none of it yet: nothing reclaimed
    store.close()
    store = FileStore(tmp_path, name="S")  # nothing remembers them for reclaim now
    store.hold_for_lake(100)
    assert len(list_segments(tmp_path)) == 21
    assert store.merge_small() == 20  # and no file written: every row was dead
    assert [(i.first_seq, i.last_seq) for i in list_segments(tmp_path)] == [(101, 103)]
    assert store.state().msgs == 3 and store.load(101).subject == "tail"
    store.close()


def test_reclaim_still_works_on_a_merged_segment(tmp_path: Path) -> None:
    store = build(tmp_path, 20)
    store.hold_for_lake(100)
    store.merge_small()
    assert store.purge("a", upto_seq=90) + store.purge("b", upto_seq=90) > 50
    (first, *_rest) = list_segments(tmp_path)
    assert first.path.name == f"{1:020d}.2.arrows" and first.rows < 50
    before = snapshot(store)
    store.close()
    store = FileStore(tmp_path, name="S")
    assert snapshot(store) == before
    store.close()


def test_no_merge_spans_a_corrupt_segment(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = SegmentConfig(merge_min_segments=4)
    build(tmp_path, 10, config).close()
    bad = sorted(tmp_path.glob("*.arrows"))[4]  # seqs 21..25
    flip(bad, bad.stat().st_size - 3)
    raw = bad.read_bytes()
    with caplog.at_level(logging.ERROR, "jetlake.segments"):
        store = FileStore(tmp_path, name="S", config=config)
    store.hold_for_lake(None)
    assert store.merge_small() == 3 and store.merge_small() == 4 and store.merge_small() == 0
    assert [(i.first_seq, i.last_seq) for i in list_segments(tmp_path)] == [
        (1, 20),
        (21, 25),
        (26, 50),
        (51, 53),
    ]
    assert bad.read_bytes() == raw  # left for an operator to restore
    assert all(store.load(s) is None for s in range(21, 26)) and store.state().msgs == 48
    store.close()


def test_a_batch_that_rots_after_open_stops_only_its_segment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = SegmentConfig(merge_min_segments=4)
    store = build(tmp_path, 10, config)
    store.hold_for_lake(None)
    bad = sorted(tmp_path.glob("*.arrows"))[1]
    flip(bad, bad.stat().st_size - 3)
    before = files(tmp_path)
    with caplog.at_level(logging.ERROR, "jetlake.segments"):
        assert store.merge_small() == 0
    assert str(bad) in caplog.text and files(tmp_path) == before
    assert store.merge_small() == 7  # the 8 after it; the one before it is alone
    assert len(list_segments(tmp_path)) == 4
    store.close()


def test_the_lake_tick_merges(tmp_path: Path) -> None:
    """The supervisor's hook: hold at the pin, seal, then merge what the lake has."""
    from ingest.server.lake import LakeSupervisor
    from ingest.server.settings import LakeConfig
    from log.compactor.layout import STREAMS, Pin, write_pin
    from log.config import StreamConfig

    sup = LakeSupervisor(LakeConfig(enabled=True, compact_interval=0))
    sup.store_base = tmp_path
    store = build(tmp_path / STREAMS / "S", 20)
    stream = SimpleNamespace(store=store, config=StreamConfig(name="S"), created_ns=1)
    engine = SimpleNamespace(account="$G", streams={"S": stream})
    sup._engines = lambda: [engine]  # type: ignore[assignment,list-item]
    ref = sup._ref("$G", stream)  # type: ignore[arg-type]
    sup.tick()  # seals the active segment (its first message is old), merges nothing
    assert len(list_segments(ref.dir)) == 22  # no pin: the lake has nothing
    write_pin(ref, Pin(ref.app_id, "t", 100))
    sup.tick()
    assert [(i.first_seq, i.last_seq) for i in list_segments(ref.dir)][:2] == [(1, 100), (101, 103)]
    assert sup.lags["S"].messages == 3  # seqs 101..103
    store.close()


# -- discovery -----------------------------------------------------------------------


def test_listing_reads_an_index_only_where_the_generation_drops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = build(tmp_path, 40, SegmentConfig(merge_min_segments=4))
    store.hold_for_lake(None)
    while store.merge_small():
        pass
    store.close()
    gens = [g for _b, g in discover(tmp_path, clean=False)]
    drops = sum(a > b for a, b in pairwise(gens))
    assert drops >= 1
    reads: list[Path] = []
    real = segment_module.read_entries
    monkeypatch.setattr(segment_module, "read_entries", lambda p: reads.append(p) or real(p))
    discover(tmp_path, clean=False)
    assert len(reads) == drops


def test_listing_again_when_a_file_vanishes_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = build(tmp_path, 20)
    store.hold_for_lake(None)
    store.merge_small()
    store.close()
    real = segment_module.read_entries
    calls = []

    def racing(idx: Path) -> list[tuple]:
        calls.append(idx)
        if len(calls) == 1:
            raise FileNotFoundError(idx)  # a rewrite replaced it between listing and reading
        return real(idx)

    monkeypatch.setattr(segment_module, "read_entries", racing)
    assert len(discover(tmp_path, clean=False)) == 2 and len(calls) == 2
    assert read_table(tmp_path).num_rows == 103
