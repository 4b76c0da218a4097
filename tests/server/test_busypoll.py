"""Busy polling before the loop sleeps: the adaptive budget alone, on a loop, and in a server.

The rule must never spin longer than its limit per idle gap, must grow to cover
the gaps of a chatty client and must fall to zero under a trickle, so that an
idle or quiet server burns nothing. The last test holds a real server to that.
"""

from __future__ import annotations

import asyncio
import math
import os
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.server.busypoll import FLOOR, BusyPoll, SpinBudget
from ingest.server.options import parse_serve_args
from ingest.server.server import Server
from tests.conftest import MakeServer
from tests.support.poll import poll_async
from tests.support.raw import RawClient

LIMIT = 200e-6


def test_a_missed_short_gap_grows_the_budget_to_cover_the_next() -> None:
    rule = SpinBudget(LIMIT)
    assert rule.budget == 0.0
    rule.woke(80e-6)
    assert 80e-6 < rule.budget <= LIMIT
    grown = rule.budget
    rule.woke(60e-6)  # covered: left alone
    assert rule.budget == grown
    rule.woke(150e-6)
    assert rule.budget == LIMIT  # twice the old budget, capped


def test_long_gaps_halve_the_budget_down_to_zero() -> None:
    rule = SpinBudget(LIMIT)
    rule.woke(LIMIT)
    assert rule.budget == LIMIT
    rule.woke(2 * LIMIT)
    assert rule.budget == LIMIT / 2
    halvings = math.ceil(math.log2(LIMIT / FLOOR))
    for _ in range(halvings):
        rule.woke(1.0)
    assert rule.budget == 0.0


def test_a_trickle_never_spins() -> None:
    """One message a millisecond, five times the limit apart: no budget ever."""
    rule = SpinBudget(LIMIT)
    for _ in range(1000):
        rule.woke(1e-3)
        assert rule.budget == 0.0


@given(st.lists(st.floats(0, 2e-3, allow_nan=False), max_size=200))
def test_the_budget_stays_within_the_limit_and_covers_the_last_short_gap(
    gaps: list[float],
) -> None:
    rule = SpinBudget(LIMIT)
    for gap in gaps:
        rule.woke(gap)
        assert 0.0 <= rule.budget <= LIMIT
        if gap <= LIMIT:
            assert rule.budget >= gap
        assert rule.budget == 0.0 or rule.budget >= FLOOR


async def test_the_loop_keeps_polling_for_the_budget_after_the_last_io() -> None:
    poll = BusyPoll(0.05, stalled=math.inf)  # a loaded machine must not end it early here
    await asyncio.sleep(0.02)  # a real idle gap under the limit
    poll.read()
    assert poll.budget >= 0.02 and poll.spinning
    turns = 0
    while poll.spinning:
        turns += 1
        await asyncio.sleep(0)  # other work keeps running meanwhile
        if turns == 10:
            wrote = time.perf_counter()
            poll.wrote()  # idle time counts again from here
    assert time.perf_counter() - wrote >= poll.budget
    assert turns > 10


async def test_no_budget_no_spin() -> None:
    poll = BusyPoll(1e-3)
    await asyncio.sleep(0.01)  # longer than the limit
    poll.read()
    assert poll.budget == 0.0 and not poll.spinning


def test_zero_turns_it_off() -> None:
    assert Server(parse_serve_args(["--busy_poll", "0"])).busy_poll is None
    poll = Server(parse_serve_args([])).busy_poll
    assert poll is not None and poll.budget == 0.0


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("server_kind", ["jetlake"], indirect=True)
async def test_an_idle_server_stops_spinning(make_server: MakeServer) -> None:
    """After a burst of round trips that grew the budget, a second of silence costs
    (nearly) no CPU: the spin ends one budget after the last reply."""
    server = make_server()
    async with await RawClient.connect(server.host, server.port) as client:
        await client.handshake()
        for _ in range(300):
            await client.send(b"PING\r\n")
            await client.read_until(rb"^PONG$")
        before = _cpu_seconds(server.pid)
        await asyncio.sleep(1.0)  # the silence under test, not a synchronisation
        assert _cpu_seconds(server.pid) - before < 0.2


async def test_a_stalled_turn_stops_the_spin_and_halves_the_budget() -> None:
    """The loop held up (here by a blocking call; on a busy machine, by the scheduler)
    between two idle turns: the CPU is wanted elsewhere, so the spin gives it up."""
    poll = BusyPoll(0.2)
    await asyncio.sleep(0.1)
    poll.read()
    budget = poll.budget
    assert poll.spinning and budget >= 0.1
    await asyncio.sleep(0)  # the spin's first turn
    time.sleep(0.002)  # the stall under test
    await poll_async(lambda: not poll.spinning, "the spin given up", 5, interval=0)
    assert poll.budget == budget / 2
