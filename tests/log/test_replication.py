"""Group commit in the group of one: batches form while an fsync runs; acks follow the fsync."""

from __future__ import annotations

import asyncio
import threading

import pytest

from log.replication import SingleNodeGroup


class FakeLog:
    """Records applied batches; each sync blocks until the test releases it."""

    def __init__(self, *, gate: bool = True) -> None:
        self.batches: list[list[int]] = []
        self.syncs = 0
        self.synced_upto = 0
        self.applied_upto = 0
        self.release = threading.Event()
        self.in_sync = threading.Event()
        if not gate:
            self.release.set()

    def apply(self, batch: list[int]) -> None:
        self.batches.append(batch)
        self.applied_upto = batch[-1]

    def sync(self) -> None:
        self.in_sync.set()
        assert self.release.wait(5)
        self.syncs += 1
        self.synced_upto = self.applied_upto


async def test_proposals_during_an_fsync_form_the_next_batch() -> None:
    store = FakeLog()
    group = SingleNodeGroup(store.apply, store.sync)
    first = group.propose([1])
    await asyncio.to_thread(store.in_sync.wait, 5)
    later = [group.propose([n]) for n in (2, 3, 4)]
    assert not first.done()
    store.release.set()
    assert await first == 1
    assert await asyncio.gather(*later) == [2, 3, 4]
    assert store.batches == [[1], [2, 3, 4]]
    assert store.syncs == 2
    assert group.committed == 4


async def test_acks_only_after_their_batch_is_durable() -> None:
    store = FakeLog()
    group = SingleNodeGroup(store.apply, store.sync)
    acked_at: list[int] = []
    for n in (1, 2, 3):
        group.propose([n]).add_done_callback(lambda _: acked_at.append(store.synced_upto))
    await asyncio.to_thread(store.in_sync.wait, 5)
    assert acked_at == []
    store.release.set()
    await group.flush()
    assert acked_at == [3, 3, 3]


async def test_with_a_sync_interval_acks_follow_the_write_and_flush_syncs() -> None:
    store = FakeLog(gate=False)
    group = SingleNodeGroup(store.apply, store.sync, sync_interval_ns=3600 * 10**9)
    assert await group.propose([1, 2]) == 2
    assert store.syncs == 0
    await group.close()
    assert store.syncs == 1


async def test_a_failed_write_fails_its_batch_and_everything_after() -> None:
    def broken(batch: list[int]) -> None:
        raise OSError("disk gone")

    group = SingleNodeGroup(broken, lambda: None)
    failed = group.propose([1])
    with pytest.raises(OSError):
        await failed
    with pytest.raises(OSError):
        await group.propose([2])
