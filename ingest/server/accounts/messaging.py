"""The Messaging port (see `jetstream.port`) bound to one account.

An account's JetStream talks through the core server like the global one does,
only in its own subject space: its API, stream subjects, acks and deliveries
never meet another account's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ingest.server.accounts.registry import Account

if TYPE_CHECKING:
    from ingest.server.jetstream.port import AckSink, IntakeSink
    from ingest.server.server import InternalCallback, RawCallback, Server
    from log.consumers.wire import Deliveries


class AccountMessaging:
    __slots__ = ("_account", "_server")

    def __init__(self, server: Server, account: Account) -> None:
        self._server = server
        self._account = account

    def subscribe(
        self,
        subject: str,
        callback: InternalCallback,
        *,
        queue: str | None = None,
        intake: IntakeSink | None = None,
    ) -> object:
        return self._server.subscribe(
            subject, callback, queue=queue, account=self._account, intake=intake
        )

    def subscribe_raw(
        self, subject: str, callback: RawCallback, *, acks: AckSink | None = None
    ) -> object:
        return self._server.subscribe_raw(subject, callback, account=self._account, acks=acks)

    def unsubscribe(self, token: object) -> None:
        self._server.unsubscribe(token)

    def share(self, token: object, shared: bool) -> None:
        self._server.share(token, shared)

    def publish(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        self._server.publish(subject, reply, hdr, data, account=self._account)

    def replies(self, answers: list[tuple[bytes, bytes]]) -> None:
        self._server.replies(answers, account=self._account)

    def deliver(self, run: Deliveries) -> None:
        self._server.deliver(run, account=self._account)

    def has_interest(self, subject: str) -> bool:
        return self._server.has_interest(subject, account=self._account)

    def has_subscriber(self, subject: str) -> bool:
        return self._server.has_subscriber(subject, account=self._account)

    def watch_interest(self, callback: Callable[[], None]) -> None:
        self._server.watch_interest(callback, account=self._account)
