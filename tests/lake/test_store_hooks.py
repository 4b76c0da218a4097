"""The segment store's hooks for the lake: why a message went, reclaim held, seal on a timer."""

from __future__ import annotations

import os
from pathlib import Path

from log.segments import FileStore, SegmentConfig, list_segments
from log.segments.filestore import EXPLICIT
from log.segments.tombstones import Erasure, replay_explicit
from tests.segments.conftest import msgs

SMALL = SegmentConfig(max_msgs=10)


def test_only_explicit_deletes_are_logged_for_the_lake(tmp_path: Path) -> None:
    store = FileStore(tmp_path, name="S", config=SMALL)
    store.append(msgs(["a", "b"] * 25))
    store.remove(3)  # a limit (say max_bytes): retention
    store.remove(4, explicit=True)  # STREAM.MSG.DELETE
    store.purge("a", upto_seq=11, explicit=True)  # covers "a" below 11, retired ones too
    store.purge("b", keep=20)  # per-subject limit: retention (2, 6, 8, 10)
    store.purge(">", upto_seq=45, explicit=True)  # everything below 45
    store.purge("a.*", explicit=True)  # nothing live matches: still logged for the lake
    erasures, end = replay_explicit(tmp_path / EXPLICIT)
    assert erasures == [
        Erasure(4, 4),
        Erasure(1, 10, "a"),
        Erasure(1, 44),
        Erasure(1, 50, "a.*"),
    ]
    assert replay_explicit(tmp_path / EXPLICIT, end) == ([], end)
    store.close()
    reopened = FileStore(tmp_path, name="S", config=SMALL)
    reopened.remove(50, explicit=True)
    assert replay_explicit(tmp_path / EXPLICIT, end)[0] == [Erasure(50, 50)]
    reopened.close()


def test_a_torn_erasure_ends_the_replay(tmp_path: Path) -> None:
    store = FileStore(tmp_path, name="S", config=SMALL)
    store.append(msgs(["a.x", "b"] * 5))
    store.purge("a.*", explicit=True)
    store.remove(2, explicit=True)
    store.close()
    whole = (tmp_path / EXPLICIT).read_bytes()
    for cut in range(1, len(whole)):
        (tmp_path / EXPLICIT).write_bytes(whole[:cut])
        erasures, end = replay_explicit(tmp_path / EXPLICIT)
        first = len(whole) - 24  # the purge's record, then the delete's (8 + 16 bytes)
        assert (erasures, end) == (([Erasure(1, 10, "a.*")], first) if cut >= first else ([], 0))


def test_reclaim_waits_for_the_lake(tmp_path: Path) -> None:
    store = FileStore(tmp_path, name="S", config=SMALL)
    store.hold_for_lake(0)
    store.append(msgs(["x"] * 10))
    store.append(msgs(["x"] * 10))
    store.append(msgs(["x"] * 5))
    assert store.purge(">", upto_seq=21) == 20  # retention retires both sealed segments
    assert [s.first_seq for s in list_segments(tmp_path)] == [1, 11, 21]  # kept for the lake
    assert store.ts_after(0) == 1000  # the oldest row the lake lacks is still readable
    store.hold_for_lake(10)  # the lake took the first segment
    assert [s.first_seq for s in list_segments(tmp_path)] == [11, 21]
    store.hold_for_lake(None)  # lake off for the stream: reclaim freely
    assert [s.first_seq for s in list_segments(tmp_path)] == [21]
    store.close()


def test_seal_on_a_timer(tmp_path: Path) -> None:
    store = FileStore(tmp_path, name="S", config=SMALL)
    assert not store.seal(older_than_ns=10**18)  # nothing to seal
    store.append(msgs(["x"] * 3, ts=5_000))
    assert not store.seal(older_than_ns=4_999)  # not old enough yet
    assert store.sealed_last_seq == 0
    assert store.seal(older_than_ns=5_000)
    assert store.sealed_last_seq == 3
    store.append(msgs(["x"] * 2, ts=9_000))
    assert [(s.first_seq, s.last_seq, s.sealed) for s in list_segments(tmp_path)] == [
        (1, 3, True),
        (4, 5, False),
    ]
    store.close()
    reopened = FileStore(tmp_path, name="S", config=SMALL)
    assert reopened.state().msgs == 5 and reopened.load(4).ts == 9_000
    reopened.close()


def test_sealed_segments_hold_no_descriptors(tmp_path: Path) -> None:
    """Sealing every few seconds makes thousands of segments: they must not cost a fd each."""
    open_fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    before = open_fds()
    store = FileStore(tmp_path, name="S", config=SMALL)
    for k in range(300):
        store.append(msgs(["x"], ts=k))
        assert store.seal(older_than_ns=k)
    assert open_fds() - before < 10
    assert store.load(1).ts == 0 and store.load(300).ts == 299  # reads reopen the files
    store.close()
    reopened = FileStore(tmp_path, name="S", config=SMALL)
    assert open_fds() - before < 10 and reopened.state().msgs == 300
    reopened.close()
