"""When a leaf dials its remote again, and which failed dials it logs as errors.

As the reference: a dial that fails waits the `reconnect` interval plus a random part of
it (so leafs cut off together do not return together); a link that was up and closed
is dialled again after the plain interval. A remote never reached yet has its first
failure logged and then every 3,600th (about an hour at the default 1 s), so a hub
that is down for days costs a log line an hour; once a link has been up, every failed
attempt to restore it is logged (`connect_error_reports`, `reconnect_error_reports`
change those numbers). The schedule holds two counters, whatever the time the remote
stays away.
"""

from __future__ import annotations

import random
from collections.abc import Callable

CONNECT_ERROR_REPORTS = 3600  # the reference's DEFAULT_CONNECT_ERROR_REPORTS
RECONNECT_ERROR_REPORTS = 1  # the reference's DEFAULT_RECONNECT_ERROR_REPORTS


class Redial:
    """One remote's dialling state: failed attempts since the last link, and whether a
    link was ever up."""

    __slots__ = ("_jitter", "attempts", "connected_once", "interval", "reports")

    def __init__(
        self,
        interval: float,
        jitter: Callable[[float], float] | None = None,
        *,
        reports: tuple[int, int] = (CONNECT_ERROR_REPORTS, RECONNECT_ERROR_REPORTS),
    ) -> None:
        self.interval = interval
        self.reports = reports  # (before the link was ever up, after): one error in N
        self.attempts = 0
        self.connected_once = False
        self._jitter = jitter or (lambda span: random.uniform(0.0, span))

    def failed(self) -> tuple[bool, float]:
        """A dial failed: whether to log it as an error (else at debug), and the wait
        before the next one."""
        self.attempts += 1
        every = self.reports[1] if self.connected_once else self.reports[0]
        report = self.attempts == 1 or self.attempts % every == 0
        return report, self.interval + self._jitter(self.interval)

    def linked(self) -> None:
        """A link came up: the next failure is the first of a reconnect."""
        self.attempts = 0
        self.connected_once = True
