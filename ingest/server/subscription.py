"""A client's subscription, and what the codec's fast path may know of it.

`Subscription.deliver` is the reference path for one delivery; `learn_route` decides
which matches the compiled codec may frame itself or hand to a stream in runs (see
`ingest.server.client`), and
the count of what it framed reaches `delivered` when its table settles; `learn_acks`
which consumers it may hand their plain acks in runs; `learn_intake_tail` which
prefixes go to a stream alone; `learn_tail` which reply inboxes
the server's own publishes may be framed into without a match.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ingest.parser.fast import encode_hmsg, encode_msg
from ingest.server.sublist import Match, Sublist

if TYPE_CHECKING:
    from ingest.server.host import Connection
    from log.consumers.wire import Deliveries


class Subscription:
    """A client's SUB; `deliver` is what the router calls for each matching message."""

    __slots__ = ("_delivered", "conn", "filtered", "max_msgs", "queue", "sid", "subject")

    def __init__(self, conn: Connection, subject: str, queue: str | None, sid: bytes) -> None:
        self.conn = conn
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.max_msgs = 0
        self._delivered = 0  # the compiled fast path adds its counts on `Routes.settle`
        self.filtered = False  # a deny rule overlaps this wildcard: check each subject

    @property
    def delivered(self) -> int:
        routes = self.conn.account.sublist.routes
        if routes is not None:
            routes.settle()
        return self._delivered

    def deliver(self, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        conn = self.conn
        if self.filtered:
            grant = conn.grant
            if not grant.can_receive(subject.decode("utf-8", "surrogateescape")):
                return
            if reply and grant.responses is not None:
                grant.responses.received(reply)
        if conn.trace:
            if hdr is not None and conn.headers:
                conn.trace_out(encode_hmsg(subject, self.sid, reply, hdr, payload))
            else:
                conn.trace_out(encode_msg(subject, self.sid, reply, payload))
        if conn.outlet.msg(subject, self.sid, reply, hdr, payload):
            conn.server.mark_dirty(conn)
        self._delivered += 1
        if self.max_msgs and self._delivered >= self.max_msgs:
            conn.drop_sub(self)

    def deliver_run(self, run: Deliveries) -> int:
        """Deliver a consumer's run in order, as `deliver` would each; returns its header
        and payload bytes. Unfiltered and untraced (a consumer's inbox), the outlet frames
        the whole run, ack replies included, in one call."""
        conn = self.conn
        if self.filtered or conn.trace:
            size = 0
            for subject, reply, hdr, data in run.wire():
                self.deliver(subject, reply, hdr, data)
                size += len(data) if hdr is None else len(data) + len(hdr)
            return size
        clean, size = conn.outlet.run(self.sid, run.ack_prefix, run.msgs)
        if clean:
            conn.server.mark_dirty(conn)
        self._delivered += len(run.msgs)
        return size


ACK_TOKENS = 4  # `$JS.ACK.<stream>.<consumer>`: the part of an ack that names its consumer


def learn_acks(
    routes: Any,
    sublist: Sublist[Any],
    subject: bytes,
    local: Callable[[bytes], bool],
    peer: Callable[[bytes], tuple[bytes, Any] | None] | None = None,
) -> None:
    """Tell the codec's table that acks under this ack subject's consumer go to that
    consumer's batch sink alone, if the sublist's walk showed they all do and
    `local(prefix)` that no peer wants any of them. Or, when nothing here takes any of
    them and `peer(prefix)` names the one route that takes them all (the consumer's
    server), that they go to that route as RMSGs (`Route.forward_acks`)."""
    parts = subject.split(b".", ACK_TOKENS)
    if len(parts) <= ACK_TOKENS:
        return
    prefix = subject[: len(subject) - len(parts[-1]) - 1]
    if prefix + b"." in routes:  # learnt: Python routed an ack the codec left to it
        return
    match = sublist.decided_by(prefix)
    if match is not None and not match.queues and len(match.plain) == 1:
        sink = getattr(match.plain[0], "acks", None)
        if sink is not None and local(prefix):
            routes.learn_acks(prefix + b".", sink)
    elif peer is not None and (match is None or not (match.plain or match.queues)):
        found = peer(prefix)
        if found is not None and not sublist.reaches_under(prefix):
            routes.learn_peer_acks(prefix + b".", *found)


def learn_routed(
    routes: Any,
    sublist: Sublist[Any],
    subject: bytes,
    local: bool,
    forward: Callable[[bytes], Any] | None = None,
) -> None:
    """After a publish on `subject` was routed: its match taught to the table, or that
    Python routes it when a peer wants it (`local` false). Nothing if delivering changed
    the interest (the match is gone).

    One case a peer wants is learnt: nothing here takes the subject but a replicated
    stream's replica that is not leading (only the leader takes publishes, and its intake
    alone is announced) or nothing at all (a pull request to a consumer on the peer), and
    one route wants it. `forward(subject)` names that route's sink for runs of PUBs, which
    the codec then hands it as for an intake."""
    match = sublist.peek(subject)
    if match is not None and not local:
        nobody = not (match.plain or match.queues) or _followers_intake(match)
        sink = forward(subject) if forward is not None and nobody else None
        if sink is not None:
            routes.learn_intake(subject, sink)
        else:
            routes.learn(subject, None)
    elif match is not None:
        learn_route(routes, match, subject)


def _sole_intake(match: Match[Any]) -> Any | None:
    """The stream intake that is the match's one receiver, if it is (no queue group, one
    subscription, an internal one with an `intake`)."""
    if match.queues or len(match.plain) != 1:
        return None
    return getattr(match.plain[0], "intake", None)


def _followers_intake(match: Match[Any]) -> bool:
    """Whether a stream replica that is not leading is the subject's one receiver here:
    an intake not announced to the peers (`JetStream.set_stream_leader` announces the
    leader's alone, as it starts taking publishes)."""
    return _sole_intake(match) is not None and not match.plain[0].announced


def learn_route(routes: Any, match: Match[Any], subject: bytes) -> None:
    """Tell the codec's table where `subject` goes: to client subscriptions, to a stream's
    intake alone, or to Python: queue groups (a random member), other internal
    subscribers, filtered or limited subscriptions."""
    intake = _sole_intake(match)
    if intake is not None:
        routes.learn_intake(subject, intake)
    else:
        routes.learn(subject, _targets(match))


def learn_intake_tail(
    routes: Any,
    sublist: Sublist[Any],
    subject: bytes,
    local: Callable[[bytes], bool],
    forward: Callable[[bytes], Any] | None = None,
) -> None:
    """Tell the table that every `prefix.<token>` of this published subject goes to one
    stream alone: to its intake here, if the sublist's walk showed it is the prefix's one
    receiver and `local(prefix)` that no peer wants any of them; or, where the one
    receiver here is a replica that is not leading, to the route `forward(prefix)` names
    as the one that takes them all (the stream leader's server). A KV bucket's keys, each
    put once, then take the codec's runs as a repeated subject does (`learn_routed`)."""
    prefix, dot, _ = subject.rpartition(b".")
    if not dot or prefix in routes:
        return
    match = sublist.tail_of(prefix)
    intake = None if match is None else _sole_intake(match)
    if match is None or intake is None:
        return
    if local(prefix):
        routes.learn_intake_tail(prefix, intake)
    elif forward is not None and _followers_intake(match):
        sink = forward(prefix)
        if sink is not None:
            routes.learn_intake_tail(prefix, sink)


def learn_tail(
    routes: Any,
    sublist: Sublist[Any],
    subject: bytes,
    local: Callable[[bytes], bool],
    peer: Callable[[bytes], tuple[bytes, Any] | None] | None = None,
) -> None:
    """Tell the table where every subject of `subject`'s prefix and one more token goes,
    if the sublist's walk showed they all go to the same plain client subscriptions (a
    reply inbox's `_INBOX.<id>.*`) and `local(prefix)` that no peer wants any of them:
    the server's own replies then skip the match. Or, when nothing here can take any of
    them and `peer(prefix)` names the one route that takes them all (a client's inbox
    on another server), that they go to that route as RMSGs."""
    prefix, dot, _ = subject.rpartition(b".")
    if not dot:
        return
    match = sublist.tail_of(prefix)
    targets = _targets(match) if match is not None else None
    if targets and local(prefix):
        routes.learn_tail(prefix, targets)
    elif peer is not None and (match is None or not (match.plain or match.queues)):
        found = peer(prefix)
        if found is not None and not sublist.reaches_under(prefix):
            routes.learn_peer_tail(prefix, *found)


def _targets(match: Match[Any]) -> list[tuple[object, bytes, Subscription]] | None:
    """The (outlet, sid, subscription) of each receiver, or None where Python decides."""
    if match.queues:
        return None
    targets = []
    for sub in match.plain:
        if type(sub) is not Subscription or sub.filtered or sub.max_msgs or sub.conn.trace:
            return None
        targets.append((sub.conn.outlet, sub.sid, sub))
    return targets
