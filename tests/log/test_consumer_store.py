"""The durable consumer state: snapshot plus an append-only log of per-turn frames."""

from __future__ import annotations

from array import array
from pathlib import Path

from log.consumers.store import (
    ACKED,
    DELIVERED,
    GAVE_UP,
    LOG_FILE,
    POSITION,
    ConsumerStore,
    consumers_dir,
    load_all,
    replay,
)

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
