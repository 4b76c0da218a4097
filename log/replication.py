"""Propose → commit → apply: the seam where Raft replication slots in later.

A stream never writes its store directly on publish: it proposes entries to
its ReplicationGroup and is told when they are committed. `SingleNodeGroup`,
a group of one, is also where group commit lives: while one fsync runs in a
worker thread, new proposals queue up and go out together as the next batch
(one `apply` + one `sync`), so the number of fsyncs tracks the disk, not the
publish rate. This is the only asyncio module under `log/`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

E = TypeVar("E")


class ReplicationGroup(Protocol[E]):
    @property
    def committed(self) -> int:
        """Index of the last committed entry (entries count from 1)."""

    def propose(self, entries: Sequence[E]) -> asyncio.Future[int]:
        """Queue entries; the future resolves to the commit index of the last one."""

    async def flush(self) -> None:
        """Wait until everything proposed so far is committed and durable."""

    async def close(self) -> None:
        """Commit what is queued, then refuse new proposals."""


class GroupClosedError(RuntimeError):
    """A proposal reached a group that is shutting down."""


class SingleNodeGroup(Generic[E]):
    """A replication group of one: commit = written (and fsynced unless deferred).

    `apply` writes a batch into the state machine (the store) on the event loop;
    `sync` makes everything applied durable and runs in a worker thread. With
    `sync_interval_ns` None every batch is fsynced before its futures resolve;
    otherwise futures resolve once applied and a timer fsyncs on that interval.
    """

    def __init__(
        self,
        apply: Callable[[list[E]], None],
        sync: Callable[[], None],
        *,
        sync_interval_ns: int | None = None,
    ) -> None:
        self._apply = apply
        self._sync = sync
        self._interval = None if sync_interval_ns is None else sync_interval_ns / 1e9
        self._queue: list[E] = []
        self._waiters: list[tuple[int, asyncio.Future[int]]] = []
        self._proposed = 0
        self.committed = 0
        self._worker: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._dirty = False
        self._closed = False
        self._error: BaseException | None = None

    def propose(self, entries: Sequence[E]) -> asyncio.Future[int]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        if self._closed or self._error is not None:
            future.set_exception(self._error or GroupClosedError("replication group closed"))
            return future
        self._queue.extend(entries)
        self._proposed += len(entries)
        self._waiters.append((self._proposed, future))
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._run())
        return future

    async def _run(self) -> None:
        """Drain the queue batch by batch; one batch's fsync overlaps the next's arrival."""
        while self._queue:
            batch, self._queue = self._queue, []
            waiters, self._waiters = self._waiters, []
            try:
                self._apply(batch)
                if self._interval is None:
                    await asyncio.to_thread(self._sync)
                else:
                    self._dirty = True
                    self._arm_timer()
            except Exception as exc:  # delivered to every waiter; the group stays failed
                self._fail(exc, waiters)
                return
            self.committed = waiters[-1][0]
            for index, future in waiters:
                if not future.done():
                    future.set_result(index)

    def _fail(self, exc: BaseException, waiters: list[tuple[int, asyncio.Future[int]]]) -> None:
        """A failed write poisons the group: nothing after it may be acknowledged."""
        self._error = exc
        for _, future in waiters + self._waiters:
            if not future.done():
                future.set_exception(exc)
        self._waiters = []
        self._queue = []

    def _arm_timer(self) -> None:
        if self._timer is None and self._interval is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._interval, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._dirty and not self._closed:
            self._dirty = False
            task = asyncio.get_running_loop().create_task(asyncio.to_thread(self._sync))
            task.add_done_callback(_report_sync_error)

    async def flush(self) -> None:
        while self._worker is not None and not self._worker.done():
            await asyncio.shield(self._worker)
        if self._dirty:
            self._dirty = False
            await asyncio.to_thread(self._sync)

    async def close(self) -> None:
        self._closed = True
        await self.flush()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _report_sync_error(task: asyncio.Task[None]) -> None:
    """A deferred fsync has no publisher to tell; surface it to the loop's handler."""
    if not task.cancelled() and task.exception() is not None:
        loop = asyncio.get_running_loop()
        loop.call_exception_handler(
            {"message": "deferred sync failed", "exception": task.exception()}
        )
