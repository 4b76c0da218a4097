"""The server's own subscriptions: JetStream's API, system services, consumer acks.

They sit in the same sublists as clients' subscriptions, so routing, interest and
no-responders treat the server's services exactly like clients; `conn` is None
because no connection's counters or buffers are involved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ingest.server.accounts.registry import Account
    from ingest.server.jetstream.port import AckSink, IntakeSink, InternalCallback, RawCallback


class InternalSubscription:
    """A subscription whose messages go to a Python callback (JetStream, system services)."""

    __slots__ = ("account", "announced", "callback", "conn", "intake", "queue", "subject")

    def __init__(
        self,
        subject: str,
        queue: str | None,
        callback: InternalCallback,
        account: Account,
        intake: IntakeSink | None = None,
    ) -> None:
        self.subject = subject
        self.queue = queue
        self.callback = callback
        self.intake = intake  # runs of plain PUBs the codec gathered (see `learn_route`)
        self.conn = None
        self.account = account
        # Told to the cluster, so messages from peers reach it (system-account services).
        self.announced = False

    def deliver(self, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        self.callback(
            subject.decode("utf-8", "surrogateescape"),
            reply.decode("utf-8", "surrogateescape") if reply else None,
            hdr,
            payload,
        )


class RawSubscription:
    """An internal subscription whose callback is its `deliver`: routed bytes, as they are.

    For hot internal subscribers (consumer acks): no wrapper call, no decoding.
    """

    __slots__ = ("account", "acks", "announced", "conn", "deliver", "queue", "subject")

    def __init__(
        self, subject: str, callback: RawCallback, account: Account, acks: AckSink | None
    ) -> None:
        self.subject = subject
        self.queue = None
        self.deliver = callback
        self.acks = acks  # runs of plain acks the codec gathered (see `learn_acks`)
        self.conn = None
        self.account = account
        self.announced = False
