"""Connections in trouble, counted by kind: cut off as slow consumers or as stale
(unanswered PINGs), and producers held back for a slow subscriber (stalls).

Operators alert on these from /varz and STATSZ, and the reference splits them by the
kind of connection (`slow_consumer_stats`, `stale_connection_stats`): a route cut off as
a slow consumer says something else than a client. A total is every kind's.
"""

from __future__ import annotations

from typing import Any

KINDS = ("clients", "routes", "gateways", "leafs")


class Trouble:
    __slots__ = ("slow", "stale", "stalls")

    def __init__(self) -> None:
        self.slow = dict.fromkeys(KINDS, 0)
        self.stale = dict.fromkeys(KINDS, 0)
        self.stalls = 0  # times a producer waited for a subscriber over half its max_pending

    def figures(self) -> dict[str, Any]:
        """/varz's fields (STATSZ leaves the by-kind ones and the zeros out)."""
        return {
            "slow_consumers": sum(self.slow.values()),
            "slow_consumer_stats": dict(self.slow),
            "stale_connections": sum(self.stale.values()),
            "stale_connection_stats": dict(self.stale),
            "stalled_clients": self.stalls,
        }
