"""The port JetStream uses to talk through the core server, as an internal client.

JetStream owns no sockets: it subscribes to API and stream subjects like any
client and answers by publishing, so routing, no-responders and permissions
behave for JetStream traffic exactly as for everything else (the reference is
wired the same way).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from log.consumers.wire import Deliveries

InternalCallback = Callable[[str, str | None, bytes | None, bytes], None]
RawCallback = Callable[[bytes, bytes, bytes | None, bytes], None]
AckSink = Callable[[list[int]], None]
IntakeSink = Callable[[bytes, list[bytes], list[bytes]], None]


class Messaging(Protocol):
    def subscribe(
        self,
        subject: str,
        callback: InternalCallback,
        *,
        queue: str | None = None,
        intake: IntakeSink | None = None,
    ) -> object:
        """Returns a token; callback(subject, reply, hdr, data) runs on the loop, in order.

        `intake(subject, replies, payloads)` takes runs of PUBs without headers that the
        compiled codec gathered where this subscription alone receives the subject (a
        stream's): replies are b"" where there is none.
        """

    def subscribe_raw(
        self, subject: str, callback: RawCallback, *, acks: AckSink | None = None
    ) -> object:
        """Like `subscribe`, but the callback gets the subject and reply (b"" if none) as bytes.

        `acks` takes runs of plain acks, (delivered, stream seq, consumer seq) flat, that
        the compiled codec gathered without routing each one (a consumer's ack subject).
        """

    def unsubscribe(self, token: object) -> None: ...

    def share(self, token: object, shared: bool) -> None:
        """In a cluster, whether peers send the subscription's subject here (every
        subscription is shared when made); a lone server has no peers to tell."""

    def publish(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        """Route to subscribers like a client publish."""

    def replies(self, answers: list[tuple[bytes, bytes]]) -> None:
        """`publish` each (reply subject as a client sent it, body), in order: the PubAcks
        of an intake run, framed together where the compiled table knows the inboxes."""

    def deliver(self, run: Deliveries) -> None:
        """Route each message of the run on its subject, showing subscribers the message's.

        Stored messages to an inbox, in order; a run is one call so the route is looked up once.
        """

    def has_interest(self, subject: str) -> bool:
        """Whether any subscription (client or internal) would receive `subject`."""

    def has_subscriber(self, subject: str) -> bool:
        """Whether a subscription on exactly `subject` (no wildcard) exists."""

    def watch_interest(self, callback: Callable[[], None]) -> None:
        """Call back (synchronously) whenever a subscription is added or removed."""
