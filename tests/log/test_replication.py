"""Group commit in the group of one: batches form while an fsync runs; acks follow the fsync."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from log.replication import SingleNodeGroup
from tests.support.poll import poll_async


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


class Acks:
    """Collects commit callbacks: (proposal, error) in the order the group calls them."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, BaseException | None]] = []

    def on(self, n: int) -> Callable[[BaseException | None], None]:
        return lambda error: self.calls.append((n, error))


async def test_proposals_during_an_fsync_form_the_next_batch() -> None:
    store, acks = FakeLog(), Acks()
    group = SingleNodeGroup(store.apply, store.sync)
    group.propose([1], acks.on(1))
    await asyncio.to_thread(store.in_sync.wait, 5)
    for n in (2, 3, 4):
        group.propose([n], acks.on(n))
    assert acks.calls == []
    store.release.set()
    assert await group.barrier() == 4
    assert acks.calls == [(1, None), (2, None), (3, None), (4, None)]
    assert store.batches == [[1], [2, 3, 4]]
    assert store.syncs == 2
    assert group.committed == 4


async def test_acks_only_after_their_batch_is_durable() -> None:
    store = FakeLog()
    group = SingleNodeGroup(store.apply, store.sync)
    acked_at: list[int] = []
    for n in (1, 2, 3):
        group.propose([n], lambda _: acked_at.append(store.synced_upto))
    await asyncio.to_thread(store.in_sync.wait, 5)
    assert acked_at == []
    store.release.set()
    await group.flush()
    assert acked_at == [3, 3, 3]


async def test_barrier_waits_for_what_was_proposed_before_it() -> None:
    store = FakeLog()
    group = SingleNodeGroup(store.apply, store.sync)
    group.propose([1, 2])
    await asyncio.to_thread(store.in_sync.wait, 5)
    barrier = group.barrier()
    assert not barrier.done()
    store.release.set()
    assert await barrier == 2
    assert (await group.barrier()) == 2  # nothing new: already committed


async def test_with_a_sync_interval_acks_follow_the_write_and_flush_syncs() -> None:
    store, acks = FakeLog(gate=False), Acks()
    group = SingleNodeGroup(store.apply, store.sync, sync_interval_ns=3600 * 10**9)
    group.propose([1, 2], acks.on(1))
    assert await group.barrier() == 2
    assert acks.calls == [(1, None)]
    assert store.syncs == 0
    await group.close()
    assert store.syncs == 1


async def test_with_a_short_interval_the_background_thread_syncs_unasked() -> None:
    """The ack does not wait for the fsync, which follows within the interval."""
    store, acks = FakeLog(), Acks()
    group = SingleNodeGroup(store.apply, store.sync, sync_interval_ns=10**6)
    group.propose([1, 2], acks.on(1))
    assert await group.barrier() == 2
    assert acks.calls == [(1, None)] and store.synced_upto == 0
    assert await asyncio.to_thread(store.in_sync.wait, 5), "no background sync"
    group.propose([3], acks.on(3))  # applied and acked while the first sync still runs
    assert await group.barrier() == 3
    assert acks.calls == [(1, None), (3, None)]
    store.release.set()
    # The write during the first sync queued a second one.
    await poll_async(lambda: store.synced_upto >= 3, lambda: f"synced up to {store.synced_upto}", 5)
    await group.close()


async def test_a_failed_write_fails_its_batch_and_everything_after() -> None:
    def broken(batch: list[int]) -> None:
        raise OSError("disk gone")

    acks = Acks()
    group = SingleNodeGroup(broken, lambda: None)
    group.propose([1], acks.on(1))
    with pytest.raises(OSError):
        await group.barrier()
    group.propose([2], acks.on(2))
    assert [n for n, _ in acks.calls] == [1, 2]
    assert all(isinstance(error, OSError) for _, error in acks.calls)
