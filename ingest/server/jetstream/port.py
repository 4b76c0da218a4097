"""The port JetStream uses to talk through the core server, as an internal client.

JetStream owns no sockets: it subscribes to API and stream subjects like any
client and answers by publishing, so routing, no-responders and permissions
behave for JetStream traffic exactly as for everything else (the reference is
wired the same way).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

InternalCallback = Callable[[str, str | None, bytes | None, bytes], None]


class Messaging(Protocol):
    def subscribe(
        self, subject: str, callback: InternalCallback, *, queue: str | None = None
    ) -> object:
        """Returns a token; callback(subject, reply, hdr, data) runs on the loop, in order."""

    def unsubscribe(self, token: object) -> None: ...

    def publish(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        """Route to subscribers like a client publish."""

    def deliver(
        self, target: str, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> None:
        """Route on `target` but show subscribers `subject` (a stored message to an inbox)."""

    def has_interest(self, subject: str) -> bool:
        """Whether any subscription (client or internal) would receive `subject`."""

    def watch_interest(self, callback: Callable[[], None]) -> None:
        """Call back (synchronously) whenever a subscription is added or removed."""
