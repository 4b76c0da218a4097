"""One leafnode connection: an asyncio Protocol around the leafnode codec.

The accepting side (the hub) greets with INFO and waits for CONNECT; the dialling
side (the leaf) answers the hub's INFO with CONNECT. From then on both announce
their account's interest (LS+/LS-) and send each other the messages the other side
wants (LMSG). What the remote announced becomes subscriptions of this server's
account (`LeafSub`), so the router, the fast paths' checks and monitoring see a
leaf's interest the way they see a client's.

With TLS the hub's INFO goes in plain text and the handshake follows (the leaf
as TLS client, checking the hub's certificate and the host it dialled), as the
reference orders it; with `handshake_first` on both ends the handshake comes
first. CONNECT and everything after travel encrypted.

Compression is negotiated before CONNECT (`compressing.LeafCompression`): a leaf that
wants it answers the hub's INFO with an INFO of its own, then sends CONNECT once the
hub's INFO comes back compressed. A leaf that does not want it (or a hub that says
`off` or nothing) sends CONNECT at once, saying its mode in `compress_mode`. Each side
writes at the level it chose.
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from ingest.parser import leafnodes as proto
from ingest.parser import s2
from ingest.parser.fast import native
from ingest.parser.subjects import subject_matches
from ingest.server.accounts import limits
from ingest.server.auth.authenticator import AUTH_VIOLATION, Grant
from ingest.server.compression import (
    NOT_SUPPORTED,
)
from ingest.server.jwt.nkey import new_nonce
from ingest.server.leafnode.compressing import LeafCompression
from ingest.server.leafnode.interest import JETSTREAM_DENIED, Advertised, Denied
from ingest.server.link import TURN_MSGS, PeerLink
from ingest.server.settings import TLSConfig
from ingest.server.subscription import learn_routed

if TYPE_CHECKING:
    from ingest.server.accounts.registry import Account
    from ingest.server.cluster.settings import RouteURL
    from ingest.server.leafnode.manager import Leafnodes
    from ingest.server.leafnode.settings import RemoteLeaf
    from ingest.server.settings import Options
    from ingest.server.trouble import Trouble

log = logging.getLogger("jetlake")

frame_run = getattr(native, "frame_run", None)  # the compiled codec's; with `split_leaf`

WRONG_PORT = "attempted to connect to leaf node port"


class LeafSub:
    """The remote's interest in one subject (and queue group): delivering to it sends the
    message over the link. `weight` is the group's member count there."""

    __slots__ = ("account", "announced", "conn", "queue", "subject", "weight")
    leaf = True  # a queue group serves a message here only when no member is local

    def __init__(self, conn: LeafConnection, subject: str, queue: str | None, weight: int) -> None:
        self.conn = conn
        self.account = conn.account
        self.subject = subject
        self.queue = queue
        self.weight = weight
        self.announced = False

    def deliver(self, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        routed = self.conn.server.routed
        if routed != subject and not subject_matches(
            self.subject, subject.decode("utf-8", "surrogateescape")
        ):  # a JetStream delivery shown under its stored subject (not a nested route's)
            if reply and proto.shown_suffix_at(reply) < 0:
                reply = reply + b"@" + subject
            subject = routed
        self.conn.send_msg(self.queue, subject, reply, hdr, payload)


class LeafConnection(LeafCompression, PeerLink, asyncio.Protocol):
    tls_kind = "leafnode"
    trouble_kind = "leafs"

    def __init__(
        self,
        leafnodes: Leafnodes,
        cid: int,
        *,
        remote: RemoteLeaf | None = None,
        url: RouteURL | None = None,
    ) -> None:
        self.leafnodes = leafnodes
        server = leafnodes.server
        self.server = server
        self.cid = cid
        self.remote = remote  # set when this server dialled
        self.url = url
        self.solicited = remote is not None
        # Signed by a leaf whose remote logs in with a credentials file (a JWT user).
        self.nonce = new_nonce() if not self.solicited and server.auth.nonce_required else ""
        self.spoke = remote is not None and not remote.hub
        self.codec = proto.LeafCodec(max_payload=server.opts.max_payload)
        self.transport: asyncio.Transport | None = None
        self.host, self.port = "", 0
        self.account: Account = server.accounts.global_account
        self.grant = Grant()  # what system services answer about the "sender"
        self.echo = False  # the router never sends a message back where it came from
        self.remote_id = self.remote_name = self.remote_cluster = self.remote_domain = ""
        self.remote_account = ""  # the account the link is bound to on the other side
        self.registered = self.closed = False
        self.close_reason = ""
        self.connect_options: dict[str, Any] = {}
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.start = time.time()
        self.rtt = 0.0
        self.in_msgs = self.out_msgs = self.in_bytes = self.out_bytes = 0
        self.subs: dict[tuple[str, str | None], LeafSub] = {}
        self.advertised = Advertised()
        self.deny_out = Denied(JETSTREAM_DENIED)  # not sent to the remote
        self.deny_in = Denied(JETSTREAM_DENIED)  # not taken from the remote
        if remote is not None:
            self.deny_out.extend(remote.deny_exports)
            self.deny_in.extend(remote.deny_imports)
        self._held: list[Any] | None = None  # a message being sent, its queue groups growing
        self._out: list[bytes] = []
        self._dirty = False
        self._rtt_start = 0.0
        self._pings_out = 0
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.compression = ""  # the level this side writes at, once negotiated (/leafz)
        self._negotiated = False
        self._inflate: s2.Reader | None = None  # set once the remote writes S2

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port} - lid:{self.cid}"

    @property
    def link_opts(self) -> Options:
        return self.server.opts

    @property
    def link_trouble(self) -> Trouble:
        return self.server.trouble

    # ---- connection ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        peer = self.transport.get_extra_info("peername") or ("", 0)
        self.host, self.port = str(peer[0]), int(peer[1])
        self.leafnodes.connections.add(self)
        loop = asyncio.get_running_loop()
        if self.solicited:
            assert self.remote is not None
            if self.remote.tls is not None and self.remote.tls.handshake_first:
                self._start_tls(self.remote.tls)
            log.info(  # as the reference, before the hub has accepted the login
                "%s - Leafnode connection created for account: %s", self.where, self.remote.account
            )
            return
        log.info("%s - Leafnode connection created", self.where)
        tls = self.leafnodes.config.tls
        if tls is not None and tls.handshake_first:
            self._start_tls(tls)  # the INFO waits for the handshake
        mode = self.leafnodes.config.compression.mode
        info = self.leafnodes.info(self.cid, "" if mode == NOT_SUPPORTED else mode)
        if self.nonce:
            info["nonce"] = self.nonce
        self.queue(proto.encode_info(info))
        if tls is not None and not tls.handshake_first:
            self.flush()  # the INFO in plain text, then the handshake
            self._start_tls(tls)
        timeout = self.leafnodes.config.auth_timeout
        self._timers["auth"] = loop.call_later(timeout, self._auth_timeout)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        data = self._plain(data)
        if data and self._inflate is not None:
            try:
                data = self._inflate.feed(data)
            except Exception as exc:  # corrupt input, or a bug in the codec: this link only
                who = self.remote_name or "the remote"
                log.error("%s - Leafnode decompression error from %s: %s", self.where, who, exc)
                self.close("Read Error")
                return
        if not data:
            return
        try:
            ops = self.codec.receive_runs(data)
        except proto.PayloadTooLarge as exc:
            log.error("%s - maximum payload exceeded: %d vs %d", self.where, exc.size, exc.limit)
            self.queue(proto.encode_err(limits.MAX_PAYLOAD))
            self.close("Maximum Message Payload Exceeded", flush=True)
            return
        except proto.LeafProtocolError as exc:
            log.error("%s - Leafnode protocol error: %s", self.where, exc)
            self.queue(proto.encode_err("Protocol Violation"))
            self.close("Protocol Violation", flush=True)
            return
        self._take(ops, 0)

    def _take(self, ops: list[proto.LeafOp | proto.LRun], start: int) -> None:
        """Dispatch about `TURN_MSGS` messages, the rest on the next turn (`_next_turn`)."""
        taken, end = 0, len(ops)
        for at in range(start, end):
            if self.closed:
                return
            if taken >= TURN_MSGS:
                self._next_turn(partial(self._take, ops, at))
                return
            op = ops[at]
            if type(op) is proto.LRun:
                self._take_run(op)
                taken += len(op.payloads)
            elif self._fetch_first(op, ops, at):
                return
            else:
                self._dispatch(op)  # type: ignore[arg-type]
                taken += 1

    def _fetch_first(self, op: object, ops: list[proto.LeafOp | proto.LRun], at: int) -> bool:
        """An accepted leaf's CONNECT with a user JWT of an account the resolver must
        fetch is taken once the fetch ends, and what followed it after it (reading
        paused meanwhile), as a client's login waits."""
        if self.solicited or self.registered or not isinstance(op, proto.Connect):
            return False
        resolver = self.server.resolver
        fetch = resolver.fetching(op.options) if resolver is not None else None
        if fetch is None:
            return False
        if self.transport is not None:
            self.transport.pause_reading()

        def fetched(_: object) -> None:
            if self.closed:
                return
            if self.transport is not None:
                self.transport.resume_reading()
            self._dispatch(op)
            self._take(ops, at + 1)

        fetch.add_done_callback(fetched)
        return True

    def _dispatch(self, op: proto.LeafOp) -> None:
        if not self.registered and isinstance(op, proto.RMsg | proto.RSub | proto.RUnsub):
            self.queue(proto.encode_err(AUTH_VIOLATION))  # interest or messages before CONNECT
            self.close("Authentication Failure", flush=True)
            return
        if isinstance(op, proto.RMsg):
            self._inbound(op)
        elif isinstance(op, proto.RSub):
            self._remote_sub(op.subject, op.queue, op.weight)
        elif isinstance(op, proto.RUnsub):
            self._remote_unsub(op.subject, op.queue)
        elif isinstance(op, proto.Err):
            self._on_err(op.message)
        else:
            self._control(op)

    # ---- handshake ------------------------------------------------------------------------

    def _on_info(self, info: dict[str, Any]) -> None:
        if not self.solicited:
            # an accepting side learns the remote from its CONNECT; an INFO before it
            # is the leaf asking for compression
            if not self.registered and not self._negotiated:
                self._negotiate(info)
            return
        if self.registered:
            self.leafnodes.learn_urls(self, info.get("leafnode_urls"))
            return
        if not info.get("client_id") or info.get("leafnode_urls") is None:
            log.error("%s - attempted to connect to wrong port", self.where)
            self.close("Wrong Port")
            return
        self.remote_id = str(info.get("server_id") or "")
        self.remote_name = str(info.get("server_name") or self.remote_id)
        self.remote_cluster = str(info.get("cluster") or "")
        self.remote_domain = str(info.get("domain") or "")
        assert self.remote is not None
        if self.tls is None and (self.remote.tls is not None or info.get("tls_required")):
            self._start_tls(self.remote.tls or TLSConfig())  # CONNECT waits for it
        if not self._negotiated and self._negotiate(info):
            return  # CONNECT follows the hub's compressed INFO
        account = self.server.accounts.get(self.remote.account)
        if account is None:
            self.close("Missing Account")
            return
        self.account = account
        try:
            options = self.leafnodes.connect_options(self, info)
        except (OSError, ValueError) as exc:  # an unreadable or malformed credentials file
            log.error("%s - %s", self.where, exc)
            self.close("Authentication Failure")
            return
        self.queue(proto.encode_connect(options))
        self.leafnodes.learn_urls(self, info.get("leafnode_urls"))
        self._register()

    def _on_connect(self, options: dict[str, Any]) -> None:
        if self.solicited or self.registered:
            return
        leafnodes = self.leafnodes
        if "lang" in options:  # a client dialled the leafnode port
            log.error("%s - %s", self.where, WRONG_PORT)
            self.queue(proto.encode_err(WRONG_PORT))
            self.close("Wrong Port", flush=True)
            return
        account = leafnodes.authenticate(options, self.nonce)
        if account is None:
            self._refuse_login(options)
            return
        cluster = options.get("cluster")
        if isinstance(cluster, str) and cluster and cluster == leafnodes.cluster_name():
            message = "remote leafnode has same cluster name"
            log.error("%s - %s", self.where, message)
            self.queue(proto.encode_err(message))
            self.close("Cluster Names Identical", flush=True)
            return
        # Who logged in, for the account's connect events (a refused one's too).
        self.account, self.connect_options = account, options
        self.remote_name = str(options.get("name") or options.get("server_id") or "")
        links = len(leafnodes.links.get(account.name, ()))
        if not limits.leafnode_allowed(self.server, account, links):
            log.error("%s - %s", self.where, limits.MAX_CONNECTIONS)
            self.queue(proto.encode_err(limits.MAX_CONNECTIONS))
            self.close("Maximum Account Connections Exceeded", flush=True)
            for gone in self.server.accounts.on_disconnect:  # reported as it ends
                gone(self)
            return
        timer = self._timers.pop("auth", None)
        if timer is not None:
            timer.cancel()
        self.spoke = bool(options.get("hub"))  # the remote declared itself our hub
        self.remote_id = str(options.get("server_id") or self.remote_name)
        self.remote_cluster = cluster if isinstance(cluster, str) else ""
        domain = options.get("domain")
        self.remote_domain = domain if isinstance(domain, str) else ""
        self.remote_account = str(options.get("remote_account") or "")
        if not self.compression:  # the leaf did not negotiate: its CONNECT says why
            said = options.get("compress_mode")
            self.compression = said if isinstance(said, str) and said else NOT_SUPPORTED
        deny = options.get("deny_pub")
        if isinstance(deny, list):  # what the leaf will not import: never sent
            self.deny_out.extend(s for s in deny if isinstance(s, str))
        self._register()

    def _register(self) -> None:
        domain = self.leafnodes.domain
        if domain and self.remote_domain != domain:  # this domain's API stays on this side
            self.deny_out.extend([f"$JS.{domain}.API.>"])
        self.registered = True
        self.leafnodes.register(self)
        self.queue(self.advertised.snapshot())
        self._send_ping()

    def _on_err(self, message: str) -> None:
        log.error("%s - Leafnode Error '%s'", self.where, message)
        if "Loop detected" in message:
            self.leafnodes.loop_delay(self)  # the other side found the loop: wait as long
        reason = _reason_for(message)
        if reason is not None:
            self.close(reason)

    # ---- TLS ---------------------------------------------------------------------------------

    def _start_tls(self, config: TLSConfig) -> None:
        if self.url is None:
            self.begin_tls(self.leafnodes.tls_context(), config.timeout, dialled=None)
        else:
            assert self.remote is not None
            ctx = self.leafnodes.tls_context(self.remote)
            self.begin_tls(ctx, config.timeout, dialled=self.url.host)

    def _auth_timeout(self) -> None:
        if not self.registered and not self.closed:
            self.queue(proto.encode_err("Authentication Timeout"))
            self.close("Authentication Timeout", flush=True)

    # ---- the remote's interest --------------------------------------------------------------

    def _remote_sub(self, subject: str, queue: str | None, weight: int) -> None:
        leafnodes = self.leafnodes
        if subject == leafnodes.loop_subject(self.account):
            self._loop_detected()
            return
        if self.deny_out.interest(subject):
            return  # nothing on it would be sent
        key = (subject, queue)
        sub = self.subs.get(key)
        if sub is not None:  # a queue group's new weight
            delta = weight - sub.weight
            sub.weight = weight
            leafnodes.weight_changed(self, sub, delta, update=True)
            return
        sub = LeafSub(self, subject, queue, max(weight, 1))
        self.subs[key] = sub
        self.account.sublist.insert(subject, queue, sub)
        leafnodes.weight_changed(self, sub, sub.weight, update=False)

    def _remote_unsub(self, subject: str, queue: str | None) -> None:
        sub = self.subs.pop((subject, queue), None)
        if sub is not None:
            self.account.sublist.remove(subject, queue, sub)
            self.leafnodes.weight_changed(self, sub, -sub.weight, update=False)

    def _loop_detected(self) -> None:
        delay = self.leafnodes.loop_delay(self)
        message = (
            f'Loop detected for leafnode account="{self.account.name}". '
            f"Delaying attempt to reconnect for {_go_seconds(delay)}"
        )
        log.error("%s - %s", self.where, message)
        self.queue(proto.encode_err(message))
        self.close("Protocol Violation", flush=True)

    # ---- messages ----------------------------------------------------------------------------

    def _inbound(self, msg: proto.RMsg) -> None:
        """A message the remote sent: routed here as a publish from this link, serving only
        the queue groups it names (its own members served the others)."""
        size = len(msg.payload) + (len(msg.hdr) if msg.hdr else 0)
        self.in_msgs += 1
        self.in_bytes += size
        if self.deny_in.message(msg.subject):
            return
        queues = frozenset(q.decode("utf-8", "surrogateescape") for q in msg.queues)
        reply, shown = msg.reply, None
        at = proto.shown_suffix_at(reply)
        if at >= 0:
            reply, shown = reply[:at], reply[at + 1 :]
        self.server.route(
            self, msg.subject, reply, msg.hdr, msg.payload, size,
            shown=shown, account=self.account, queues=queues, local=self.spoke,
        )  # fmt: skip

    def _take_run(self, run: proto.LRun) -> None:
        """Plain messages on one subject (a publisher's stream across the link): framed in
        one compiled call into the client subscriptions the account's table learnt for
        the subject, else routed one by one, the table learning the subject as a client's
        PUB teaches it (the second time it is seen, and only if no peer wants it)."""
        subject, payloads = run.subject, run.payloads
        server = self.server
        sublist = self.account.sublist
        routes = sublist.routes
        if (
            routes is not None
            and self.registered
            and server.mapper is None
            and not self.deny_in.message(subject)
        ):
            framed = frame_run(routes, subject, payloads)
            if framed is not None:
                n, size = len(payloads), sum(map(len, payloads))
                self.in_msgs += n
                self.in_bytes += size
                server.in_msgs += n
                server.in_bytes += size
                server.count_tails(sublist, n, framed * n, framed * size)
                return
        learn = routes is not None and subject not in routes and sublist.peek(subject) is not None
        for payload in payloads:
            if self.closed:
                return
            self._dispatch(proto.RMsg("", subject, b"", (), None, payload))
        if learn and self.registered:
            learn_routed(routes, sublist, subject, server.local_only(self.account, subject))

    def send_msg(
        self, queue: str | None, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes
    ) -> None:
        """One delivery to the remote's interest. The router delivers a message once per
        matching subscription; the remote wants it once, naming each of its queue groups
        that is to get it, so deliveries of one message are gathered until the next
        message or the flush (the same message: the same match count of the account and
        the same subject and payload objects)."""
        held = self._held
        token = self.account.sublist.matches
        if held is not None and held[0] == token and held[1] is subject and held[4] is payload:
            if queue is not None:
                held[5].append(queue.encode("utf-8", "surrogateescape"))
            return
        if self.deny_out.message(subject):
            return
        self._emit()
        queues = [queue.encode("utf-8", "surrogateescape")] if queue is not None else []
        self._held = [token, subject, reply, hdr, payload, queues]
        if not self._dirty:
            self._dirty = True
            self.server.mark_dirty(self)  # type: ignore[arg-type]  # flushed like a client

    def _emit(self) -> None:
        held = self._held
        if held is None:
            return
        self._held = None
        _, subject, reply, hdr, payload, queues = held
        self.out_msgs += 1
        self.out_bytes += len(payload) + (len(hdr) if hdr else 0)
        self._out.append(proto.encode_lmsg(subject, reply, queues, hdr, payload))

    # ---- output -------------------------------------------------------------------------------

    def queue(self, data: bytes) -> None:
        if self.closed or not data:
            return
        self._emit()
        self._out.append(data)
        if not self._dirty:
            self._dirty = True
            self.server.mark_dirty(self)  # type: ignore[arg-type]

    def flush(self) -> None:
        self._dirty = False
        self._emit()
        self._write_out()

    def close(self, reason: str, *, flush: bool = False, abort: bool = False) -> None:
        if not self._closing(reason, flush=flush):
            return
        self._held = None
        self.leafnodes.unregister(self)
        for (subject, queue), sub in list(self.subs.items()):
            self.account.sublist.remove(subject, queue, sub)
            self.leafnodes.weight_changed(self, sub, -sub.weight, update=False)
        self.subs.clear()
        name = f" - Remote: {self.remote_name}" if self.remote_name else ""
        log.info("%s - Leafnode connection closed: %s%s", self.where, reason, name)
        self._hang_up(abort=abort)


def _reason_for(message: str) -> str | None:
    """Why an -ERR closes this end; None for any other error, after which the reference
    waits for the other end to close (a link refusing an oversized message, or the hub
    refusing this leaf's login: the leaf logs 'Client Closed' as the hub hangs up)."""
    if "Loop detected" in message:
        return "Protocol Violation"
    if "same cluster name" in message:
        return "Cluster Names Identical"
    return None


def _go_seconds(seconds: float) -> str:
    """A whole number of seconds as Go prints a Duration (30s, 1m0s)."""
    whole = int(seconds)
    return f"{whole // 60}m{whole % 60}s" if whole >= 60 else f"{whole}s"
