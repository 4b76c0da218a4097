"""The server as JetStream and the system services message through it: the `Messaging`
port (`ingest/server/jetstream/port.py`).

They subscribe, publish and deliver exactly like an in-process client, through the
same sublists and `Server.route`, so a subject no stream captures gets the same
no-responders answer as on the reference. Each method takes the account to act in;
none means the global one (`AccountMessaging` binds another account for its JetStream).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ingest.server.internal_subs import InternalSubscription, RawSubscription
from ingest.server.subscription import Subscription

if TYPE_CHECKING:
    from ingest.server.accounts.registry import Account, Accounts
    from ingest.server.cluster.mesh import Cluster
    from ingest.server.jetstream.port import AckSink, IntakeSink, InternalCallback, RawCallback
    from ingest.server.mappings import SubjectMapper
    from ingest.server.sublist import Sublist
    from log.consumers.wire import Deliveries


class ServerMessaging:
    """Mixed into `Server`, which owns the state and the routing named below."""

    if TYPE_CHECKING:
        accounts: Accounts
        cluster: Cluster | None
        mapper: SubjectMapper | None
        out_msgs: int
        out_bytes: int
        route: Callable[..., bool]  # Server.route

        def count_tails(self, sublist: Sublist[Any], msgs: int, framed: int, size: int) -> None: ...

    def subscribe(
        self,
        subject: str,
        callback: InternalCallback,
        *,
        queue: str | None = None,
        account: Account | None = None,
        intake: IntakeSink | None = None,
    ) -> InternalSubscription:
        sub = InternalSubscription(
            subject, queue, callback, account or self.accounts.global_account, intake
        )
        sub.account.sublist.insert(subject, queue, sub)
        return sub

    def serve_everywhere(self, subject: str, callback: InternalCallback) -> None:
        """Answer `subject` in every account, and in each one created later, on this server
        alone (not announced): a service about the server a client is connected to."""
        self.accounts.every(lambda account: self.subscribe(subject, callback, account=account))

    def subscribe_raw(
        self,
        subject: str,
        callback: RawCallback,
        *,
        account: Account | None = None,
        acks: AckSink | None = None,
    ) -> RawSubscription:
        sub = RawSubscription(subject, callback, account or self.accounts.global_account, acks)
        sub.account.sublist.insert(subject, None, sub)
        return sub

    def announce(self, sub: object) -> None:
        """Make an internal subscription cluster-wide: peers route its subject here."""
        assert isinstance(sub, InternalSubscription | RawSubscription)
        sub.announced = True
        if self.cluster is not None:
            self.cluster.local_added(sub.subject, sub.queue, sub.account.name)

    def share(self, token: object, shared: bool) -> None:
        """Announce an internal subscription, or withdraw its announcement (see `announce`)."""
        assert isinstance(token, InternalSubscription | RawSubscription)
        token.account.sublist.forget_routes(token.subject)  # learnt without the token's part
        if shared and not token.announced:
            self.announce(token)
        elif token.announced and not shared:
            token.announced = False
            if self.cluster is not None:
                self.cluster.local_removed(token.subject, token.queue, token.account.name)

    def unsubscribe(self, token: object) -> None:
        assert isinstance(token, InternalSubscription | RawSubscription)
        token.account.sublist.remove(token.subject, token.queue, token)
        if token.announced and self.cluster is not None:
            self.cluster.local_removed(token.subject, token.queue, token.account.name)

    def deliver(self, run: Deliveries, *, account: Account | None = None) -> None:
        """Route a consumer's run on its subject, each message shown under its own.

        A consumer sends runs of hundreds of messages to one inbox. When the run's only
        receiver is one client subscription without an auto-unsubscribe limit, no
        delivery can change who gets the next one, so the run is matched once and
        handed straight to it; otherwise each message is routed like a publish.
        """
        routed = run.subject.encode("utf-8", "surrogateescape")
        account = account or self.accounts.global_account
        match = account.sublist.match(routed)
        only = match.plain[0] if len(match.plain) == 1 and not match.queues else None
        cluster = self.cluster
        if not match.plain and not match.queues and cluster is not None and self.mapper is None:
            forwarded = cluster.deliver_run(account.name, routed, run)
            if forwarded is not None:
                self.out_msgs += len(run.msgs)
                self.out_bytes += forwarded
                return
        if type(only) is not Subscription or only.max_msgs:
            for subject, reply, hdr, data in run.wire():
                size = len(data) + (len(hdr) if hdr else 0)
                self.route(
                    None, routed, reply, hdr, data, size,
                    shown=subject, account=account, internal=True,
                )  # fmt: skip
            return
        total = only.deliver_run(run)
        self.out_msgs += len(run.msgs)
        self.out_bytes += total

    def has_interest(self, subject: str, *, account: Account | None = None) -> bool:
        account = account or self.accounts.global_account
        routed = subject.encode("utf-8", "surrogateescape")
        match = account.sublist.match(routed)
        if match.plain or match.queues:
            return True
        cluster = self.cluster
        return cluster is not None and cluster.forwarding(account.name, routed) is not None

    def has_subscriber(self, subject: str, *, account: Account | None = None) -> bool:
        """A subscription on exactly this subject, not a wildcard covering it (a client's
        request inbox covers every reply subject it makes up), as the reference's
        interest notifications look for."""
        account = account or self.accounts.global_account
        match = account.sublist.match(subject.encode("utf-8", "surrogateescape"))
        return any(getattr(sub, "subject", None) == subject for sub in match.plain)

    def watch_interest(
        self, callback: Callable[[], None], *, account: Account | None = None
    ) -> None:
        """Call back after any subscription comes or goes (push consumers follow their audience)."""
        (account or self.accounts.global_account).sublist.on_change = callback

    def publish(
        self,
        subject: str,
        reply: str | None,
        hdr: bytes | None,
        data: bytes,
        *,
        account: Account | None = None,
    ) -> None:
        """Route a message from inside the server (no sending client, so no echo rule)."""
        self.route(
            None,
            subject.encode("utf-8", "surrogateescape"),
            reply.encode("utf-8", "surrogateescape") if reply else b"",
            hdr,
            data,
            len(data) + (len(hdr) if hdr else 0),
            account=account,
            internal=True,
        )

    def replies(
        self, answers: list[tuple[bytes, bytes]], *, account: Account | None = None
    ) -> None:
        """Route each (reply subject, body) in order as `publish` would; where the compiled
        table knows their inboxes (`learn_tail`), a run of them is framed in one call."""
        account = account or self.accounts.global_account
        sublist = account.sublist
        routes = sublist.routes if self.mapper is None else None
        at = 0
        while at < len(answers):
            if routes is not None:
                done, _, framed, framed_bytes = routes.deliver_tails(answers, at)
                self.count_tails(sublist, done, framed, framed_bytes)
                at += done
                if at == len(answers):
                    return
            inbox, data = answers[at]
            self.route(None, inbox, b"", None, data, len(data), account=account, internal=True)
            at += 1
