"""Opening the Raft logs of many stream groups at once, on worker threads.

A restarted server hosts every stream its meta log assigns it in one apply, and
a burst of creates hosts several per apply. Each log's open waits on its fsyncs
(a log that ran: its hard state, its WAL files, its running record and folder);
one after another on the event loop, a thousand of them took most of a
restarted server's catch-up. Opened together on a few threads, their fsyncs
overlap (the file system's journal commits them together), and the loop hosts
each stream as soon as its own log is open while the next ones open meanwhile.

Each open is independent (its own folder); `LogStore.open` touches nothing
shared but the process's logging, so a worker thread may run it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor

from consensus.log_store import LogStore
from consensus.types import Restored

Opened = tuple[LogStore, Restored]
WORKERS = 8  # opens in flight: enough to fill a journal commit, few enough for 2 cores

_POOL = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="raft-log-open")


class LogPrefetch:
    """Logs opened ahead of the streams that will take them, by group name.

    `ahead` starts the opens; `take` hands one over (waiting for it, or opening it
    here if nobody asked ahead); `discard` closes those nobody took (a stream
    assigned and removed again in the same batch).
    """

    def __init__(self, open_log: Callable[[str], Opened]) -> None:
        self._open = open_log
        self._opening: dict[str, Future[Opened]] = {}

    def ahead(self, groups: Iterable[str]) -> None:
        for group in groups:
            if group not in self._opening:
                self._opening[group] = _POOL.submit(self._open, group)

    def take(self, group: str) -> Opened:
        """The group's log; an open's error (a damaged log) is raised here, to its stream."""
        opening = self._opening.pop(group, None)
        return opening.result() if opening is not None else self._open(group)

    def discard(self) -> None:
        opening, self._opening = self._opening, {}
        for future in opening.values():
            if future.exception() is None:
                future.result()[0].close()
