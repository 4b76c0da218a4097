"""One route connection to a peer server: an asyncio Protocol around the route codec.

Either side may have dialled. Both send their INFO at once; the dialler also
sends CONNECT (credentials, cluster name). A route is handed to the mesh for
registration once it knows who the peer is: on the dialler when the peer's
INFO arrives, on the accepting side when CONNECT has passed the checks too.
Output is queued and flushed once per loop turn, like a client's.

With `cluster { tls {} }` a route starts with the TLS handshake, before either
INFO (the reference's order): the dialler is the TLS client. What is queued
meanwhile waits for the handshake; a failed one is logged naming the peer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from ingest.parser import routes as proto
from ingest.server.auth.authenticator import AUTH_VIOLATION
from ingest.server.cluster.delivery_runs import (
    delivery_run_end,
    frame_deliveries,
    is_delivery,
    sole_receiver,
)
from ingest.server.cluster.settings import RouteURL, RouteURLError, parse_route_url
from ingest.server.link import TURN_MSGS, PeerLink
from ingest.server.subscription import learn_acks

if TYPE_CHECKING:
    from ingest.server.accounts.registry import Account
    from ingest.server.cluster.ports import RouteOwner
    from ingest.server.settings import Options
    from ingest.server.trouble import Trouble

log = logging.getLogger("jetlake")

# Routes carry more than clients' messages: Raft appends and snapshots of whole streams.
# The reference puts no limit on a route's messages; this one only bounds a runaway peer.
ROUTE_MAX_PAYLOAD = 64 * 1024 * 1024
# How long a connection that lost to its twin is still read: the peer may have sent on it
# before it learnt of the twin (both ends decide alone), and those messages are delivered.
DUPLICATE_GRACE = 2.0
ACK_PREFIX = b"$JS.ACK."


class Route(PeerLink, asyncio.Protocol):
    tls_kind = "route"
    trouble_kind = "routes"

    def __init__(
        self, cluster: RouteOwner, rid: int, *, dialled: RouteURL | None, configured: bool
    ) -> None:
        self.cluster = cluster
        self.rid = rid
        self.solicited = dialled is not None
        self.dialled = dialled
        self.configured = configured
        self.codec = proto.RouteCodec(
            max_payload=max(cluster.server.opts.max_payload, ROUTE_MAX_PAYLOAD)
        )
        self.transport: asyncio.Transport | None = None
        self.host, self.port = "", 0
        self.local_port = 0
        self.remote_id = ""
        self.remote_name = ""
        self.remote_info: dict[str, Any] = {}
        self.connected = self.solicited  # an accepted route awaits its CONNECT
        self.got_connect = False
        self.registered = False
        self.superseded = False  # lost to a twin connection: read, never written, then closed
        # Interest taken over from the twin this route replaced, not yet announced here
        # again: the peer's snapshot (ended by its first PING) confirms or drops it.
        self.inherited: set[tuple[str, str, str | None]] = set()
        self.closed = False
        self.close_reason = ""
        self.lame_duck = False
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.start = self.last_activity = time.time()
        self.rtt = 0.0
        self.in_msgs = self.out_msgs = self.in_bytes = self.out_bytes = 0
        self._rtt_start = 0.0
        self._pings_out = 0
        self._out: list[bytes] = []
        self._dirty = False
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.connect_options: dict[str, Any] = {}  # an accepted route's CONNECT

    # ---- identity ---------------------------------------------------------------------

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port} - rid:{self.rid}"

    @property
    def link_opts(self) -> Options:
        return self.cluster.server.opts

    @property
    def link_trouble(self) -> Trouble:
        return self.cluster.server.trouble

    @property
    def solicitor_key(self) -> tuple[str, int]:
        """Names this TCP connection the same way on both ends: who dialled, from which port.

        Two servers that dialled each other keep the connection with the smaller key,
        so both drop the same one."""
        if self.solicited:
            return (self.cluster.server.server_id, self.local_port)
        return (self.remote_id, self.port)

    def route_url(self) -> str | None:
        """Where other servers can dial this peer, from its INFO (`ip`)."""
        url = self.remote_info.get("ip")
        if not isinstance(url, str):
            return None
        try:
            target = parse_route_url(url)
        except RouteURLError:
            return None
        if target.host in ("0.0.0.0", "::"):  # the peer listens everywhere: use its address
            where = f"[{self.host}]" if ":" in self.host else self.host
            return f"nats-route://{where}:{target.port}/"
        return url

    def client_urls(self) -> list[str]:
        urls = self.remote_info.get("connect_urls")
        return [u for u in urls if isinstance(u, str)] if isinstance(urls, list) else []

    # ---- connection ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        peer = self.transport.get_extra_info("peername") or ("", 0)
        self.host, self.port = str(peer[0]), int(peer[1])
        self.local_port = int((self.transport.get_extra_info("sockname") or ("", 0))[1])
        log.info("%s - Route connection created", self.where)
        cluster = self.cluster
        cluster.connections.add(self)
        self._start_tls()
        if self.solicited:
            self.queue(proto.encode_connect(cluster.connect_options(self.dialled)))
            log.debug("%s - Route connect msg sent", self.where)
        self.queue(proto.encode_info(cluster.info()))
        loop = asyncio.get_running_loop()
        if not self.solicited:
            self._timers["auth"] = loop.call_later(cluster.config.auth_timeout, self._auth_timeout)

    def _start_tls(self) -> None:
        contexts = self.cluster.tls_contexts
        if contexts is None:
            return
        server_side, client_side = contexts
        timeout = self.cluster.config.tls.timeout  # type: ignore[union-attr]
        if self.dialled is None:
            self.begin_tls(server_side, timeout, dialled=None)
        else:
            self.begin_tls(client_side, timeout, dialled=self.dialled.host)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_activity = time.time()
        data = self._plain(data)
        if not data:
            return
        try:
            ops = self.codec.receive_walked(data)
        except proto.RouteProtocolError as exc:
            log.error("%s - Route protocol error: %s", self.where, exc)
            self.close("Protocol Violation")
            return
        self._take(ops, 0)

    def _take(self, ops: list[proto.RouteOp], at: int) -> None:
        """Dispatch about `TURN_MSGS` messages, the rest on the next turn (`_next_turn`)."""
        taken = 0
        while at < len(ops) and not self.closed:
            if taken >= TURN_MSGS:
                self._next_turn(partial(self._take, ops, at))
                return
            end = _run_end(ops, at)
            taken += end - at
            if end - at > 1:
                at += self._take_run(cast(list[proto.RMsg], ops[at:end]))
            elif type(ops[at]) is proto.RMsg and is_delivery(cast(proto.RMsg, ops[at])):
                end = delivery_run_end(ops, at)
                taken += end - at - 1
                at += self._take_deliveries(cast(list[proto.RMsg], ops[at:end]))
            for op in ops[at:end]:
                if self.closed:
                    return
                self._dispatch(op)
            at = end

    def _take_run(self, msgs: list[proto.RMsg]) -> int:
        """How many of a run of plain messages (no header block, no queue group) were taken
        in one call rather than routed one by one (`route_from_peer`): all of them where
        they share a subject that a stream's intake alone takes here (a peer's client
        publishing to this stream leader), as for a client's run (`PubRun`); else the
        leading ones without a reply that the compiled table frames straight to the
        client inboxes it learnt (PubAcks for a client here, `learn_tail`)."""
        if not (self.registered or self.superseded):
            return 0
        server = self.cluster.server
        account = server.accounts.get(msgs[0].account)
        if account is None:
            return 0
        sublist = account.sublist
        payloads = [m.payload for m in msgs]
        subject = msgs[0].subject
        taken = 0
        if all(m.subject == subject for m in msgs):
            match = sublist.match(subject)
            sub = match.plain[0] if len(match.plain) == 1 and not match.queues else None
            intake = getattr(sub, "intake", None)
            if intake is not None and getattr(sub, "announced", False):  # not a follower's
                intake(subject, [m.reply for m in msgs], payloads)
                taken = len(msgs)
                sublist.matches += taken - 1  # as one match a message would have counted
                sublist.cache_hits += taken - 1
        elif sublist.routes is not None and server.mapper is None:
            answers = [(m.subject, m.payload) for m in msgs if not m.reply]
            if len(answers) == len(msgs) and subject.startswith(ACK_PREFIX):
                taken = self._take_acks(account, answers)
            elif len(answers) == len(msgs):
                deliver = sublist.routes.deliver_tails
                taken, _, framed, framed_bytes = deliver(answers, 0, peers=False)
                server.count_tails(sublist, taken, framed, framed_bytes)
        size = sum(map(len, payloads[:taken]))
        self.in_msgs += taken
        self.in_bytes += size
        server.in_msgs += taken
        server.in_bytes += size
        return taken

    def _take_deliveries(self, msgs: list[proto.RMsg]) -> int:
        """How many of a run of a consumer's deliveries to one inbox were framed into its
        one client subscription here in one pass (`frame_deliveries`): all, or none
        where Python decides each (`route_from_peer`)."""
        if not (self.registered or self.superseded):
            return 0
        server = self.cluster.server
        account = server.accounts.get(msgs[0].account)
        sub = None if account is None else sole_receiver(account.sublist, msgs[0].subject)
        if account is None or sub is None:
            return 0
        routed, delivered = frame_deliveries(sub, msgs)
        taken = len(msgs)
        account.sublist.matches += taken - 1  # as one match a message would have counted
        account.sublist.cache_hits += taken - 1
        self.in_msgs += taken
        self.in_bytes += routed
        server.in_msgs += taken
        server.in_bytes += delivered
        server.out_msgs += taken
        server.out_bytes += delivered
        return taken

    def _take_acks(self, account: Account, acks: list[tuple[bytes, bytes]]) -> int:
        """How many of a run of acks from the peer (its client acking a consumer this
        server leads) went to their consumers' sinks in one call each, as a client's do
        (`AckRun`). The consumer's prefix is learnt here from the walk that routed the
        peer's earlier acks one by one, under the client path's rule (`learn_acks`)."""
        sublist = account.sublist
        routes = sublist.routes
        taken = routes.take_acks(acks)
        if taken == 0:
            server = self.cluster.server
            learn_acks(routes, sublist, acks[0][0], partial(server.local_under, account))
            taken = routes.take_acks(acks)
        sublist.matches += taken  # as the match of each would have counted
        sublist.cache_hits += taken
        return taken

    def _dispatch(self, op: proto.RouteOp) -> None:
        cluster = self.cluster
        if isinstance(op, proto.RMsg):
            if self.registered or self.superseded:
                self.in_msgs += 1
                self.in_bytes += len(op.payload) + (len(op.hdr) if op.hdr else 0)
                cluster.deliver_inbound(op)
        elif isinstance(op, proto.RSub):
            if (route := self._speaks_for()) is not None:
                route.inherited.discard((op.account, op.subject, op.queue))
                cluster.remote.add(route, op.subject, op.queue, op.weight, op.account)
                cluster.remote_changed(op.account, op.subject)
        elif isinstance(op, proto.RUnsub):
            if (route := self._speaks_for()) is not None:
                route.inherited.discard((op.account, op.subject, op.queue))
                cluster.remote.remove(route, op.subject, op.queue, op.account)
                cluster.remote_changed(op.account, op.subject)
        elif isinstance(op, proto.Err):
            log.error("%s - Route Error '%s'", self.where, op.message)
            self.close(_reason_for(op.message))
        else:
            if self.inherited and isinstance(op, proto.Ping) and self.registered:
                cluster.settle(self)  # the peer pings once its snapshot here is sent
            self._control(op)

    def _speaks_for(self) -> Route | None:
        """The route the peer's RS+ and RS- on this one apply to: this one, or for a twin
        that lost, the peer's route (the peer announces here until it learns of it, and
        a requester's inbox announced so must reach the responder's server)."""
        if self.registered:
            return self
        return self.cluster.routes.get(self.remote_id) if self.superseded else None

    def _on_connect(self, options: dict[str, Any]) -> None:
        if self.got_connect or self.solicited:
            return
        self.got_connect = True
        self.connect_options = options
        cluster = self.cluster
        if not self._authorized(options):
            return
        theirs = options.get("cluster")
        if isinstance(theirs, str) and not cluster.accepts_cluster_name(
            theirs, dynamic=bool(options.get("dynamic"))
        ):
            message = (
                f'Rejecting connection, cluster name "{theirs}" does not match "{cluster.name}"'
            )
            log.error("%s - %s", self.where, message)
            self.queue(proto.encode_err(message))
            self.close("Cluster Name Conflict", flush=True)
            log.error("%s - cluster name from remote server conflicts", self.where)
            return
        timer = self._timers.pop("auth", None)
        if timer is not None:
            timer.cancel()
        self.connected = True
        if self.remote_id:
            self.cluster.register(self)

    def _authorized(self, options: dict[str, Any]) -> bool:
        """Whether an accepted route's CONNECT carries the cluster's credentials; if not,
        the peer is told and the route closed."""
        config = self.cluster.config
        if config.username is None or (
            options.get("user") == config.username and options.get("pass") == config.password
        ):
            return True
        self._refuse_login(options)
        return False

    def recheck_authorization(self) -> None:
        """After a config reload: an accepted route whose credentials no longer pass is
        closed, as on the reference (a route this server dialled keeps its own)."""
        if self.got_connect and not self.closed:
            self._authorized(self.connect_options)

    def _on_info(self, info: dict[str, Any]) -> None:
        server_id = info.get("server_id")
        if not isinstance(server_id, str):
            return
        if self.remote_id and server_id != self.remote_id:
            self.cluster.learn_peer(info)  # gossip: another member of the cluster
            return
        if self.remote_id:
            self.remote_info.update(info)  # the peer's own update (client URLs, lame duck)
            self.lame_duck = bool(info.get("ldm"))
            self.cluster.peer_updated(self)
            return
        self.remote_id = server_id
        self.remote_name = str(info.get("name") or server_id)
        self.remote_info = dict(info)
        if not self.cluster.check_peer(self):
            return
        if self.connected:
            self.cluster.register(self)

    def supersede(self, heir: Route | None = None) -> None:
        """A twin connection to the same peer won: stop sending here (its interest goes
        with it, or to the `heir`), deliver what the peer already sent, and close after
        the grace."""
        self.cluster.retire(self, heir)
        self.superseded = True  # what is queued still goes: a CONNECT the peer is waiting for
        loop = asyncio.get_running_loop()
        self._timers["duplicate"] = loop.call_later(DUPLICATE_GRACE, self.close, "Duplicate Route")

    def on_registered(self) -> None:
        """Measure the round trip now and keep the route alive from here on."""
        self._send_ping()

    # ---- output -------------------------------------------------------------------------

    def queue(self, data: bytes) -> None:
        if self.closed or self.superseded:
            return
        self._out.append(data)
        if not self._dirty:
            self._dirty = True
            self.cluster.server.mark_dirty(self)

    def send_msg(self, data: bytes, size: int) -> None:
        self.out_msgs += 1
        self.out_bytes += size
        self.queue(data)

    def send_run(self, data: bytes, msgs: int, size: int) -> None:
        """`msgs` RMSGs framed together (`Routes.deliver_tails`), `size` payload bytes."""
        self.out_msgs += msgs
        self.out_bytes += size
        self.queue(data)

    def forward_acks(self, data: bytes, msgs: int, size: int) -> None:
        """Messages of a client here framed as RMSGs for this route's peer (its plain acks
        to a consumer there, framed by its codec: `AckRun.frames`), `size` payload bytes:
        one write, counted as routed ones are."""
        self.send_run(data, msgs, size)
        server = self.cluster.server
        server.out_msgs += msgs
        server.out_bytes += size

    def forward_run(
        self, account: bytes, subject: bytes, replies: list[bytes], payloads: list[bytes]
    ) -> None:
        """A client's plain PUBs on `subject`, gathered by its codec, that this route alone
        takes (`Cluster.forwarder`): as RMSGs in one write, counted as routed ones are."""
        head = b"RMSG " + account + b" " + subject + b" "
        data = b"".join(
            [
                head + (reply + b" " if reply else b"") + b"%d\r\n%b\r\n" % (len(payload), payload)
                for reply, payload in zip(replies, payloads, strict=True)
            ]
        )
        self.forward_acks(data, len(payloads), sum(map(len, payloads)))

    def forward_one(self, account: bytes, subject: bytes, payload: bytes) -> None:
        """`forward_run` of one message without a reply."""
        data = b"RMSG %b %b %d\r\n%b\r\n" % (account, subject, len(payload), payload)
        self.forward_acks(data, 1, len(payload))

    def flush(self) -> None:
        self._dirty = False
        self._write_out()

    def pending(self) -> int:
        if self.transport is None or self.closed:
            return 0
        return self.transport.get_write_buffer_size()

    # ---- timers and closing ---------------------------------------------------------------

    def _auth_timeout(self) -> None:
        if not self.connected and not self.closed:
            self.queue(proto.encode_err("Authentication Timeout"))
            self.close("Authentication Timeout", flush=True)

    def close(self, reason: str, *, flush: bool = False, abort: bool = False) -> None:
        if not self._closing(reason, flush=flush):
            return
        remote = f" - Remote: {self.remote_name}" if self.registered else ""
        self.cluster.unregister(self)
        log.info("%s - Router connection closed: %s%s", self.where, reason, remote)
        self._hang_up(abort=abort)


def _reason_for(message: str) -> str:
    """The close reason the reference logs for an -ERR from a peer."""
    if "cluster name" in message:
        return "Cluster Name Conflict"
    if message == AUTH_VIOLATION:
        return "Authentication Failure"
    return "Parse Error"


def _run_end(ops: list[proto.RouteOp], at: int) -> int:
    """Where the run that starts at `ops[at]` ends: plain RMSGs (no header block, no queue
    group to serve) in one account; any other operation is a run of one."""
    first = ops[at]
    if type(first) is not proto.RMsg or first.hdr is not None or first.queues:
        return at + 1
    end = at + 1
    while end < len(ops):
        op = ops[end]
        if type(op) is not proto.RMsg or op.hdr is not None or op.queues:
            break
        if op.account != first.account:
            break
        end += 1
    return end
