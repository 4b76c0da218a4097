"""The core NATS server: listeners, the connection registry and message routing.

JetStream and monitoring plug in from outside: JetStream through the internal
`Messaging` methods (`server_messaging.ServerMessaging`), exactly like an in-process
client.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import socket
import ssl
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from ingest.parser import nats
from ingest.server.accounts.registry import Account, Accounts
from ingest.server.accounts.traffic import ClientTraffic
from ingest.server.auth.authenticator import Authenticator
from ingest.server.auth.resolver import Resolver
from ingest.server.busypoll import BusyPoll
from ingest.server.client import Client
from ingest.server.cluster.settings import hostport, local_addresses
from ingest.server.mappings import SubjectMapper
from ingest.server.server_messaging import ServerMessaging
from ingest.server.sublist import Sublist
from ingest.server.subscription import learn_tail
from ingest.server.trouble import Trouble
from ingest.server.version import JETLAKE_VERSION, VERSION

if TYPE_CHECKING:
    from ingest.server.cluster.mesh import Cluster

log = logging.getLogger("jetlake")


def new_server_id() -> str:
    """An ID shaped like the reference's (56 upper-case base32 chars starting with N)."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
    return "N" + "".join(secrets.choice(alphabet) for _ in range(55))


class Server(ServerMessaging):
    def __init__(self, opts: Any) -> None:
        self.opts = opts
        self.server_id = new_server_id()
        self.server_name = opts.server_name or self.server_id
        self.resolver = Resolver(opts) if opts.operators else None  # operator mode
        self.auth = Authenticator(opts, self.resolver.store if self.resolver else None)
        self.sublist: Sublist[Any] = Sublist()  # the global account's
        self.accounts = Accounts(opts, self.sublist, jetstream=opts.jetstream.enabled)
        if self.resolver is not None:
            self.resolver.register(self.accounts, jetstream=opts.jetstream.enabled)
        # None without mappings: route() tests it for every message.
        self.mapper = SubjectMapper(opts.mappings) if opts.mappings else None
        self.clients: dict[int, Client] = {}
        self.tls_context: ssl.SSLContext | None = None
        self.start_time = time.time()
        self.config_load_time = self.start_time  # a config reload moves it (/varz)
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0
        self.trouble = Trouble()  # slow consumers, stale connections, stalls
        self.client_traffic = ClientTraffic(self.accounts)
        self.stalled: set[Client] = set()  # clients over half their max_pending
        self.total_connections = 0
        self.lame_duck = False
        self.jetstream: Any = None  # set by the composition root when -js is on
        self.cluster_listeners: list[Callable[[], None]] = []  # peers came or went
        self.jetstream_cluster: Any = None  # the meta group's controller, when clustered
        self.account_jetstreams: Any = None  # the accounts' engines, when -js is on
        self.cluster: Cluster | None = None  # set by the composition root with --cluster
        self.mqtt: Any = None  # the MQTT listener, set by the composition root with mqtt {}
        self.websocket: Any = None  # the WebSocket listener, likewise with websocket {}
        self.leafnodes: Any = None  # the leafnode links, set by the composition root
        self.sharing: Any = None  # the accounts' imports, when any account has some
        self._advertised: list[str] = []  # connect_urls the clients were last told
        # The client whose message is being routed (None: the server's own), for system
        # services that answer about the requester.
        self.sender: Client | None = None
        # The subject the message being delivered was routed on (a JetStream delivery is
        # shown under another): what a service import's reply mapping is keyed by.
        self.routed = b""
        self.closed_clients: list[dict[str, Any]] = []
        self._next_cid = 0
        self._dirty: list[Client] = []
        self._flush_scheduled = False
        # Spin a little before the loop sleeps, while clients answer that fast (None: off).
        self.busy_poll = BusyPoll(opts.busy_poll) if opts.busy_poll > 0 else None
        self._listeners: list[asyncio.base_events.Server] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._shutdown = asyncio.Event()
        self.host = opts.host
        self.port = opts.port

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        opts = self.opts
        if opts.tls is not None:
            from ingest.server.tls import make_server_context

            self.tls_context = make_server_context(opts.tls)
        listener = await self._loop.create_server(
            self._new_client,
            host=opts.host,
            port=opts.port,
            reuse_address=True,
            backlog=1024,
        )
        sock = listener.sockets[0]
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port = sock.getsockname()[1]
        self._listeners.append(listener)
        log.info("Listening for client connections on %s", hostport(opts.host, self.port))

    def _new_client(self) -> Client:
        return Client(self, self.next_id())

    def next_id(self) -> int:
        """Clients and routes share one numbering (cid, rid), as on the reference."""
        self._next_cid += 1
        return self._next_cid

    def register(self, client: Client) -> bool:
        if len(self.clients) >= self.opts.max_connections or self.lame_duck:
            return False
        self.clients[client.cid] = client
        self.total_connections += 1
        sock = client.transport.get_extra_info("socket") if client.transport else None
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return True

    def unregister(self, client: Client) -> None:
        if self.clients.pop(client.cid, None) is not None:
            self.closed_clients.append(_closed_record(client))
            del self.closed_clients[:-100]

    async def wait_closed(self) -> None:
        await self._shutdown.wait()

    async def shutdown(self) -> None:
        """Stop accepting, flush what is queued, close every client, stop JetStream."""
        for listener in self._listeners:
            listener.close()
        if self.cluster is not None:  # first: peers need no RS- for each closing client
            await self.cluster.stop()
        if self.leafnodes is not None:
            await self.leafnodes.stop()
        for client in list(self.clients.values()):
            client.close_with("Server Shutdown")
        if self.jetstream is not None:
            await self.jetstream.stop()
        self._shutdown.set()

    async def enter_lame_duck(self) -> None:
        """Stop accepting, tell clients (INFO ldm), then close them over the lame-duck window."""
        if self.lame_duck:
            return
        self.lame_duck = True
        log.info("Entering lame duck mode, stop accepting new clients")
        for listener in self._listeners:
            listener.close()
        if self.websocket is not None:
            self.websocket.stop()
        for client in list(self.clients.values()):
            if client.takes_async_info:  # as `_advertise`: not before its first PONG
                client.queue(self.info_for(client, ldm=True))
        if self.cluster is not None:
            self.cluster.enter_lame_duck()
        self.flush_dirty()
        opts = self.opts
        await asyncio.sleep(opts.lame_duck_grace_period)  # a documented grace, not a sync
        clients = list(self.clients.values())
        spread = max(opts.lame_duck_duration - opts.lame_duck_grace_period, 0.0)
        pause = spread / len(clients) if clients else 0.0
        for client in clients:
            client.close_with("Server Shutdown")
            if pause:
                await asyncio.sleep(min(pause, 1.0))
        await self.shutdown()

    # ---- INFO ---------------------------------------------------------------------------

    def info_for(self, client: Client, *, ldm: bool = False, connect_info: bool = False) -> bytes:
        """The INFO a client is greeted with; `connect_info` marks the one answering CONNECT,
        which also names the account the client was bound to."""
        opts = self.opts
        info: dict[str, Any] = {
            "server_id": self.server_id,
            "server_name": self.server_name,
            "version": VERSION,
            "proto": 1,
            "go": "jetlake " + JETLAKE_VERSION,
            "host": opts.host,
            "port": self.port,
            "headers": True,
            "max_payload": client.max_payload,
            "client_id": client.cid,
            "client_ip": client.host,
        }
        if connect_info:
            info["connect_info"] = True
            info["remote_account"] = client.account.name
        if self.jetstream is not None or self.opts.jetstream.enabled:
            info["jetstream"] = True  # server-wide, whatever the account; false is omitted
        if self.auth.required:
            info["auth_required"] = True
        if client.nonce:
            info["nonce"] = client.nonce
        if self.tls_context is not None:
            info["tls_required"] = True
            if opts.tls.verify:
                info["tls_verify"] = True
        if ldm:
            info["ldm"] = True
        cluster = self.cluster
        if cluster is not None:
            info["cluster"] = cluster.name
            urls = self.client_urls()
            if urls:
                info["connect_urls"] = urls
        client.adjust_info(info)
        return nats.encode_info(info)

    # ---- cluster: what clients are told about the other servers --------------------------

    def own_client_urls(self) -> list[str]:
        """host:port clients reach this server on (each address when listening on all)."""
        host = self.opts.host
        if host in ("0.0.0.0", "::", ""):
            return [hostport(address, self.port) for address in local_addresses()]
        return [hostport(host, self.port)]

    def client_urls(self) -> list[str]:
        """Every server of the cluster a client may reconnect to (INFO connect_urls); none
        with no_advertise or while no peer advertises any, as on the reference."""
        cluster = self.cluster
        if cluster is None or cluster.config.no_advertise:
            return []
        peers = cluster.peer_client_urls()
        if not peers:
            return []
        urls = [] if self.lame_duck else self.own_client_urls()
        return urls + [u for u in peers if u not in urls]

    def cluster_changed(self) -> None:
        """A peer came, went or entered lame duck: clients taking async INFO hear of it."""
        for listener in self.cluster_listeners:
            listener()
        cluster = self.cluster
        if cluster is None or cluster.config.no_advertise or self.lame_duck:
            return
        urls = self.client_urls()
        if sorted(urls) == sorted(self._advertised):
            return
        self._advertised = urls
        # Not before a client's first PONG (it gets the INFO then, `_on_ping`): a client
        # waiting for the PONG to its CONNECT (nats.py) reads one line, and an INFO there
        # left it unconnected, sending nothing (one fresh cluster start in ~20 hung so).
        for client in list(self.clients.values()):
            if client.takes_async_info and client.authenticated and not client.closed:
                client.queue(self.info_for(client))

    # ---- routing ------------------------------------------------------------------------

    def route(
        self,
        sender: Client | None,
        subject: bytes,
        reply: bytes,
        hdr: bytes | None,
        payload: bytes,
        size: int,
        *,
        shown: bytes | None = None,
        account: Account | None = None,
        internal: bool = False,
        queues: frozenset[str] | None = None,
        local: bool = False,
    ) -> bool:
        """Deliver one message to every plain subscriber and one member of each queue group;
        whether anyone, internal subscribers included, received it.

        `queues`, from a leafnode, names the only queue groups to serve: the leaf chose
        them (its own members took the others). A `local` message stays off the cluster's
        routes (one a hub sent over a spoke's link: it sends each server its own copy).

        `shown` is the subject subscribers see when it differs from the one routed on
        (JetStream delivers a stored message to an inbox under its own subject). The
        counters are the reference's: `in` counts what connections sent (an `internal`
        message, the server's own, is not input), `out` what went to connections (a
        client, a route; not the server's own subscriptions).
        """
        if not internal:
            self.in_msgs += 1
            self.in_bytes += size
        self.sender = sender
        if account is None:
            account = sender.account if sender is not None else self.accounts.global_account
        sublist = account.sublist
        # The server's own reply to an inbox (a PubAck, an API response) whose prefix the
        # compiled table learnt: framed without a match (see `learn_tail`).
        tails = sender is None and shown is None and self.mapper is None
        routes = sublist.routes if tails else None
        if routes is not None:
            framed = routes.deliver_tail(subject, reply, hdr, payload, not local)
            if framed is not None:
                self.count_tails(sublist, 1, framed, framed * size)
                return framed > 0
        if self.mapper is not None and shown is None and account is self.accounts.global_account:
            subject = self.mapper.map_bytes(subject)
        match = sublist.match(subject)
        self.routed = subject
        cluster = None if local else self.cluster
        if routes is not None:
            peer = partial(cluster.sole_route_under, account.name) if cluster else None
            learn_tail(routes, sublist, subject, partial(self.local_under, account), peer)
        if cluster is None and not match.plain and not match.queues:
            return False  # no interest: the common case of a publish nobody listens to
        remote = cluster.forwarding(account.name, subject) if cluster is not None else None
        routed = subject
        if shown is not None:
            subject = shown
        delivered = counted = 0
        skip_self = sender is not None and not sender.echo
        for sub in match.plain:
            if skip_self and sub.conn is sender:
                continue
            sub.deliver(subject, reply, hdr, payload)
            delivered += 1
            if sub.conn is not None:
                counted += 1
        if queues is not None and remote is not None:
            remote.keep(queues)
        for members in match.queues:
            if queues is not None and members[0].queue not in queues:
                continue
            if skip_self:
                members = [m for m in members if m.conn is not sender]
                if not members:
                    continue
            if remote is not None and remote.takes(members[0].queue, len(members)):
                continue  # a member on a peer serves the group this time
            member = members[0] if len(members) == 1 else _pick(members)
            member.deliver(subject, reply, hdr, payload)
            delivered += 1
            if member.conn is not None:
                counted += 1
        if remote is not None:
            assert cluster is not None
            forwarded = cluster.forward(
                remote, account.name, routed, reply, hdr, payload, size, shown=shown
            )
            delivered += forwarded
            counted += forwarded
        if counted:
            self.out_msgs += counted
            self.out_bytes += counted * size
        return delivered > 0

    def route_from_peer(
        self,
        account: Account,
        subject: bytes,
        reply: bytes,
        hdr: bytes | None,
        payload: bytes,
        queues: tuple[bytes, ...],
        *,
        shown: bytes | None = None,
    ) -> None:
        """A message a peer routed here: to this server's clients only, and to the queue
        groups the peer named (it decided which server serves each group).

        Internal subscribers (JetStream's API) are left out unless announced: each
        server's own clients reach its own services, while every server answers a
        system-account request. A stream import's subscription is one of those left
        out: the peer the message was published on made the importers' copies.
        `shown` is as for `route`."""
        size = len(payload) + (len(hdr) if hdr else 0)
        self.in_msgs += 1
        self.in_bytes += size
        self.sender = None
        self.routed = subject
        match = account.sublist.match(subject)
        routed, subject = subject, shown or subject
        delivered = 0  # to connections: what `route` counts out
        for sub in match.plain:
            if not _reachable(sub):
                continue
            sub.deliver(subject, reply, hdr, payload)
            if sub.conn is not None:
                delivered += 1
        if queues and match.queues:
            wanted = {q.decode("utf-8", "surrogateescape") for q in queues}
            for members in match.queues:
                clients = [m for m in members if _reachable(m) and m.queue in wanted]
                if clients:
                    chosen = random.choice(clients)
                    chosen.deliver(subject, reply, hdr, payload)
                    if chosen.conn is not None:
                        delivered += 1
        self.out_msgs += delivered
        self.out_bytes += delivered * size
        routes = account.sublist.routes
        framed = not reply and hdr is None and shown is None and self.mapper is None
        if delivered and framed and routes is not None:
            # PubAcks for a client here from a peer's stream: framed in runs (`Route`)
            learn_tail(routes, account.sublist, routed, partial(self.local_under, account))

    def mark_dirty(self, client: Client) -> None:
        self._dirty.append(client)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self.flush_dirty)

    def flush_dirty(self) -> None:
        self._flush_scheduled = False
        if self.busy_poll is not None:
            self.busy_poll.wrote()
        dirty, self._dirty = self._dirty, []
        for client in dirty:
            client.flush()

    # ---- routing for the compiled paths ------------------------------------------------

    def local_only(self, account: Account, subject: bytes) -> bool:
        """Whether no peer wants `subject`: the compiled table routes on this server alone,
        so it learns only such subjects (and forgets them when a peer's interest changes,
        `Sublist.forget_routes`)."""
        cluster = self.cluster
        return cluster is None or cluster.forwarding(account.name, subject) is None

    def local_under(self, account: Account, prefix: bytes) -> bool:
        """`local_only` for every subject `prefix.<tokens…>` (reply inboxes, acks)."""
        cluster = self.cluster
        return cluster is None or not cluster.wants_under(account.name, prefix)

    def count_tails(self, sublist: Sublist[Any], msgs: int, framed: int, size: int) -> None:
        """What `route` counts for messages the compiled table framed without a match."""
        sublist.matches += msgs
        sublist.cache_hits += msgs
        self.out_msgs += framed
        self.out_bytes += size


def _pick(members: list[Any]) -> Any:
    """One member of a queue group, among this server's own when it has any: as on the
    reference, a leafnode's members (`leaf`) take a message only when none is here."""
    local = [m for m in members if not getattr(m, "leaf", False)]
    return random.choice(local or members)


def _reachable(sub: Any) -> bool:
    """Whether a message from a peer may reach `sub`: a client's, or an internal one the
    server announced to its peers (a clustered JetStream's API, direct gets, acks)."""
    return sub.conn is not None or sub.announced


def _closed_record(client: Client) -> dict[str, Any]:
    return {
        "cid": client.cid,
        "reason": client.close_reason,
        "stop": time.time(),
        "client": client,
    }
