"""Propose → commit → apply: the seam between a stream and its replication.

A stream never writes its store directly on publish: it proposes entries to
its ReplicationGroup and is told when they are committed. `SingleNodeGroup`,
a group of one, is also where group commit lives: entries proposed while a
batch is being written (and, with `sync_interval: always`, fsynced in a
worker thread) go out together as the next batch, so the number of writes
and fsyncs tracks the disk, not the publish rate. When a batch counts as
committed follows `consensus.durability`. `log.raft_group` is the same seam
over a Raft group (`consensus.driver`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

from consensus.commits import OnCommit, notify, refuse, settle
from consensus.durability import SYNCER, sync_delay

E = TypeVar("E")


class ReplicationGroup(Protocol[E]):
    @property
    def committed(self) -> int:
        """Index of the last committed entry (entries count from 1)."""

    def propose(
        self,
        entries: Sequence[E],
        on_commit: OnCommit | None = None,
        *,
        early: OnCommit | None = None,
    ) -> None:
        """Queue entries; `on_commit` runs on the event loop once their batch committed and
        is applied here. `early` may run sooner, once it committed but before this member
        applied it (an answer that needs no read of the applied state); never after
        `on_commit`."""

    def barrier(self) -> asyncio.Future[int]:
        """A future for the commit of everything proposed so far (for readers who wait)."""

    def read_point(self) -> asyncio.Future[None] | None:
        """What a reader awaits before answering from this member's applied state, so it
        sees every write committed before it asked (None: that state is already current)."""

    async def flush(self) -> None:
        """Wait until everything proposed so far is committed and durable."""

    async def close(self) -> None:
        """Commit what is queued, then refuse new proposals."""


class GroupClosedError(RuntimeError):
    """A proposal reached a group that is shutting down."""


class SingleNodeGroup(Generic[E]):
    """A replication group of one: commit = written, and fsynced under `always`.

    `apply` writes a batch into the state machine (the store) on the event loop;
    `sync` makes everything applied durable and runs off the loop. With
    `sync_interval_ns` None (`always`) each batch is fsynced before its
    proposers hear of the commit; otherwise they hear of it once it is applied,
    and the background thread fsyncs it within the interval.
    """

    def __init__(
        self,
        apply: Callable[[list[E]], None],
        sync: Callable[[], None],
        *,
        sync_interval_ns: int | None = None,
        name: str = "",
    ) -> None:
        self._apply = apply
        self._sync = sync
        self._name = name
        self._always = sync_interval_ns is None
        self._delay = sync_delay(sync_interval_ns)
        self.sync_queued = False  # with the background thread (`Syncable`)
        self._queue: list[E] = []
        self._waiters: list[OnCommit] = []
        self._proposed = 0
        self.committed = 0
        self._worker: asyncio.Task[None] | None = None  # `always`: the commit loop
        self._scheduled = False  # otherwise: a commit callback is on its way
        self._dirty = False  # applied since the last fsync this group ran itself
        self._closed = False
        self._error: BaseException | None = None

    def propose(
        self,
        entries: Sequence[E],
        on_commit: OnCommit | None = None,
        *,
        early: OnCommit | None = None,
    ) -> None:
        """A group of one applies a batch as it commits: `early` runs just before
        `on_commit`."""
        if self._closed or self._error is not None:
            error = self._error or GroupClosedError("replication group closed")
            refuse(error, early, on_commit)
            return
        self._queue.extend(entries)
        self._proposed += len(entries)
        if early is not None:
            self._waiters.append(early)
        if on_commit is not None:
            self._waiters.append(on_commit)
        if not self._always:
            if not self._scheduled:  # a plain callback: no task (and its coroutine) per batch
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._commit_queued)
        elif self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._run_synced())

    def barrier(self) -> asyncio.Future[int]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        index = self._proposed
        if index <= self.committed:
            future.set_result(index)
        else:
            self.propose((), lambda error: settle(future, index, error))
        return future

    def read_point(self) -> None:
        """A group of one decides every commit: its applied state is always current."""
        return None

    def _commit_queued(self) -> None:
        """Apply what is queued and commit it; the background thread fsyncs it later."""
        self._scheduled = False
        batch, waiters, upto = self._take()
        if self._applied(batch, waiters):
            if batch:
                self._dirty = True
                SYNCER.request(self, self._delay)
            self.committed = upto
            notify(waiters, None)

    async def _run_synced(self) -> None:
        """`always`: batch by batch, each fsynced before its commit; one fsync overlaps
        the next batch's arrival."""
        while self._queue or self._waiters:
            batch, waiters, upto = self._take()
            if not self._applied(batch, waiters):
                return
            if batch:
                try:
                    await asyncio.to_thread(self._sync)
                except Exception as exc:
                    self._fail(exc, waiters)
                    return
            self.committed = upto
            notify(waiters, None)

    def _take(self) -> tuple[list[E], list[OnCommit], int]:
        """Everything queued, its proposers, and the index it commits up to."""
        batch, self._queue = self._queue, []
        waiters, self._waiters = self._waiters, []
        return batch, waiters, self._proposed

    def _applied(self, batch: list[E], waiters: list[OnCommit]) -> bool:
        """Write a batch; on failure every waiter hears of it and the group stays failed."""
        try:
            if batch:
                self._apply(batch)
        except Exception as exc:
            self._fail(exc, waiters)
            return False
        return True

    def _fail(self, exc: BaseException, waiters: list[OnCommit]) -> None:
        """A failed write poisons the group: nothing after it may be acknowledged."""
        self._error = exc
        pending, self._waiters, self._queue = waiters + self._waiters, [], []
        notify(pending, exc)

    def sync(self) -> None:
        """The background thread's call; a closed group was synced by `close`."""
        if not self._closed:
            self._sync()

    def __str__(self) -> str:
        return self._name or "replication group"

    async def flush(self) -> None:
        if (self._queue or self._waiters) and not self._always:
            self._commit_queued()
        while self._worker is not None and not self._worker.done():
            await asyncio.shield(self._worker)
        if self._dirty:
            self._dirty = False
            await asyncio.to_thread(self._sync)

    async def close(self) -> None:
        self._closed = True
        await self.flush()
