"""`Ticker`: one timer per loop and tick length, every member ticked in the same turn."""

from __future__ import annotations

import asyncio

from consensus.ticker import Ticker
from tests.consensus.cluster import until


class Counter:
    def __init__(self) -> None:
        self.ticks = 0

    def on_tick(self) -> None:
        self.ticks += 1


async def test_members_share_one_ticker_and_tick_together() -> None:
    loop = asyncio.get_running_loop()
    ticker = Ticker.of(loop, 0.01)
    assert Ticker.of(loop, 0.01) is ticker and Ticker.of(loop, 0.02) is not ticker
    a, b = Counter(), Counter()
    ticker.join(a)
    ticker.join(b)
    try:
        await until(lambda: a.ticks >= 3, "three ticks")
        assert a.ticks == b.ticks  # every fire ticks every member
    finally:
        ticker.leave(a)
        ticker.leave(b)
    assert len(ticker) == 0


async def test_the_last_member_leaving_stops_the_timer() -> None:
    ticker = Ticker.of(asyncio.get_running_loop(), 0.005)
    member = Counter()
    ticker.join(member)
    await until(lambda: member.ticks >= 1, "a tick")
    ticker.leave(member)
    seen = member.ticks
    other = Counter()
    ticker.join(other)  # a new timer: ticks reach only the member now
    try:
        await until(lambda: other.ticks >= 2, "two ticks")
        assert member.ticks == seen
    finally:
        ticker.leave(other)
