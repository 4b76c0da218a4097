"""The durable consumer state: snapshot plus an append-only log of per-turn frames."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest

from log.consumers import store as cstore
from log.consumers.store import (
    ACKED,
    ASIDE_FILE,
    DELIVERED,
    GAVE_UP,
    LOG_FILE,
    POSITION,
    STATE_FILE,
    ConsumerStore,
    consumers_dir,
    load_all,
    load_state,
    replay,
)
from log.state_file import read_state

BASE = {
    "dseq": 1,
    "sseq": 1,
    "adflr": 0,
    "asflr": 0,
    "pending": [],
    "redelivered": [],
    "lps": [1, 4],
    "lps_resume": 9,
    "last_delivered": 0,
    "last_acked": 0,
}


def _turn(*records: tuple[int, ...]) -> array:
    out = array("q")
    for record in records:
        out.extend(record)
    return out


def test_log_frames_replay_over_the_snapshot_and_a_torn_tail_is_ignored(tmp_path: Path) -> None:
    store = ConsumerStore(consumers_dir(tmp_path) / "d", sync_interval_ns=10**7)
    store.save_meta({"durable_name": "d"}, "2024-01-01T00:00:00Z")
    store.save_state(BASE)
    store.append(
        _turn((DELIVERED, 1, 1, 1, 10), (DELIVERED, 4, 2, 1, 11), (POSITION, 3, 5, 0, 0, 11, 0))
    )
    store.append(_turn((ACKED, 1), (DELIVERED, 4, 3, 2, 12), (POSITION, 4, 5, 1, 1, 12, 12)))
    store.append(_turn((GAVE_UP, 4), (POSITION, 4, 5, 3, 4, 12, 12)))
    store.close()
    with open(store.folder / LOG_FILE, "ab") as f:
        f.write(b"\x20\x00\x00\x00torn")
    (saved,) = load_all(tmp_path)
    state = saved.state
    assert state is not None
    assert (state["dseq"], state["sseq"], state["adflr"], state["asflr"]) == (4, 5, 3, 4)
    assert state["pending"] == [] and state["redelivered"] == [[4, 2]]
    assert state["lps"] == [] and state["last_acked"] == 12


def test_replaying_a_log_the_snapshot_already_contains_changes_nothing(tmp_path: Path) -> None:
    """A crash between a compaction's rename and the log's truncation replays old frames."""
    store = ConsumerStore(tmp_path, sync_interval_ns=10**7)
    store.append(_turn((DELIVERED, 4, 2, 1, 11), (ACKED, 1), (POSITION, 3, 5, 1, 1, 11, 11)))
    store.close()
    log = (tmp_path / LOG_FILE).read_bytes()
    once = replay(BASE, log)
    assert once["pending"] == [[4, 2, 11]] and once["lps"] == []
    assert replay(once, log) == once


def _turns(store: ConsumerStore, seqs: range) -> list[int]:
    """Deliver each of `seqs`, ack every third; the pending sequences expected after."""
    folder = store.folder
    for seq in seqs:
        position = (POSITION, seq + 1, seq + 1, 0, 0, seq, 0)
        store.record([DELIVERED, seq, seq, 1, seq, *position], lambda: load_state(folder) or {})
        if seq % 3 == 0:
            store.record([ACKED, seq, *position], lambda: load_state(folder) or {})
        (saved,) = load_all(folder.parent.parent)  # while a compaction may be under way
        assert saved.state is not None and saved.state["dseq"] == seq + 1
    return [s for s in range(1, seqs.stop) if s % 3]


def test_a_full_log_is_folded_into_the_snapshot_aside_while_turns_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cstore, "COMPACT_BYTES", 200)
    store = ConsumerStore(consumers_dir(tmp_path) / "d", sync_interval_ns=10**7)
    store.save_meta({"durable_name": "d"}, "2024-01-01T00:00:00Z")
    store.save_state(BASE)
    _turns(store, range(1, 60))
    # Turns grow the log while a compaction is under way, by as many as the worker's
    # thread lags: wait for it, so the turns after it start the log afresh.
    store.settle()
    pending = _turns(store, range(60, 62))
    store.close()  # waits for the compaction under way
    assert not (store.folder / ASIDE_FILE).exists()
    assert (store.folder / LOG_FILE).stat().st_size < 400
    assert read_state(store.folder / STATE_FILE)["dseq"] > 40  # the snapshot moved on
    (saved,) = load_all(tmp_path)
    assert saved.state is not None
    assert [s for s, _, _ in saved.state["pending"]] == pending


def test_an_aside_log_left_by_a_crash_is_read_and_folded_in_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kill -9 between the rename aside and the worker's new snapshot."""
    store = ConsumerStore(consumers_dir(tmp_path) / "d", sync_interval_ns=10**7)
    store.save_meta({"durable_name": "d"}, "2024-01-01T00:00:00Z")
    store.save_state(BASE)
    _turns(store, range(1, 10))
    store.close()
    (store.folder / LOG_FILE).rename(store.folder / ASIDE_FILE)
    monkeypatch.setattr(cstore, "COMPACT_BYTES", 200)
    again = ConsumerStore(store.folder, sync_interval_ns=10**7)
    pending = _turns(again, range(10, 20))  # the first turn compacts: the aside log only
    again.close()
    assert not (store.folder / ASIDE_FILE).exists()
    (saved,) = load_all(tmp_path)
    assert saved.state is not None
    assert [s for s, _, _ in saved.state["pending"]] == pending
