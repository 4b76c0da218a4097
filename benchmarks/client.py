"""nats-py helpers shared by workloads, so both servers see identical client behaviour."""

from __future__ import annotations

import asyncio
import contextlib

import nats
from nats.aio.client import Client as NATS

from benchmarks.model import Incomplete

STALL_SECONDS = 5.0
"""How long a count may stop moving before the workload is declared incomplete.

Lost messages (slow consumer) would otherwise only show up at the global timeout.
"""


async def connect(url: str, name: str) -> NATS:
    """Connect without reconnects, so a dying server fails the workload at once."""

    async def ignore(_: Exception) -> None:
        """Workloads check their own results; nats-py's default handler only logs."""

    return await nats.connect(
        url, name=name, allow_reconnect=False, connect_timeout=5, error_cb=ignore
    )


def latency_metrics(samples: list[float]) -> dict[str, float]:
    """p50 and p99 in microseconds by nearest rank (no interpolation between samples)."""
    ordered = sorted(samples)
    last = len(ordered) - 1
    return {
        "p50_us": ordered[round(0.50 * last)] * 1e6,
        "p99_us": ordered[round(0.99 * last)] * 1e6,
    }


class Counter:
    """Counts deliveries and wakes a waiter at the target without polling the clock."""

    def __init__(self, target: int) -> None:
        self.count = 0
        self.target = target
        self._done = asyncio.Event()

    def hit(self) -> None:
        """Record one delivery."""
        self.count += 1
        if self.count >= self.target:
            self._done.set()

    async def wait(self) -> None:
        """Return at the target; raise if deliveries stop before it (messages lost)."""
        seen = -1
        while not self._done.is_set():
            if self.count == seen:
                raise Incomplete(f"stalled at {self.count}/{self.target} messages")
            seen = self.count
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._done.wait(), STALL_SECONDS)
