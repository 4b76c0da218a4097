"""Response permissions (a user JWT's `resp`, `nsc edit user --allow-pub-response`; a
config user's `allow_responses`): a
client may publish to the reply subject of a message it received, even where its
publish permissions do not reach, at most `max` times and within `ttl` of receiving it.

As on the reference, the reply subjects remembered are pruned of the used-up and stale
ones once there are more than `_LIMIT`; a user with response permissions but no publish
allow list may publish nothing else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

DEFAULT_MAX = 1  # the reference's defaults when `resp` leaves one out
DEFAULT_TTL = 120.0
_LIMIT = 4096


@dataclass(slots=True)
class _Reply:
    received: float
    used: int = 0


class Responses:
    """`max` and `ttl` 0 take the defaults; negative ones bound nothing."""

    def __init__(self, max_msgs: int, ttl: float) -> None:
        self.max_msgs = max_msgs or DEFAULT_MAX
        self.ttl = ttl or DEFAULT_TTL
        self._replies: dict[bytes, _Reply] = {}

    def received(self, reply: bytes) -> None:
        """A message with `reply` was delivered to the client: it may answer it."""
        self._replies[reply] = _Reply(time.monotonic())
        if len(self._replies) > _LIMIT:
            self._prune(time.monotonic())

    def allows(self, subject: bytes) -> bool:
        """One publish to `subject`, taken against what the client received."""
        reply = self._replies.get(subject)
        if reply is None:
            return False
        reply.used += 1
        if self._spent(reply, time.monotonic(), reply.used > self.max_msgs):
            del self._replies[subject]
            return False
        return True

    def _spent(self, reply: _Reply, now: float, over: bool) -> bool:
        stale = now - reply.received > self.ttl
        return (self.max_msgs > 0 and over) or (self.ttl > 0 and stale)

    def _prune(self, now: float) -> None:
        for subject, reply in list(self._replies.items()):
            if self._spent(reply, now, reply.used >= self.max_msgs):
                del self._replies[subject]
