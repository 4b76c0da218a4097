"""One client connection: an asyncio Protocol around the sans-IO codec.

Outbound bytes are queued in the connection's `Outlet` and written once per loop
turn (the server flushes every connection that got data), so a burst of messages
costs one syscall per subscriber rather than one per message. A subscriber whose
unsent bytes pass `max_pending` is cut off as a slow consumer; nobody else waits.
When reading pauses and when writing gives up is `client_pacing.Pacing`.

With the compiled codec, a connection without per-message checks routes most
PUBs inside the codec (`_fast_path`): the sublist's `Routes` table says where a
subject goes, and Python learns an entry the second time it routes a subject
itself (`learn_route`); a one-off subject (a reply inbox) is never learned, unless
one stream alone takes every subject of its prefix (a KV bucket's keys:
`learn_intake_tail`).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from functools import partial
from typing import TYPE_CHECKING, Any

from ingest.parser import fast, nats
from ingest.parser.outlet import Outlet
from ingest.parser.subjects import is_valid_literal_subject, is_valid_subject
from ingest.server.accounts import limits
from ingest.server.auth.authenticator import AUTH_VIOLATION, AuthError, Grant
from ingest.server.client_pacing import Pacing
from ingest.server.closing import Closing
from ingest.server.jwt.nkey import new_nonce
from ingest.server.logs import TRACE
from ingest.server.subscription import (
    Subscription,
    learn_acks,
    learn_intake_tail,
    learn_routed,
)
from ingest.server.tls import TLSLayer
from ingest.server.trace_lines import describe, quoted

if TYPE_CHECKING:
    from ingest.server.host import Host

log = logging.getLogger("jetlake")


class Client(Closing, Pacing, asyncio.Protocol):
    """State of one TCP (or TLS) client connection."""

    def __init__(self, server: Host, cid: int) -> None:
        self.server = server
        self.cid = cid
        opts = server.opts
        self.codec = fast.server_codec(
            max_control_line=opts.max_control_line, max_payload=opts.max_payload
        )
        self.transport: asyncio.Transport | None = None
        self.subs: dict[bytes, Subscription] = {}
        self.grant = Grant()
        self.connect_options: dict[str, object] = {}  # a config reload judges them again
        self.account = server.accounts.global_account  # until CONNECT names another
        self.authenticated = not server.auth.required
        self.max_payload = opts.max_payload  # the account's, if lower, once bound to one
        self.nonce = new_nonce() if server.auth.nonce_required else ""  # signed by nkey users
        self.verbose = True  # the reference's defaults until CONNECT says otherwise
        self.pedantic = True
        self._pub_checks = True  # verbose, pedantic or a restricted grant: see _pub_allowed
        self._deny_filter = False  # see _filter_deliveries
        self.echo = True
        self.headers = False
        self.no_responders = False
        self.name = ""
        self.lang = ""
        self.version = ""
        self.host = ""
        self.port = 0
        self.start = time.time()
        self.last_activity = self.start
        self.in_msgs = self.in_bytes = 0
        self.pings_out = 0
        self.protocol = 0
        # RTT: estimated from INFO to CONNECT, then measured by each keepalive PING/PONG.
        self.rtt = 0.0
        self._rtt_start = time.monotonic()
        self._first_pong_sent = False
        self._pong_queued = False  # a PONG waits in the outlet: dispatch a read whole
        self.closed = False
        self.close_reason = ""
        self.outlet: Outlet = fast.outlet(self, server.mark_dirty)
        self._routes: Any = None  # the fast path's table, once CONNECT allows it
        self._fast_stats = getattr(self.codec, "take_stats", None)
        self._holds: set[str] = set()  # why reading is paused: see `_hold`
        self._deferred: list[nats.Op] | None = None  # what came while a login waits: `_fetch_first`
        self.trace = bool(server.opts.trace)  # -V: every control line, as the reference logs it
        # Deadlines: TLS handshake, authentication, next keepalive PING.
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.tls: TLSLayer | None = None
        self._written = 0  # bytes handed to the transport, for the write deadline

    # ---- asyncio Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        peer = transport.get_extra_info("peername") or ("", 0)
        self.host, self.port = str(peer[0]), int(peer[1])
        server = self.server
        if not server.register(self):
            self._write(server.info_for(self) + nats.encode_err("maximum connections exceeded"))
            self._close("Max Connections Exceeded", flush=True)
            return
        loop = asyncio.get_running_loop()
        ctx = self.own_tls()
        if ctx is not None:
            self.tls = TLSLayer(ctx)
            timeout = server.opts.tls.timeout
            self._timers["tls"] = loop.call_later(timeout, self._tls_timeout)
        if ctx is None or not server.opts.tls.handshake_first:
            self._write(server.info_for(self))  # plain INFO, then the client starts TLS
        if not self.authenticated:
            self._timers["auth"] = loop.call_later(server.opts.auth_timeout, self._auth_timeout)
        self._timers["ping"] = loop.call_later(server.opts.ping_interval, self._ping)

    def own_tls(self) -> ssl.SSLContext | None:
        """The TLS this connection speaks in its byte stream (a WebSocket's is the listener's)."""
        return self.server.tls_context

    def credentials(self, options: dict[str, object]) -> dict[str, object]:
        """CONNECT's credentials as the login reads them (a WebSocket's cookie adds a JWT)."""
        return options

    def authenticate(self, options: dict[str, object]) -> Grant:
        """The grant for CONNECT's credentials (a WebSocket listener may have its own)."""
        return self.server.auth.authenticate(options, nonce=self.nonce, host=self.host)

    def adjust_info(self, info: dict[str, Any]) -> None:
        """Change the INFO this connection is sent (a WebSocket's names its own port)."""

    def _tls_receive(self, tls: TLSLayer, data: bytes) -> bytes | None:
        """Decrypt; None when the handshake failed and the connection is gone."""
        was_established = tls.established
        try:
            plain = tls.receive(data)
        except ssl.SSLError as exc:
            log.error(
                "%s:%d - cid:%d - TLS handshake error: %s",
                self.host,
                self.port,
                self.cid,
                exc.reason or exc,
            )
            self._write(tls.outgoing())
            self._close("TLS Handshake Error")
            return None
        pending = tls.outgoing()
        if pending:
            self._write(pending)
        if tls.peer_closed:
            self._close("Client Closed", flush=True)
            return plain or None
        if tls.established and not was_established and self.server.opts.tls.handshake_first:
            self.queue(self.server.info_for(self))
        return plain

    def _tls_timeout(self) -> None:
        if self.tls is not None and not self.tls.established and not self.closed:
            self._close("TLS Handshake Error")

    def data_received(self, data: bytes) -> None:
        self.last_activity = time.time()
        if self.server.busy_poll is not None:
            self.server.busy_poll.read()
        tls = self.tls
        if tls is not None:
            plain = self._tls_receive(tls, data)
            if not plain:
                return
            data = plain
        before = self.in_msgs
        ops = self.codec.receive(data)
        if self._fast_stats is not None:
            self._count_fast(self._fast_stats())
        if len(ops) < 2 or self.transport is None or self._pong_queued:
            self._dispatch(ops)
        else:
            self._dispatch_halves(ops)
        stalled = self.server.stalled
        if stalled and (len(stalled) > 1 or self not in stalled):
            self._stall_if_published(before)

    def _count_fast(self, stats: tuple[int, int, int, int] | None) -> None:
        """The counters the fast path's messages (or acks) would have moved in `Server.route`."""
        if stats is None:
            return
        msgs, size, out_msgs, out_bytes = stats
        self.in_msgs += msgs
        self.in_bytes += size
        server = self.server
        server.in_msgs += msgs
        server.in_bytes += size
        server.out_msgs += out_msgs
        server.out_bytes += out_bytes
        sublist = self.account.sublist
        sublist.matches += msgs
        sublist.cache_hits += msgs

    @property
    def out_msgs(self) -> int:
        return self.outlet.msgs

    @property
    def out_bytes(self) -> int:
        return self.outlet.bytes

    def _dispatch(self, ops: list[nats.Op]) -> None:
        if self._deferred is not None:
            self._deferred.extend(ops)
            return
        pub = nats.Pub  # looked up once per read, not per message
        ack_run = fast.AckRun
        pub_run = fast.PubRun
        for op in ops:
            if self.closed:
                return
            if self.trace:
                self._trace("<<-", f"[{describe(op)}]")
                if type(op) is pub:
                    self._trace("<<-", f"MSG_PAYLOAD: [{quoted(op.payload)}]")
            kind = type(op)
            if kind is pub:
                self._on_pub(op)  # type: ignore[arg-type]
            elif kind is ack_run:
                self._on_acks(op)
            elif kind is pub_run:
                self._on_pubs(op)
            elif kind is nats.Ping:
                self._on_ping()
            elif kind is nats.Pong:
                if self.pings_out:
                    self.rtt = time.monotonic() - self._rtt_start
                self.pings_out = 0
            elif kind is nats.Sub:
                self._on_sub(op)  # type: ignore[arg-type]
            elif kind is nats.Unsub:
                self._on_unsub(op)  # type: ignore[arg-type]
            elif kind is nats.Connect:
                if not self.authenticated and self._fetch_first(op, ops):  # type: ignore[arg-type]
                    return
                self._on_connect(op)  # type: ignore[arg-type]
            else:
                self._on_violation(op)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self._close("Client Closed")

    # ---- operations -------------------------------------------------------------------

    def _on_connect(self, op: nats.Connect) -> None:
        o = self.connect_options = op.options
        self.verbose = bool(o.get("verbose", self.verbose))
        self.pedantic = bool(o.get("pedantic", self.pedantic))
        self.echo = bool(o.get("echo", True))
        self.headers = self.outlet.headers = self.codec.headers
        self.no_responders = bool(o.get("no_responders", False))
        self.name = str(o.get("name", "") or "")
        self.lang = str(o.get("lang", "") or "")
        self.version = str(o.get("version", "") or "")
        protocol = o.get("protocol", 0)
        self.protocol = protocol if type(protocol) is int else 0
        self.rtt = time.monotonic() - self._rtt_start
        if not self.authenticated:
            try:
                self.grant = self.authenticate(o)
            except AuthError as exc:
                who = f" - {exc.who}" if exc.who else ""
                peer = (self.host, self.port, self.cid)
                log.error("%s:%d - cid:%d - authentication error%s", *peer, who)
                if exc.detail:
                    log.debug("%s:%d - cid:%d - %s", *peer, exc.detail)
                self.send_err(AUTH_VIOLATION)
                self._close("Authentication Failure", flush=True)
                return
            self.account = self.server.accounts.ensure(self.grant.account)
            self.authenticated = True
            if 0 <= self.grant.max_payload < self.max_payload:
                self.max_payload = self.grant.max_payload  # a JWT user's own limit
            if self.grant.expires:
                wait = max(0.0, self.grant.expires - time.time())
                self._timers["expiry"] = asyncio.get_running_loop().call_later(
                    wait, self.cut_off, self.grant.expiry_error, "Authentication Expired"
                )
        if not limits.admit(self):
            return
        self.regrant(self.grant)
        if self.verbose:
            self.queue(nats.OK)

    def _fetch_first(self, op: nats.Connect, ops: list[nats.Op]) -> bool:
        """A JWT user of an account the resolver must fetch logs in once the fetch ends;
        what the client sent after CONNECT waits with it, in order."""
        resolver = self.server.resolver
        fetch = resolver.fetching(self.credentials(op.options)) if resolver is not None else None
        if fetch is None:
            return False
        self._deferred = ops[ops.index(op) + 1 :]
        self._hold("fetch")
        fetch.add_done_callback(lambda _: self._fetched(op))
        return True

    def _fetched(self, op: nats.Connect) -> None:
        rest, self._deferred = self._deferred or [], None
        if self.closed:
            return
        self._release("fetch")
        self._on_connect(op)
        self._dispatch(rest)

    def regrant(self, grant: Grant) -> None:
        """Take `grant`'s permissions (at CONNECT, or from a config reload): the checks
        each message pays follow them, and so does the tracing switch."""
        self.grant = grant
        self.trace = bool(self.server.opts.trace)
        self._pub_checks = self.verbose or self.pedantic or grant.restricted
        self._pub_checks = self._pub_checks or self.max_payload < self.server.opts.max_payload
        self._deny_filter = False
        for sub in list(self.subs.values()):
            self._filter_deliveries(sub)
        self._fast_path()

    def _filter_deliveries(self, sub: Subscription) -> None:
        """As on the reference, once a wildcard subscription overlaps a subscribe deny rule,
        every delivery on the connection is checked against the deny rules, on whichever
        subscription (a JetStream deliver subject too)."""
        grant = self.grant
        if not self._deny_filter and grant.restricted and grant.filters_delivery(sub.subject):
            self._deny_filter = True
            for other in self.subs.values():
                other.filtered = True
        sub.filtered = self._deny_filter

    def _fast_path(self) -> None:
        """Let the compiled codec route this connection's PUBs where nothing is checked per
        message: no verbose/pedantic/permissions, echo on, no tracing, no mappings. In a
        cluster it learns only subjects no peer wants (`Server.local_only`)."""
        if self._fast_stats is None:
            return
        server = self.server
        fit = not (self._pub_checks or self.trace or not self.echo)
        fit = fit and server.mapper is None
        self._routes = self.account.sublist.routes if fit else None
        self.codec.route_with(self._routes, self.no_responders)  # type: ignore[attr-defined]

    def _on_pub(self, op: nats.Pub) -> None:
        """The per-message path: what a connection without checks (the common case) skips
        is decided once per CONNECT, in `_pub_checks`."""
        if not self.authenticated:
            self._auth_violation()
            return
        subject = op.subject
        hdr = op.hdr
        payload = op.payload
        size = len(payload) if hdr is None else len(payload) + len(hdr)
        self.in_msgs += 1
        self.in_bytes += size
        if self._pub_checks and not self._pub_allowed(subject, size):
            return
        reply = op.reply
        routes = self._routes
        sublist = self.account.sublist
        # Learnt the second time: a subject seen once (a reply inbox) stays Python's.
        fresh = routes is not None and subject not in routes
        learn = fresh and sublist.peek(subject) is not None
        delivered = self.server.route(self, subject, reply, hdr, payload, size)
        if not delivered and reply and self.no_responders:
            self._no_responders(subject, reply)
        if learn:
            local = self.server.local_only(self.account, subject)
            cluster = self.server.cluster
            forward = partial(cluster.forwarder, self.account.name) if cluster else None
            learn_routed(routes, sublist, subject, local, forward)
        elif routes is not None and subject.startswith(b"$JS.ACK."):
            cluster = self.server.cluster
            peer = partial(cluster.sole_route_below, self.account.name) if cluster else None
            local = partial(self.server.local_under, self.account)
            learn_acks(routes, sublist, subject, local, peer)
        elif fresh:
            local = partial(self.server.local_under, self.account)
            cluster = self.server.cluster
            forward = partial(cluster.tail_forwarder, self.account.name) if cluster else None
            learn_intake_tail(routes, sublist, subject, local, forward)

    def _on_acks(self, run: Any) -> None:
        """Plain acks the codec gathered for one consumer: counted as the PUBs they are,
        applied in one call (the codec only gathers for the consumer's own sink, so
        nothing else would have received them, and an internal receiver is not `out`)."""
        n = len(run.seqs) // 3
        self._count_fast((n, run.size, 0, 0))
        if run.frames is not None:  # the consumer's server is a peer: one route write
            run.sink.forward_acks(run.frames, n, run.size)
        else:
            run.sink(run.seqs)

    def _on_pubs(self, run: Any) -> None:
        """Plain PUBs the codec gathered for a stream: counted as the PUBs they are (their
        one receiver, the stream, is internal: not `out`), admitted and proposed in one call."""
        n = len(run.payloads)
        self._count_fast((n, run.size, 0, 0))
        run.sink(run.subject, run.replies, run.payloads)

    def _pub_allowed(self, subject: bytes, size: int) -> bool:
        """Account payload limit, pedantic subject check, publish permission, verbose +OK;
        False when refused."""
        if not limits.payload_allowed(self, size):
            return False
        if self.pedantic and not is_valid_literal_subject(subject.decode("utf-8", "replace")):
            self.send_err("Invalid Publish Subject")
        if self.grant.restricted and not self.grant.can_publish(subject):
            self.send_err(
                f'Permissions Violation for Publish to "{subject.decode("utf-8", "replace")}"'
            )
            return False
        if self.verbose:
            self.queue(nats.OK)
        return True

    def _no_responders(self, subject: bytes, reply: bytes) -> None:
        """The 503 goes straight to the requester's own inbox subscription."""
        hdr = b"NATS/1.0 503\r\nNats-Subject: " + subject + b"\r\n\r\n"
        for sub in self.account.sublist.match(reply).plain:
            if sub.conn is self:
                sub.deliver(reply, b"", hdr, b"")
                return

    def _on_sub(self, op: nats.Sub) -> None:
        if not self.authenticated:
            self._auth_violation()
            return
        if not is_valid_subject(op.subject):
            self.send_err("Invalid Subject")
            return
        grant = self.grant
        if grant.restricted and not grant.can_subscribe(op.subject):
            if op.queue:
                self.send_err(
                    f'Permissions Violation for Subscription to "{op.subject}" '
                    f'using queue "{op.queue}"'
                )
            else:
                self.send_err(f'Permissions Violation for Subscription to "{op.subject}"')
            return
        if op.sid not in self.subs:
            if not limits.subscription_allowed(self):
                return
            sub = Subscription(self, op.subject, op.queue, op.sid)
            self._filter_deliveries(sub)
            self.subs[op.sid] = sub
            self.account.sublist.insert(op.subject, op.queue, sub)
            if self.server.cluster is not None:
                self.server.cluster.local_added(op.subject, op.queue, self.account.name)
        if self.verbose:
            self.queue(nats.OK)

    def _on_unsub(self, op: nats.Unsub) -> None:
        sub = self.subs.get(op.sid)
        if sub is not None:
            if op.max_msgs and sub.delivered < op.max_msgs:
                sub.max_msgs = op.max_msgs
                routes = self.account.sublist.routes
                if routes is not None:
                    routes.clear()  # the codec must not deliver past the limit
            else:
                self.drop_sub(sub)
        if self.verbose:
            self.queue(nats.OK)

    def _on_violation(self, op: nats.Violation) -> None:
        if op.error is not None:
            self.send_err(op.error)
        self._close(
            "Protocol Violation"
            if op.error != nats.ERR_MAX_PAYLOAD
            else "Maximum Payload Exceeded",
            flush=True,
        )

    def drop_sub(self, sub: Subscription) -> None:
        if self.subs.pop(sub.sid, None) is not None:
            self.account.sublist.remove(sub.subject, sub.queue, sub)
            if self.server.cluster is not None:
                self.server.cluster.local_removed(sub.subject, sub.queue, self.account.name)

    # ---- timers -----------------------------------------------------------------------

    def _auth_timeout(self) -> None:
        if not self.authenticated and not self.closed:
            self.send_err("Authentication Timeout")
            self._close("Authentication Timeout", flush=True)

    def cut_off(self, error: str, reason: str) -> None:
        """End an authenticated connection whose credentials stopped counting (a JWT that
        expired or was revoked), with the reference's -ERR (none when `error` is empty)."""
        if not self.closed:
            if error:
                self.send_err(error)
            self._close(reason, flush=True)

    def _auth_violation(self) -> None:
        self.send_err(AUTH_VIOLATION)
        self._close("Authentication Failure", flush=True)

    def _on_ping(self) -> None:
        """PONG; after the first one, clients that take async INFOs (protocol 1) get the
        INFO answering their CONNECT, as from the reference (it names their account)."""
        self.queue(nats.PONG)
        self._pong_queued = True
        if not self._first_pong_sent:
            self._first_pong_sent = True
            if self.protocol >= 1:
                self.queue(self.server.info_for(self, connect_info=True))

    def _ping(self) -> None:
        if self.closed:
            return
        opts = self.server.opts
        if self.pings_out + 1 > opts.ping_max:
            self.server.trouble.stale["clients"] += 1
            self.send_err("Stale Connection")
            self._close("Stale Connection", flush=True)
            return
        self.pings_out += 1
        self._rtt_start = time.monotonic()
        self.queue(nats.PING)
        self._timers["ping"] = asyncio.get_running_loop().call_later(opts.ping_interval, self._ping)

    # ---- output -----------------------------------------------------------------------

    def _trace(self, direction: str, text: str) -> None:
        who = f' - "v{self.version}:{self.lang}"' if self.lang else ""
        where = f"{self.host}:{self.port} - cid:{self.cid}{who}"
        log.log(TRACE, "%s - %s %s", where, direction, text)

    def send_err(self, message: str) -> None:
        self.queue(nats.encode_err(message))

    def trace_out(self, data: bytes) -> None:
        line, _, rest = data.partition(b"\r\n")
        self._trace("->>", f"[{line.decode('utf-8', 'replace')}]")
        if line.startswith((b"MSG ", b"HMSG ")):
            self._trace("->>", f"MSG_PAYLOAD: [{quoted(rest[:-2])}]")

    def queue(self, data: bytes) -> None:
        if self.trace:
            self.trace_out(data)
        if self.outlet.write(data):
            self.server.mark_dirty(self)

    def flush(self) -> None:
        """Hand queued bytes to the transport; cut the connection off if it cannot keep up."""
        self._pong_queued = False
        data = self.outlet.take()
        transport = self.transport
        if transport is None or self.closed or not data:
            return
        self._write(data if self.tls is None else self.tls.encrypt(data))
        pending = transport.get_write_buffer_size()
        if pending > self.server.opts.max_pending // 2:
            self.server.stalled.add(self)  # its publishers wait a little: see _stall_if_published
        if pending > self.server.opts.max_pending:
            self.server.trouble.slow["clients"] += 1
            log.info(
                "%s:%d - cid:%d - Slow Consumer Detected: MaxPending of %d Exceeded",
                self.host,
                self.port,
                self.cid,
                self.server.opts.max_pending,
            )
            self._close("Slow Consumer (Pending Bytes)", abort=True)

    def _write(self, data: bytes) -> None:
        if self.transport is not None:
            self._written += len(data)
            self.transport.write(data)

    def close_with(self, reason: str, *, flush: bool = True) -> None:
        self._close(reason, flush=flush)

    @property
    def takes_async_info(self) -> bool:
        """Whether an INFO sent now reaches a client that reads it (lame duck, peers)."""
        return self.protocol >= 1 and self._first_pong_sent

    def _close(self, reason: str, *, flush: bool = False, abort: bool = False) -> None:
        if not self._closing(reason, flush=flush):
            return
        for sub in list(self.subs.values()):
            self.drop_sub(sub)
        self.outlet.close()
        self.server.stalled.discard(self)
        self.server.unregister(self)
        limits.leave(self)
        self._hang_up_socket(abort=abort)
