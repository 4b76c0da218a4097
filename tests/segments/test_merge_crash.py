"""A merge killed anywhere: readers and the reopened store see every message exactly once."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from itertools import count, pairwise
from pathlib import Path

import pytest

from log.segments import FileStore, StoredMsg, list_segments, read_table
from log.segments.segment import discover, segment_paths, summary_path
from tests.segments.crash_merger import CONFIG, DELETED, MARK, build
from tests.segments.test_merge import check_indexes

ROOT = Path(__file__).resolve().parents[2]
LAST = 33  # 6 sealed segments of 5, then 3 in the active one


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pristine") / "M"
    build(path)
    return path


@pytest.fixture(scope="module")
def expected(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, StoredMsg]:
    copy = tmp_path_factory.mktemp("expected") / "M"
    shutil.copytree(pristine, copy)
    store = FileStore(copy, name="M", config=CONFIG)
    out = live_msgs(store)
    store.close()
    assert sorted(set(range(1, LAST + 1)) - set(out)) == list(DELETED)
    return out


@pytest.fixture(scope="module")
def merged(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder after a whole merge: one segment for seqs 1..20."""
    path = tmp_path_factory.mktemp("merged") / "M"
    shutil.copytree(pristine, path)
    store = FileStore(path, name="M", config=CONFIG)
    store.hold_for_lake(MARK)
    assert store.merge_small() == 3
    store.close()
    return path


def live_msgs(store: FileStore) -> dict[int, StoredMsg]:
    return {s: m for s in range(1, LAST + 2) if (m := store.load(s)) is not None}


def check(path: Path, expected: dict[int, StoredMsg]) -> None:
    """Readers in another process first (they never clean), then the store, reopened twice."""
    infos = list_segments(path)
    assert all(a.last_seq < b.first_seq for a, b in pairwise(infos))
    seqs = read_table(path, include_deleted=True).column("seq").to_pylist()
    assert len(seqs) == len(set(seqs)) and set(expected) <= set(seqs)
    assert read_table(path).column("seq").to_pylist() == sorted(expected)
    for merge in (True, False):
        store = FileStore(path, name="M", config=CONFIG)
        st = store.state()
        assert (st.msgs, st.first_seq, st.last_seq) == (len(expected), 1, LAST)
        assert live_msgs(store) == expected
        assert sum(len(store.seqs_for(n, 0)) for n in store.subjects()) == len(expected)
        check_indexes(store)
        if merge:  # the interrupted merge is done again, or found done
            store.hold_for_lake(MARK)
            store.merge_small()
            assert list_segments(path)[0].last_seq == MARK
        store.close()  # waits for the summaries its worker threads write
        pairs = [segment_paths(path, b, g) for b, g in discover(path, clean=False)]
        kept = {p.name for pair in pairs for p in pair}
        summaries = {summary_path(arrows).name for arrows, _ in pairs}
        names = {p.name for p in path.iterdir() if p.name[0].isdigit()}
        assert kept <= names <= kept | summaries  # leftovers gone


def test_kill_minus_nine_before_each_file_operation_of_a_merge(
    pristine: Path, expected: dict[int, StoredMsg], tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for step in count():
        path = tmp_path / f"step{step}"
        shutil.copytree(pristine, path)
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.segments.crash_merger", str(path), str(step)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env=env,
            text=True,
        )
        assert child.stdout is not None and child.stdin is not None
        try:
            line = child.stdout.readline().strip()
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            child.stdout.close()
            child.stdin.close()
        assert line in (f"step {step}", "done"), line
        check(path, expected)
        if line == "done":
            break
    assert step == 2 + 3 * 4  # two renames, 3 unlinks (summary, data, index) per old segment


def merged_pair(merged: Path) -> tuple[Path, Path]:
    return segment_paths(merged, 1, 1)


@pytest.mark.parametrize(
    "state",
    ["tmp files torn", "merged data without its index", "merged index alone", "merged beside all"],
)
def test_states_a_merge_can_leave(
    state: str, pristine: Path, merged: Path, expected: dict[int, StoredMsg], tmp_path: Path
) -> None:
    """The on-disk states between the first byte written and the first old file unlinked,
    including those a power cut could leave if renames reached the disk out of order."""
    path = tmp_path / "M"
    shutil.copytree(pristine, path)
    arrows, idx = merged_pair(merged)
    if state == "tmp files torn":
        (path / arrows.with_suffix(".tmp").name).write_bytes(arrows.read_bytes()[:300])
        (path / idx.with_suffix(".idx.tmp").name).write_bytes(idx.read_bytes()[:30])
    elif state == "merged data without its index":
        (path / arrows.name).write_bytes(arrows.read_bytes()[:-100])
    elif state == "merged index alone":
        shutil.copy(idx, path)
    else:
        shutil.copy(arrows, path)
        shutil.copy(idx, path)
    check(path, expected)


def test_old_copies_beside_a_merged_segment_since_rewritten(
    pristine: Path, merged: Path, tmp_path: Path
) -> None:
    """A restart removed old copies (not yet durably) and reclaim then rewrote the merged
    segment smaller: if the copies come back, those inside it are dropped, and one past
    its end holds only deleted rows, so it is served as nothing."""
    path = tmp_path / "M"
    shutil.copytree(merged, path)
    store = FileStore(path, name="M", config=CONFIG)
    store.hold_for_lake(MARK)
    store.remove(18)
    assert store.purge("a", upto_seq=21) + store.purge("b", upto_seq=21) == 14
    live = live_msgs(store)
    store.close()
    assert sorted(live)[:4] == [3, 8, 13, 21]  # live at or below the mark: three "c"s
    first = list_segments(path)[0]  # reclaim rewrote the merged segment
    assert int(first.path.name.split(".")[1]) > 1 and first.rows == 3
    for base in (6, 11, 16):  # the old copies the merge absorbed come back
        for p in segment_paths(pristine, base, 0):
            shutil.copy(p, path)
    assert [i.first_seq for i in list_segments(path)][:3] == [3, 16, 21]
    seqs = read_table(path, include_deleted=True).column("seq").to_pylist()
    assert len(seqs) == len(set(seqs))
    assert read_table(path).column("seq").to_pylist() == sorted(live)
    store = FileStore(path, name="M", config=CONFIG)
    assert live_msgs(store) == live
    assert store.state().msgs == len(live)
    check_indexes(store)
    store.close()
