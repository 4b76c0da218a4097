"""The cluster as one server sees it: the route listener, dialling, the registry of peers.

A full mesh forms from any seed: when a route registers, every other peer is
told about the newcomer (an INFO naming it) and dials it, so a server given one
seed route ends up routed to every member. Explicit routes are redialled
forever; gossiped (implicit) ones get `connect_retries` more attempts, as on the
reference. Two servers that dial each other at once end up with one route: both
keep the connection dialled by the smaller (server id, port) — see
`Route.solicitor_key`. Each side may send on the other connection until it learns
of the better one, so the loser is read for a grace period before it is closed
(`Route.supersede`): a message or reply sent meanwhile is not lost. A loser that was
registered hands the peer's interest to the winner until the peer's snapshot arrives
there (ended by the PING the peer sends after it), so replies keep reaching the peer.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from ingest.parser.routes import RMsg, encode_info, encode_rmsg
from ingest.server.cluster.delivery_runs import (
    SHOWN_PREFIX,
    frame_for_peer,
    shown_header,
    split_shown,
)
from ingest.server.cluster.interest import Forwarding, LocalInterest, RemoteInterestMap
from ingest.server.cluster.route import Route
from ingest.server.cluster.settings import ClusterConfig, RouteURL, hostport, parse_route_url
from ingest.server.tls import route_contexts
from ingest.server.version import VERSION

if TYPE_CHECKING:
    from ingest.server.cluster.ports import ClusterHost
    from log.consumers.wire import Deliveries

log = logging.getLogger("jetlake")

RECONNECT_DELAY = 1.0  # the reference's DEFAULT_ROUTE_RECONNECT


class Cluster:
    def __init__(self, server: ClusterHost, config: ClusterConfig) -> None:
        self.server = server
        self.config = config
        self.dynamic_name = config.name is None
        self.name = config.name or secrets.token_urlsafe(16)[:22]
        self.port = config.port
        self.routes: dict[str, Route] = {}  # registered, by the peer's server id
        self.connections: set[Route] = set()  # every open route, registered or not
        self.local = LocalInterest()
        self.remote: RemoteInterestMap[Route] = RemoteInterestMap()
        self.lame_duck = False
        self._listener: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._dialling: set[str] = set()  # route URLs being dialled for gossip
        self._explicit: dict[RouteURL, asyncio.Task[None]] = {}  # configured routes' diallers
        self.self_urls: set[tuple[str, int]] = set()
        self.tls_contexts = route_contexts(config.tls)  # (accepting, dialling) or None
        # subject -> (account, handler of the payload): a service's own inbox, taken from
        # the route without a match (Raft's, `raft_transport`)
        self.direct: dict[bytes, tuple[str, Callable[[bytes], None]]] = {}

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        log.info("Cluster name is %s", self.name)
        if self.dynamic_name:
            log.warning("Cluster name was dynamically generated, consider setting one")
        self._listener = await loop.create_server(
            lambda: Route(self, self.server.next_id(), dialled=None, configured=False),
            host=self.config.host,
            port=self.config.port,
            reuse_address=True,
        )
        self.port = self._listener.sockets[0].getsockname()[1]
        log.info("Listening for route connections on %s", hostport(self.config.host, self.port))
        if self.config.tls is not None and self.config.tls.insecure:
            log.warning(
                "TLS certificate chain and hostname of solicited routes will not be verified. "
                "DO NOT USE IN PRODUCTION!"
            )
        self.reroute(self.config.routes)

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
        for task in list(self._tasks):
            task.cancel()
        for route in list(self.connections):
            route.close("Server Shutdown", flush=True)

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def reroute(self, routes: tuple[RouteURL, ...]) -> None:
        """Make `routes` the explicit routes: a removed one is closed and not redialled
        (the peer is still reached through gossip if another route names it), an added
        one is dialled, as the reference does on a config reload."""
        for url in [url for url in self._explicit if url not in routes]:
            self._explicit.pop(url).cancel()
            for route in list(self.connections):
                if route.dialled == url:
                    route.close("Route Removed")
                    log.info("Removed route %s", url)
        for url in routes:
            if url not in self._explicit:
                self._explicit[url] = self._spawn(self._dial_forever(url))

    def enter_lame_duck(self) -> None:
        """Tell the peers, so they stop advertising this server to their clients."""
        self.lame_duck = True
        update = encode_info({**self.info(), "ldm": True})
        for route in self.routes.values():
            route.queue(update)

    # ---- what this server tells its peers -----------------------------------------------

    def info(self) -> dict[str, Any]:
        server = self.server
        info: dict[str, Any] = {
            "server_id": server.server_id,
            "name": server.server_name,
            "version": VERSION,
            "host": self.config.host,
            "port": self.port,
            "headers": True,
            "max_payload": server.opts.max_payload,
            "cluster": self.name,
            "ip": f"nats-route://{hostport(self.config.host, self.port)}/",
        }
        if self.dynamic_name:
            info["cluster_dynamic"] = True
        if server.opts.jetstream.enabled:
            info["jetstream"] = True  # peers count this server into their meta group
        if server.opts.server_tags:
            info["tags"] = list(server.opts.server_tags)  # for JetStream placement
        if self.config.username is not None:
            info["auth_required"] = True
        if self.config.tls is not None:
            info["tls_required"] = True
            info["tls_verify"] = self.config.tls.verify
        if not self.config.no_advertise:
            info["connect_urls"] = server.own_client_urls()
        if server.leafnodes is not None and server.leafnodes.own_urls():
            info["leafnode_urls"] = server.leafnodes.own_urls()  # told to the peers' leafs
        if self.lame_duck:
            info["ldm"] = True
        return info

    def connect_options(self, url: RouteURL | None) -> dict[str, Any]:
        """CONNECT for a dialled route: credentials from its URL, else the cluster's own."""
        options: dict[str, Any] = {
            "echo": True,
            "verbose": False,
            "pedantic": False,
            "tls_required": self.config.tls is not None,
            "headers": True,
            "name": self.server.server_id,
            "cluster": self.name,
            "dynamic": self.dynamic_name,
        }
        user = url.user if url is not None and url.user is not None else self.config.username
        password = url.password if url is not None and url.user is not None else None
        if user is not None:
            options.update(user=user, **{"pass": password or self.config.password or ""})
        return options

    # ---- handshake decisions --------------------------------------------------------------

    def accepts_cluster_name(self, theirs: str, *, dynamic: bool) -> bool:
        """A dynamic name gives way to a configured one, as on the reference."""
        if theirs == self.name:
            return True
        if self.dynamic_name and not dynamic:
            self.name, self.dynamic_name = theirs, False
            log.info("Cluster name updated to %s", theirs)
            return True
        return dynamic and not self.dynamic_name

    def check_peer(self, route: Route) -> bool:
        """The peer's first INFO: refuse ourselves, a twin name, a foreign cluster."""
        server = self.server
        if route.remote_id == server.server_id:
            log.debug("%s - Detected route to self, ignoring %s", route.where, route.route_url())
            if route.dialled is not None:
                self.self_urls.add((route.dialled.host, route.dialled.port))
                server.cluster_changed()  # one server fewer than the routes named
            route.close("Duplicate Route")
            return False
        if route.remote_name == server.server_name:
            name = route.remote_name
            log.error('%s - Remote server has a duplicate name: "%s"', route.where, name)
            route.close("Duplicate Server Name")
            return False
        theirs = route.remote_info.get("cluster")
        if route.solicited and isinstance(theirs, str):
            dynamic = bool(route.remote_info.get("cluster_dynamic"))
            if not self.accepts_cluster_name(theirs, dynamic=dynamic):
                return False  # the peer refuses us with an -ERR naming both clusters
        return True

    def register(self, route: Route) -> None:
        """The route knows its peer: make it the peer's route unless a better one exists."""
        if route.closed or route.registered or route.superseded:
            return
        existing = self.routes.get(route.remote_id)
        if existing is not None:
            loser = route if existing.solicitor_key <= route.solicitor_key else existing
            log.debug("%s - Duplicate route to %s, closing", loser.where, loser.remote_name)
            if loser is route:
                route.supersede()
                return
            existing.supersede(heir=route)
        route.registered = True
        self.routes[route.remote_id] = route
        log.debug("%s - Registering remote route %r", route.where, route.remote_id)
        snapshot = self.local.snapshot()
        if snapshot:
            route.queue(snapshot)
        log.debug("%s - Sent local subscriptions to route", route.where)
        route.on_registered()
        self._gossip(route)
        self.server.cluster_changed()

    def unregister(self, route: Route) -> None:
        self.connections.discard(route)
        self.retire(route)

    def retire(self, route: Route, heir: Route | None = None) -> None:
        """Nothing more goes out on the route: it no longer stands for its peer. Its
        interest goes with it, or passes to the twin `heir` that replaces it until the
        peer's own snapshot there is through (`settle`): dropped at once, a reply sent
        to the peer in between found no interest and was lost."""
        if route.registered:
            route.registered = False
            if self.routes.get(route.remote_id) is route:
                del self.routes[route.remote_id]
            if heir is None:
                self.remote.drop(route)
            else:
                heir.inherited = self.remote.transfer(route, heir)
            self.remote_changed(None)
            self.server.cluster_changed()

    def settle(self, route: Route) -> None:
        """The peer's snapshot on `route` is through: what it inherited from its twin and
        the peer did not announce again is no longer wanted."""
        for account, subject, queue in route.inherited:
            self.remote.remove(route, subject, queue, account)
        route.inherited = set()
        self.remote_changed(None)

    def peer_updated(self, route: Route) -> None:
        if route.registered:
            self.server.cluster_changed()

    # ---- gossip and dialling ---------------------------------------------------------------

    def _gossip(self, newcomer: Route) -> None:
        """Tell the other peers about the newcomer; they dial it (implicit routes)."""
        url = newcomer.route_url()
        if url is None:
            return
        about = {**newcomer.remote_info, "ip": url}
        line = encode_info(about)
        for peer_id, route in self.routes.items():
            if peer_id != newcomer.remote_id:
                route.queue(line)

    def learn_peer(self, info: dict[str, Any]) -> None:
        """A peer told us about a member: dial it unless we have it already."""
        server_id = info.get("server_id")
        url = info.get("ip")
        if server_id == self.server.server_id or server_id in self.routes:
            return
        if not isinstance(url, str) or url in self._dialling:
            return
        try:
            target = parse_route_url(url)
        except ValueError:
            log.error("Invalid route URL %r gossiped for %s", url, server_id)
            return
        self._dialling.add(url)
        self._spawn(self._dial_implicit(url, target, str(server_id)))

    async def _dial_implicit(self, url: str, target: RouteURL, server_id: str) -> None:
        try:
            for attempt in range(self.config.connect_retries + 1):
                if server_id in self.routes:
                    return
                route = await self._dial(target, configured=False, attempt=attempt + 1)
                if route is not None:
                    return
                await asyncio.sleep(RECONNECT_DELAY)  # the retry pace, not a synchronisation
        finally:
            self._dialling.discard(url)

    async def _dial_forever(self, target: RouteURL) -> None:
        """An explicit route: redialled whenever it is down, for as long as we run."""
        attempt = 0
        while True:
            there = self._route_at(target)
            if there is not None:  # it dialled us first: a twin now would replace a live route
                await there.done
                continue
            attempt += 1
            route = await self._dial(target, configured=True, attempt=attempt)
            if route is None:
                await asyncio.sleep(RECONNECT_DELAY)  # the retry pace, not a synchronisation
                continue
            attempt = 0
            await route.done
            if (target.host, target.port) in self.self_urls:
                return
            twin = self.routes.get(route.remote_id)
            if twin is not None:  # closed as a duplicate: the peer is reachable anyway
                await twin.done
            await asyncio.sleep(RECONNECT_DELAY)

    def _route_at(self, target: RouteURL) -> Route | None:
        """The registered route to the server listening at `target`, as its INFO says."""
        for route in self.routes.values():
            url = route.route_url()
            if url is not None:
                there = parse_route_url(url)
                if (there.host, there.port) == (target.host, target.port):
                    return route
        return None

    async def _dial(self, target: RouteURL, *, configured: bool, attempt: int) -> Route | None:
        loop = asyncio.get_running_loop()
        log.debug("Trying to connect to route on %s", target.hostport)
        try:
            _, route = await loop.create_connection(
                lambda: Route(self, self.server.next_id(), dialled=target, configured=configured),
                host=target.host,
                port=target.port,
            )
        except OSError as exc:
            level = logging.ERROR if attempt == 1 or attempt % 60 == 0 else logging.DEBUG
            log.log(level, "Error trying to connect to route (attempt %d): %s", attempt, exc)
            return None
        return route

    # ---- interest and messages -------------------------------------------------------------

    def local_added(self, subject: str, queue: str | None, account: str) -> None:
        self._broadcast(self.local.added(subject, queue, account))

    def local_removed(self, subject: str, queue: str | None, account: str) -> None:
        self._broadcast(self.local.removed(subject, queue, account))

    def _broadcast(self, line: bytes | None) -> None:
        if line is not None:
            for route in self.routes.values():
                route.queue(line)

    def remote_changed(self, account: str | None, subject: str | None = None) -> None:
        """Interest on another server came or went (None: in any account, on any subject).
        Whoever watches an account's interest (push consumers following their audience)
        is told, as for a subscription here: a deliver subject subscribed on a peer wakes
        its consumer."""
        accounts = self.server.accounts
        for acc in list(accounts) if account is None else [accounts.get(account)]:
            if acc is not None:
                acc.sublist.forget_routes(subject)
                if acc.sublist.on_change is not None:
                    acc.sublist.on_change()

    def forwarding(self, account: str, subject: bytes) -> Forwarding[Route] | None:
        """Where a message published in `account` may go; None when no peer wants it."""
        return self.remote.forwarding(subject, account) if self.routes else None

    def wants_under(self, account: str, prefix: bytes) -> bool:
        """Whether a peer may want some subject `prefix.<tokens…>` published in `account`."""
        return bool(self.routes) and self.remote.wants_under(prefix, account)

    def sole_route_under(self, account: str, prefix: bytes) -> tuple[bytes, Route] | None:
        """The account's name on the wire and the route that alone takes every
        `prefix.<token>` (`RemoteInterestMap.sole_peer_under`), for the compiled table to
        frame the server's replies to it (`learn_tail`, `Route.send_run`)."""
        route = self.remote.sole_peer_under(prefix, account) if self.routes else None
        if route is None or route.closed or route.superseded:
            return None
        return account.encode(), route

    def forwarder(self, account: str, subject: bytes) -> Callable[..., None] | None:
        """The sink for runs of a client's plain PUBs on `subject` when one route alone
        wants it, with no queue group (a stream's leader there): `Route.forward_run`."""
        route = self.sole_route(account, subject)
        return None if route is None else partial(route.forward_run, account.encode())

    def tail_forwarder(self, account: str, prefix: bytes) -> Callable[..., None] | None:
        """`forwarder` for every `prefix.<token>` at once, when one route alone takes them
        all (a stream's leader there takes a KV bucket's keys: `learn_intake_tail`)."""
        found = self.sole_route_under(account, prefix)
        return None if found is None else partial(found[1].forward_run, found[0])

    def sole_route(self, account: str, subject: bytes) -> Route | None:
        """The route that alone wants `subject`, with no queue group; None if none does, or
        more than one, or it is closing (`forwarder`'s rule, for one message at a time: a
        Raft message to a peer's inbox, `Route.forward_one`)."""
        route = self.remote.sole_peer(subject, account) if self.routes else None
        if route is None or route.closed or route.superseded:
            return None
        return route

    def sole_route_below(self, account: str, prefix: bytes) -> tuple[bytes, Route] | None:
        """The account's name on the wire and the route that alone takes every subject
        `prefix.<tokens…>` (`RemoteInterestMap.sole_peer_below`): a consumer's acks, for
        the compiled table to forward a client's in runs (`learn_acks`)."""
        route = self.remote.sole_peer_below(prefix, account) if self.routes else None
        if route is None or route.closed or route.superseded:
            return None
        return account.encode(), route

    def deliver_run(self, account: str, routed: bytes, run: Deliveries) -> int | None:
        """A consumer's run to an inbox that one route alone wants (a client on that peer
        fetching), nothing here: each message as `forward` frames it, the run in one
        write. The run's header and payload bytes, or None where it is routed one by one."""
        route = self.remote.sole_peer(routed, account) if self.routes else None
        if route is None or route.closed or route.superseded:
            return None
        frames, size = frame_for_peer(account.encode(), routed, run)
        route.send_run(frames, len(run.msgs), size)
        return size

    def forward(
        self,
        decision: Forwarding[Route],
        account: str,
        subject: bytes,
        reply: bytes,
        hdr: bytes | None,
        payload: bytes,
        size: int,
        *,
        shown: bytes | None = None,
    ) -> int:
        """Send the message to the routes `decision` picked; how many got it.

        A JetStream delivery is routed on its inbox but shown under the stored message's
        subject: the peer learns that subject from a header only jetlake routes carry."""
        targets = decision.targets()
        name = account.encode()
        if shown is not None:
            hdr = shown_header(shown, hdr)
        for route, queues in targets.items():
            route.send_msg(encode_rmsg(name, subject, reply, queues, hdr, payload), size)
        return len(targets)

    def deliver_inbound(self, msg: RMsg) -> None:
        """A message from a peer, delivered in its account; one this server does not know
        has no subscriber here. A JetStream delivery too goes to this server's clients
        alone: the peer made its stream imports' copies and sent them where importers are."""
        direct = self.direct.get(msg.subject)
        if direct is not None and direct[0] == msg.account and msg.hdr is None:
            server = self.server
            server.in_msgs += 1
            server.in_bytes += len(msg.payload)
            direct[1](msg.payload)
            return
        account = self.server.accounts.get(msg.account)
        if account is None:
            return
        hdr, shown = msg.hdr, None
        if hdr is not None and hdr.startswith(SHOWN_PREFIX):
            shown, hdr = split_shown(hdr)
        self.server.route_from_peer(
            account, msg.subject, msg.reply, hdr, msg.payload, msg.queues, shown=shown
        )

    # ---- what clients are told -------------------------------------------------------------

    def peer_client_urls(self) -> list[str]:
        """Client URLs of the peers that advertise and are not in lame-duck mode."""
        urls: list[str] = []
        for route in self.routes.values():
            if not route.lame_duck:
                urls += [u for u in route.client_urls() if u not in urls]
        return urls
