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
from pathlib import Path


class Profile(StrEnum):
    """How a server is started for a workload; both servers get the same flags."""

    CORE = "core"
    JS = "js"
    JS_SYNC_ALWAYS = "js-sync-always"
    OFFLINE = "offline"  # no server: the workload builds and reads store files itself
    MQTT = "mqtt"  # JetStream plus an `mqtt {}` listener on a free port


@dataclass(frozen=True, slots=True)
class Params:
    """Sizes of one benchmark run, identical for both servers.

    ``store`` and ``mqtt_port`` are the per-run fields: the store dir of the server
    under test (or of an offline workload), for workloads that read the files a
    server writes, and its MQTT port (0 without an `mqtt {}` block).
    """

    count: int
    size: int
    requests: int
    sync_count: int
    window: int
    concurrency: int
    timeout: float
    history: int = 1_000_000
    store: Path | None = None
    mqtt_port: int = 0

    @property
    def payload(self) -> bytes:
        """A fixed payload, so both servers move exactly the same bytes."""
        return b"x" * self.size


@dataclass(frozen=True, slots=True)
class Metric:
    """One figure a workload reports, with the direction that counts as better.

    ``target`` is a minimum *score*, where score = jetlake/ref for throughput and
    ref/jetlake for latency: one convention, so a score above 1 always means jetlake
    is better and a target is always a lower bound. A figure the reference has no
    counterpart for (the lake) is judged by ``bound`` instead: a limit on jetlake's
    own figure, an upper one when lower is better.
    """

    key: str
    label: str
    unit: str
    higher_is_better: bool
    target: float | None = None
    target_text: str = ""
    bound: float | None = None

    def score(self, ref: float, jetlake: float) -> float:
        """Ratio oriented so that > 1 means jetlake is better."""
        return jetlake / ref if self.higher_is_better else ref / jetlake


Measure = Callable[[str, Params], Awaitable[dict[str, float]]]


@dataclass(frozen=True, slots=True)
class Workload:
    """A row group of the report: what to run, on which server profile, what it yields.

    Most rows run one ``measure`` on both servers. The lake's rows differ: some
    have no reference counterpart (``sides``), one reaches the same answer on
    the reference another way (``ref_measure``: a consumer replay where jetlake
    queries its lake), and jetlake needs its own flags for them (``jetlake_args``)
    and more time than a publish workload (``timeout``, a floor on ``--timeout``).
    """

    name: str
    profile: Profile
    measure: Measure
    metrics: tuple[Metric, ...]
    description: str
    sides: tuple[str, ...] = ("ref", "jetlake")
    ref_measure: Measure | None = None
    jetlake_args: tuple[str, ...] = ()
    timeout: float = 0.0


class Skipped(Exception):
    """The server lacks a feature the workload needs (e.g. JetStream not enabled).

    Kept apart from failures so an unfinished jetlake reads as "skipped", not as
    a broken benchmark.
    """


class Incomplete(Exception):
    """The workload ran but its result cannot be trusted (lost messages, failed acks)."""


RATE = "msgs/s"


def rate(label: str, target: float | None = None, text: str = "") -> Metric:
    """A throughput metric, higher is better."""
    return Metric("msgs_per_s", label, RATE, True, target, text)
