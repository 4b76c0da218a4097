"""The Messaging port of a clustered JetStream: every subscription is cluster-wide.

A stream's leader may be any server, so its subjects, its API and its
consumers' acks must reach it from a client on any server; announcing each
internal subscription to the routes does exactly that, and a server that is
not the leader simply does not answer. A stream's subjects are the exception:
the engine withdraws them at its followers (`share`), so publishes cross the
routes to the leader alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ingest.server.jetstream.port import (
    AckSink,
    IntakeSink,
    InternalCallback,
    Messaging,
    RawCallback,
)

if TYPE_CHECKING:
    from log.consumers.wire import Deliveries


class Announced:
    def __init__(self, inner: Messaging, announce: Callable[[object], None]) -> None:
        self._inner = inner
        self._announce = announce

    def subscribe(
        self,
        subject: str,
        callback: InternalCallback,
        *,
        queue: str | None = None,
        intake: IntakeSink | None = None,
    ) -> object:
        token = self._inner.subscribe(subject, callback, queue=queue, intake=intake)
        self._announce(token)
        return token

    def subscribe_raw(
        self, subject: str, callback: RawCallback, *, acks: AckSink | None = None
    ) -> object:
        token = self._inner.subscribe_raw(subject, callback, acks=acks)
        self._announce(token)
        return token

    def unsubscribe(self, token: object) -> None:
        self._inner.unsubscribe(token)

    def share(self, token: object, shared: bool) -> None:
        self._inner.share(token, shared)

    def publish(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        self._inner.publish(subject, reply, hdr, data)

    def replies(self, answers: list[tuple[bytes, bytes]]) -> None:
        self._inner.replies(answers)

    def deliver(self, run: Deliveries) -> None:
        self._inner.deliver(run)

    def has_interest(self, subject: str) -> bool:
        return self._inner.has_interest(subject)

    def has_subscriber(self, subject: str) -> bool:
        return self._inner.has_subscriber(subject)

    def watch_interest(self, callback: Callable[[], None]) -> None:
        self._inner.watch_interest(callback)
