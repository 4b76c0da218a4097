"""Stream groups' Raft logs opened ahead, together, on worker threads (log_opening)."""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path

import pytest

from consensus.log_store import LogStore
from consensus.types import Entry, HardState
from consensus.wal_recovery import CorruptLogError, LogStoreError
from ingest.server.jetstream.cluster.groups import group_dir, open_log
from ingest.server.jetstream.cluster.log_opening import Opened, Prefetch


def logs() -> Prefetch[Opened]:
    return Prefetch(lambda opened: opened[0].close())


def opening(js_dir: Path, group: str, opened_on: dict[str, str] | None = None) -> Opened:
    if opened_on is not None:
        opened_on[group] = threading.current_thread().name
    return open_log(js_dir, group, me="S1", sync_interval_ns=None)


def test_logs_asked_ahead_open_on_workers_and_hand_over_what_they_recovered(
    tmp_path: Path,
) -> None:
    groups = [f"S-R3F-{i}" for i in range(12)]
    for i, group in enumerate(groups):  # logs that ran: a term, a vote, an entry each
        store, _ = opening(tmp_path, group)
        store.set_hard_state(HardState(i + 1, "S2", 0))
        store.append([Entry(i + 1, 1, data=group.encode())])
        store.close()
    opened_on: dict[str, str] = {}
    ahead = logs()
    ahead.ahead((g, partial(opening, tmp_path, g, opened_on)) for g in groups)
    for i, group in enumerate(groups):
        taken = ahead.take(group)
        assert taken is not None
        store, restored = taken
        assert restored.hard_state == HardState(i + 1, "S2", 0)
        assert [e.data for e in restored.entries] == [group.encode()]
        store.close()
    assert set(opened_on) == set(groups)
    assert all(name.startswith("raft-log-open") for name in opened_on.values())
    assert ahead.take("S-R3F-late") is None  # nobody asked ahead: its stream opens it


def test_a_damaged_log_fails_the_stream_that_takes_it_only(tmp_path: Path) -> None:
    for group in ("bad", "good"):
        opening(tmp_path, group)[0].close()
    hard_state = group_dir(tmp_path, "bad") / "hardstate"
    hard_state.write_bytes(b"\xff" * len(hard_state.read_bytes()))  # both slots
    ahead = logs()
    ahead.ahead((g, partial(opening, tmp_path, g)) for g in ("bad", "good"))
    with pytest.raises(CorruptLogError, match="bad on S1"):
        ahead.take("bad")
    taken = ahead.take("good")
    assert taken is not None
    taken[0].close()


def test_what_nobody_took_is_closed(tmp_path: Path) -> None:
    opened: list[LogStore] = []

    def job() -> Opened:
        got = opening(tmp_path, "added-then-removed")
        opened.append(got[0])
        return got

    ahead = logs()
    ahead.ahead([("added-then-removed", job)])
    ahead.discard()
    [store] = opened
    with pytest.raises(LogStoreError, match="closed"):
        store.append([Entry(1, 1)])
    assert not (group_dir(tmp_path, "added-then-removed") / "running").exists()  # a clean close
