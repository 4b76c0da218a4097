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


class _ServerSubscription:
    """What routing reads of any server-owned subscription."""

    __slots__ = ("account", "announced", "conn", "queue", "subject")

    def __init__(self, subject: str, queue: str | None, account: Account) -> None:
        self.subject = subject
        self.queue = queue
        self.conn = None
        self.account = account
        # Told to the cluster, so messages from peers reach it (system-account services).
        self.announced = False


class InternalSubscription(_ServerSubscription):
    """A subscription whose messages go to a Python callback (JetStream, system services)."""

    __slots__ = ("callback", "intake")

    def __init__(
        self,
        subject: str,
        queue: str | None,
        callback: InternalCallback,
        account: Account,
        intake: IntakeSink | None = None,
    ) -> None:
        super().__init__(subject, queue, account)
        self.callback = callback
        self.intake = intake  # runs of plain PUBs the codec gathered (see `learn_route`)

    def deliver(self, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        self.callback(
            subject.decode("utf-8", "surrogateescape"),
            reply.decode("utf-8", "surrogateescape") if reply else None,
            hdr,
            payload,
        )


class RawSubscription(_ServerSubscription):
    """An internal subscription whose callback is its `deliver`: routed bytes, as they are.

    For hot internal subscribers (consumer acks): no wrapper call, no decoding.
    """

    __slots__ = ("acks", "deliver")

    def __init__(
        self, subject: str, callback: RawCallback, account: Account, acks: AckSink | None
    ) -> None:
        super().__init__(subject, None, account)
        self.deliver = callback
        self.acks = acks  # runs of plain acks the codec gathered (see `learn_acks`)
