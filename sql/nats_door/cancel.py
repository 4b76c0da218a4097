"""Queries their clients call off: `$JL.SQL.cancel.<id>` stops the query asked with
`Jl-Sql-Id: <id>`.

A NATS request has no cancel of its own, and a client that gives up (its own timeout,
Ctrl-C) would otherwise leave its query's Spark jobs running until the service noticed
that no chunk is answered any more: after the ack wait once chunks flow, and for a query
still computing its first chunk only once that chunk is out. The client publishes the
cancel as it gives up, and the service stops the query's jobs at once.

Every SQL service of a queue group takes every cancel (a plain subscription, not the
queue), and the one running the query stops it. A cancel names its account as a request
does (`Nats-Request-Info`), and only a query of that account is stopped, so an id learnt
by another account stops nothing. A cancel that arrives before its query (they travel on
two subscriptions) is remembered, and the query then does not start.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable

CANCEL_PREFIX = "$JL.SQL.cancel"
QUERY_ID = "Jl-Sql-Id"
# Asked by a client so the service sees it go (a 503 on a heartbeat's reply) before any chunk.
HEARTBEAT = "Jl-Sql-Heartbeat"
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_REMEMBERED = 1024  # cancels of queries not arrived yet

Key = tuple[str | None, str]  # (the asking account, None: the service's own; the query's id)


def query_id(headers: dict[str, str]) -> str | None:
    """The request's `Jl-Sql-Id`, or None; ValueError when it cannot be a subject token."""
    found = headers.get(QUERY_ID)
    if found is not None and not _ID.fullmatch(found):
        raise ValueError(f"{QUERY_ID} must be 1-64 letters, digits, '-' or '_', not {found!r}")
    return found


def cancel_subject(query: str) -> str:
    return f"{CANCEL_PREFIX}.{query}"


class CallOffs:
    """The running queries a cancel can stop, by account and id."""

    def __init__(self) -> None:
        self._running: dict[Key, Callable[[], None]] = {}
        self._early: OrderedDict[Key, None] = OrderedDict()

    def add(self, key: Key, stop: Callable[[], None]) -> None:
        """Make `stop` the query's cancel; called now when its cancel came first."""
        if key in self._early:
            del self._early[key]
            stop()
            return
        self._running[key] = stop

    def discard(self, key: Key) -> None:
        self._running.pop(key, None)

    def call_off(self, key: Key) -> None:
        stop = self._running.pop(key, None)
        if stop is not None:
            stop()
            return
        self._early[key] = None
        while len(self._early) > _REMEMBERED:
            self._early.popitem(last=False)

    @staticmethod
    def key_of(subject: str, account: str | None) -> Key | None:
        """The key a cancel's subject names for the asking account (None: no id in it)."""
        found = subject[len(CANCEL_PREFIX) + 1 :]
        return (account, found) if _ID.fullmatch(found) else None
