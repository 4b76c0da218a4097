"""Poll the sockets a little longer before the event loop sleeps, when that pays.

A client that waits for each answer (a sync publish, a KV put, a request)
sends its next message about one round trip after the last reply. If the
loop is asleep in `epoll_wait` by then, the kernel has to wake it, and on a
virtual machine without guest halt-polling (Firecracker, many cloud VMs)
that wake-up costs tens of microseconds: about a quarter of a KV put's round
trip here. The Go reference's scheduler spins looking for work, the network
poller included, before a thread parks; Python's loop parks at once.

So after I/O the loop keeps polling (a callback that re-schedules itself,
which makes the loop poll without blocking) for up to a *budget*, adapted the
way Linux's haltpoll governor adapts its poll window: an idle gap the budget
covered leaves it alone; a gap it missed but that was shorter than the limit
grows it to cover such gaps; a gap past the limit halves it, down to zero. A
server with a steady trickle of traffic or none therefore spins for nothing
(or nearly), while a chatty request/reply client keeps its fast wake-ups. The
limit bounds what one idle gap can cost: `busy_poll` in the configuration,
0 to switch it off. Each turn that found no new I/O yields the CPU to any
other runnable thread on it, so a client on the same machine is not starved
by the spin; a turn after I/O does not, as the loop is busy then anyway. An
idle turn that comes late means the CPU was taken away: the spin stops and
the budget halves, so an oversubscribed machine soon sees no spinning.
"""

from __future__ import annotations

import asyncio
import os
from time import perf_counter

# A budget below this is not worth a spin: the loop's own turn takes about as long.
FLOOR = 5e-6
# Headroom over the gap that was just missed, so the next similar gap is covered.
MARGIN = 1.25
# An idle turn of the spin this much longer than its few microseconds means the process
# was descheduled: the CPU is wanted elsewhere, and a spinning CPU never looks idle to the
# scheduler, so it would not hand a waiting thread of another process over either.
STALLED = 100e-6


class SpinBudget:
    """The adaptive rule, without a clock or a loop."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.budget = 0.0

    def woke(self, idle: float) -> None:
        """I/O arrived after `idle` seconds without any."""
        if idle <= self.budget:
            return
        if idle <= self.limit:
            self.budget = min(self.limit, max(2 * self.budget, MARGIN * idle, FLOOR))
        else:
            self.shrink()

    def shrink(self) -> None:
        """A gap past the limit, or a spin the CPU was taken from: halve, down to zero."""
        half = self.budget / 2
        self.budget = half if half >= FLOOR else 0.0


class BusyPoll:
    """The rule on an event loop: told of reads and writes, it spins while the budget lasts."""

    def __init__(self, limit: float, stalled: float = STALLED) -> None:
        self._rule = SpinBudget(limit)
        self._stalled = stalled
        self._last = perf_counter()
        self._spinning = False
        self._seen = 0.0  # `_last` as the previous turn of the spin found it
        self._turn = 0.0  # when the previous turn began
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def budget(self) -> float:
        return self._rule.budget

    @property
    def spinning(self) -> bool:
        return self._spinning

    def read(self) -> None:
        """Bytes arrived: adapt to the gap before them (unless spinning saw them), then spin."""
        now = perf_counter()
        if not self._spinning:
            self._rule.woke(now - self._last)
            if self._rule.budget:
                self._spinning = True
                if self._loop is None:
                    self._loop = asyncio.get_running_loop()
                self._seen, self._turn = 0.0, now  # the first turn is never idle
                self._loop.call_soon(self._spin)
        self._last = now

    def wrote(self) -> None:
        """Bytes went out: idle time counts from here, not from the read that caused them."""
        self._last = perf_counter()

    def _spin(self) -> None:
        last, now = self._last, perf_counter()
        idle_turn = last == self._seen
        if idle_turn and now - self._turn > self._stalled:
            self._rule.shrink()  # and stop: the next read starts over
        elif now - last < self._rule.budget:
            assert self._loop is not None
            if idle_turn:  # a runnable thread here (a client's) goes first
                os.sched_yield()
            self._seen, self._turn = last, now  # a yield that lasted shows in the next turn
            self._loop.call_soon(self._spin)
            return
        self._spinning = False
