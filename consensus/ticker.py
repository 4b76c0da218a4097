"""One timer per event loop and tick length for every Raft node on it.

A server with a thousand groups would otherwise keep a thousand timers, each
firing ten times a second out of step with the others. With one, every group
ticks in the same turn of the loop: the heartbeats of all the groups a server
leads leave together, and a transport that gathers what is sent in one turn
(`ingest.server.cluster.raft_transport`) carries them to each peer as one frame.
A node is told of every tick and decides itself whether to wake
(`RaftCore.idle_ticks`).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Protocol


class Ticked(Protocol):
    def on_tick(self) -> None: ...


_TICKERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, Ticker]] = (
    weakref.WeakKeyDictionary()
)


class Ticker:
    """Calls `on_tick` of every member each `seconds`, while it has members."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self._loop = loop
        self._seconds = seconds
        self._members: dict[Ticked, None] = {}  # insertion-ordered: ticks in join order
        self._handle: asyncio.TimerHandle | None = None
        self.fired = 0  # ticks so far: a member's count from joining is this plus its own

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop, seconds: float) -> Ticker:
        """The loop's ticker of that length, made on first use."""
        tickers = _TICKERS.setdefault(loop, {})
        ticker = tickers.get(seconds)
        if ticker is None:
            ticker = tickers[seconds] = cls(loop, seconds)
        return ticker

    def join(self, member: Ticked) -> None:
        self._members[member] = None
        if self._handle is None:
            self._handle = self._loop.call_later(self._seconds, self._fire)

    def leave(self, member: Ticked) -> None:
        self._members.pop(member, None)
        if not self._members and self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def __len__(self) -> int:
        return len(self._members)

    def _fire(self) -> None:
        self._handle = self._loop.call_later(self._seconds, self._fire)
        self.fired += 1
        for member in list(self._members):
            member.on_tick()
