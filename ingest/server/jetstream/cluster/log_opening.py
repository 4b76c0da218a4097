"""Opening the Raft logs and segment stores of many streams at once, on worker threads.

A restarted server hosts every stream its meta log assigns it in one apply, and
a burst of creates hosts several per apply. Each log's open waits on its fsyncs
(a log that ran: its hard state, its WAL files, its running record and folder),
and each existing stream's segment store reads its active segment back and
indexes its subjects (Arrow work, which releases the interpreter lock); one
after another on the event loop, a thousand of them took most of a restarted
server's catch-up. Opened together on a few threads, the fsyncs overlap (the
file system's journal commits them together), and the loop hosts each stream as
soon as its own parts are open while the next ones open meanwhile.

Each open is independent (its own folder) and touches nothing of the event
loop's, so a worker thread may run it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from consensus.log_store import LogStore
from consensus.types import Restored

Opened = tuple[LogStore, Restored]
T = TypeVar("T")
WORKERS = 8  # opens in flight: enough to fill a journal commit, few enough for 2 cores

_POOL = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="raft-log-open")


class Prefetch(Generic[T]):
    """Things opened ahead of the streams that will take them, by group name.

    `ahead` starts the opens; `take` hands one over, waiting for it (None: nobody
    asked ahead, the caller opens it); `discard` closes those nobody took (a
    stream assigned and removed again in the same batch, or one that failed).
    """

    def __init__(self, close: Callable[[T], None]) -> None:
        self._close = close
        self._opening: dict[str, Future[T]] = {}

    def ahead(self, jobs: Iterable[tuple[str, Callable[[], T]]]) -> None:
        for group, job in jobs:
            if group not in self._opening:
                self._opening[group] = _POOL.submit(job)

    def take(self, group: str) -> T | None:
        """The group's thing; an open's error (a damaged log) is raised here, to its stream."""
        opening = self._opening.pop(group, None)
        return opening.result() if opening is not None else None

    def discard(self) -> None:
        opening, self._opening = self._opening, {}
        for future in opening.values():
            if future.exception() is None:
                self._close(future.result())
