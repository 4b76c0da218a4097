"""Stream groups' Raft logs opened ahead, together, on worker threads (log_opening)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from consensus.log_store import LogStore
from consensus.types import Entry, HardState
from consensus.wal_recovery import CorruptLogError, LogStoreError
from ingest.server.jetstream.cluster.groups import group_dir, open_log
from ingest.server.jetstream.cluster.log_opening import LogPrefetch, Opened


def prefetch(js_dir: Path, opened_on: dict[str, str]) -> LogPrefetch:
    def opening(group: str) -> Opened:
        opened_on[group] = threading.current_thread().name
        return open_log(js_dir, group, me="S1", sync_interval_ns=None)

    return LogPrefetch(opening)


def test_logs_asked_ahead_open_on_workers_and_hand_over_what_they_recovered(
    tmp_path: Path,
) -> None:
    groups = [f"S-R3F-{i}" for i in range(12)]
    for i, group in enumerate(groups):  # logs that ran: a term, a vote, an entry each
        store, _ = open_log(tmp_path, group, me="S1", sync_interval_ns=None)
        store.set_hard_state(HardState(i + 1, "S2", 0))
        store.append([Entry(i + 1, 1, data=group.encode())])
        store.close()
    opened_on: dict[str, str] = {}
    logs = prefetch(tmp_path, opened_on)
    logs.ahead(groups)
    for i, group in enumerate(groups):
        store, restored = logs.take(group)
        assert restored.hard_state == HardState(i + 1, "S2", 0)
        assert [e.data for e in restored.entries] == [group.encode()]
        store.close()
    assert all(name.startswith("raft-log-open") for name in opened_on.values())
    # one nobody asked ahead for opens where it is taken
    store, _ = logs.take("S-R3F-late")
    store.close()
    assert opened_on["S-R3F-late"] == threading.current_thread().name


def test_a_damaged_log_fails_the_stream_that_takes_it_only(tmp_path: Path) -> None:
    for group in ("bad", "good"):
        open_log(tmp_path, group, me="S1", sync_interval_ns=None)[0].close()
    hard_state = group_dir(tmp_path, "bad") / "hardstate"
    hard_state.write_bytes(b"\xff" * len(hard_state.read_bytes()))  # both slots
    logs = prefetch(tmp_path, {})
    logs.ahead(["bad", "good"])
    with pytest.raises(CorruptLogError, match="bad on S1"):
        logs.take("bad")
    store, _ = logs.take("good")
    store.close()


def test_logs_nobody_took_are_closed(tmp_path: Path) -> None:
    opened: list[LogStore] = []

    def opening(group: str) -> Opened:
        got = open_log(tmp_path, group, me="S1", sync_interval_ns=None)
        opened.append(got[0])
        return got

    logs = LogPrefetch(opening)
    logs.ahead(["added-then-removed"])
    logs.discard()
    [store] = opened
    with pytest.raises(LogStoreError, match="closed"):
        store.append([Entry(1, 1)])
    assert not (group_dir(tmp_path, "added-then-removed") / "running").exists()  # a clean close
