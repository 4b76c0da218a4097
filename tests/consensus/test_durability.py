"""The background thread that fsyncs every stream and consumer by its deadline."""

from __future__ import annotations

import threading
import time

import pytest

from consensus.durability import WINDOW, Syncer, sync_delay
from tests.support.poll import poll


def test_delay_of_sync_interval() -> None:
    assert sync_delay(None) == WINDOW  # `always`: what waits is unconfirmed consumer state
    assert sync_delay(2 * 60 * 10**9) == 120.0


class Gated:
    """Records which target synced, on which thread; waits for the gate first."""

    def __init__(self, name: str, gate: threading.Event, log: list[tuple[str, str]]) -> None:
        self.name, self.sync_queued = name, False
        self._gate, self._synced = gate, log

    def sync(self) -> None:
        self._gate.wait(5)
        self._synced.append((self.name, threading.current_thread().name))


class Broken:
    sync_queued = False

    def sync(self) -> None:
        raise RuntimeError("boom")

    def __str__(self) -> str:
        return "the broken one"


def test_syncer_queues_a_target_once_and_syncs_off_the_caller() -> None:
    gate, synced = threading.Event(), []
    busy, a, last = (Gated(n, gate, synced) for n in ("busy", "a", "last"))
    syncer = Syncer()
    syncer.request(busy, 0)
    poll(lambda: not busy.sync_queued, "the sync thread never took the first target", 5)
    syncer.request(a, 0)
    syncer.request(a, 0)  # still queued: not again
    syncer.request(last, 0)
    gate.set()
    poll(lambda: len(synced) >= 3, lambda: f"syncs stopped at {synced}", 5)
    thread = "background-sync"
    assert synced == [("busy", thread), ("a", thread), ("last", thread)]


def test_each_target_is_synced_by_its_own_deadline() -> None:
    """A target asked for later does not hold up one due sooner."""
    gate, synced = threading.Event(), []
    gate.set()
    late, soon = Gated("late", gate, synced), Gated("soon", gate, synced)
    syncer = Syncer()
    start = time.monotonic()
    syncer.request(late, 3600)
    syncer.request(soon, 0.05)
    poll(lambda: bool(synced), "the target due soon was never synced", 5)
    assert time.monotonic() - start >= 0.05
    assert synced == [("soon", "background-sync")] and late.sync_queued


def test_syncer_outlives_a_failing_sync(caplog: pytest.LogCaptureFixture) -> None:
    gate, synced = threading.Event(), []
    gate.set()
    syncer = Syncer()
    syncer.request(Broken(), 0)
    syncer.request(Gated("fine", gate, synced), 0)
    poll(lambda: bool(synced), "the sync thread died with the failing target", 5)
    assert synced == [("fine", "background-sync")]
    assert "background sync failed: the broken one" in caplog.text
