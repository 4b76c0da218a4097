"""The vocabulary shared by workloads, the runner and the report.

A workload is a plain coroutine taking a server URL and the run's parameters and
returning named figures; everything else (servers, timeouts, ratios, targets) lives
outside it, so later issues add a row to the table in ``workloads.py`` instead of
copying a harness.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum


class Profile(StrEnum):
    """How a server is started for a workload; both servers get the same flags."""

    CORE = "core"
    JS = "js"
    JS_SYNC_ALWAYS = "js-sync-always"


@dataclass(frozen=True, slots=True)
class Params:
    """Sizes of one benchmark run, identical for both servers."""

    count: int
    size: int
    requests: int
    sync_count: int
    window: int
    concurrency: int
    timeout: float

    @property
    def payload(self) -> bytes:
        """A fixed payload, so both servers move exactly the same bytes."""
        return b"x" * self.size


@dataclass(frozen=True, slots=True)
class Metric:
    """One figure a workload reports, with the direction that counts as better.

    ``target`` is a minimum *score*, where score = jetlake/ref for throughput and
    ref/jetlake for latency: one convention, so a score above 1 always means jetlake
    is better and a target is always a lower bound.
    """

    key: str
    label: str
    unit: str
    higher_is_better: bool
    target: float | None = None
    target_text: str = ""

    def score(self, ref: float, jetlake: float) -> float:
        """Ratio oriented so that > 1 means jetlake is better."""
        return jetlake / ref if self.higher_is_better else ref / jetlake


Measure = Callable[[str, Params], Awaitable[dict[str, float]]]


@dataclass(frozen=True, slots=True)
class Workload:
    """A row group of the report: what to run, on which server profile, what it yields."""

    name: str
    profile: Profile
    measure: Measure
    metrics: tuple[Metric, ...]
    description: str


class Skipped(Exception):
    """The server lacks a feature the workload needs (e.g. JetStream not enabled).

    Kept apart from failures so an unfinished jetlake reads as "skipped", not as
    a broken benchmark.
    """


class Incomplete(Exception):
    """The workload ran but its result cannot be trusted (lost messages, failed acks)."""
