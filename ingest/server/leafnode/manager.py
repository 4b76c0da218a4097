"""The leafnodes of one server: the listener hubs accept leafs on, the remotes a leaf
dials (and redials), and which interest each link announces.

Interest reaches the links from the account's subscription list (`Sublist.watch`):
a client's SUB, a JetStream consumer's inbox, another leaf's LS+ all insert into it,
and each link of the account announces what its role lets through (see
`ingest.server.leafnode.interest`). A leaf's interest on a hub is the hub's own to
its cluster, as a client's is.

Loops: each account announces a subject of its own under `$LDS.`; a link that hears
it back closes a loop and is refused with the reference's -ERR, and a leaf that was
refused so waits 30 s before redialling.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import secrets
import ssl
from typing import TYPE_CHECKING, Any

from ingest.parser.leafnodes import LOOP_DETECTION_PREFIX, encode_err, encode_info
from ingest.server.accounts.settings import GLOBAL_ACCOUNT
from ingest.server.auth.authenticator import AuthError
from ingest.server.cluster.settings import RouteURL, hostport, local_addresses, parse_route_url
from ingest.server.compression import NOT_SUPPORTED
from ingest.server.gofmt import number, rtt
from ingest.server.leafnode.connection import LeafConnection, LeafSub
from ingest.server.leafnode.contexts import Contexts, build_contexts
from ingest.server.leafnode.redial import Redial
from ingest.server.leafnode.reload import remote_name
from ingest.server.leafnode.settings import (
    DEFAULT_LEAF_AUTH_TIMEOUT,
    LOOP_RECONNECT_DELAY,
    LeafnodeConfig,
    RemoteLeaf,
)
from ingest.server.settings import TLSConfig
from ingest.server.tls import make_client_context
from ingest.server.version import VERSION

if TYPE_CHECKING:
    from ingest.server.accounts.registry import Account
    from ingest.server.leafnode.reload import RemoteChanges
    from ingest.server.server import Server

log = logging.getLogger("jetlake")

DUPLICATE = "Duplicate Remote LeafNode Connection"
_CREDS = re.compile(
    rb"\s*(?:(?:[-]{3,}.*[-]{3,}\r?\n)([\w\-.=]+)(?:\r?\n[-]{3,}.*[-]{3,}(?:\r?\n|\Z)))"
)


class Leafnodes:
    def __init__(self, server: Server, config: LeafnodeConfig) -> None:
        self.server = server
        self.config = config
        self.port = config.port or 0
        self.connections: set[LeafConnection] = set()  # every open link
        self.links: dict[str, list[LeafConnection]] = {}  # registered, by account
        self._lds: dict[str, str] = {}  # each account's loop detection subject
        self._urls: dict[RemoteLeaf, list[RouteURL]] = {}  # each remote's, discovered too
        self._delay: dict[RemoteLeaf, float] = {}  # a remote's next redial, when not default
        self._listener: asyncio.base_events.Server | None = None
        self._told: list[str] = []  # the leafnode URLs accepted leafs last heard
        self.domain = _domain(server.opts)  # this server's JetStream domain, "" for none
        self._tasks: set[asyncio.Task[None]] = set()
        self._solicits: dict[RemoteLeaf, asyncio.Task[None]] = {}  # each dialled remote's
        self._tls: Contexts = {}  # built at start, again at each reload
        self._current: dict[str, RemoteLeaf] = {}  # each dialled remote's settings, by name

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        config = self.config
        loop = asyncio.get_running_loop()
        self._tls = build_contexts(config)  # unreadable certificates refuse the start
        if config.port is not None:
            self._listener = await loop.create_server(
                lambda: LeafConnection(self, self.server.next_id()),
                host=config.host,
                port=config.port,
                reuse_address=True,
            )
            self.port = self._listener.sockets[0].getsockname()[1]
            log.info("Listening for leafnode connections on %s", hostport(config.host, self.port))
        cluster = self.server.cluster
        if cluster is not None:
            cluster.remote.watch = self._peers_changed
            self.server.cluster_listeners.append(self._cluster_changed)
            # Peers learn this server's leafnode URLs, whichever INFO they got before.
            update = encode_info(cluster.info())
            for route in cluster.connections:
                route.queue(update)
        for remote in config.remotes:
            self.solicit(remote)

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
        for task in list(self._tasks):
            task.cancel()
        for conn in list(self.connections):
            conn.close("Server Shutdown", flush=True)

    def solicit(self, remote: RemoteLeaf) -> None:
        """Dial `remote` while it is configured (one without URLs is never dialled)."""
        if not remote.urls:
            return
        self._urls[remote] = list(remote.urls)
        name = remote_name(remote)
        self._current[name] = remote
        task = asyncio.get_running_loop().create_task(self._solicit(name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._solicits[remote] = task

    def reload(self, config: LeafnodeConfig, changes: RemoteChanges, tls: Contexts) -> None:
        """A config reload: `tls` (every context, built before the reload was applied)
        serves the handshakes from now on, links already up keep theirs; a removed remote
        is no longer dialled and its link closes; a kept one takes its new settings; an
        added one is dialled; a changed compression applies to the live links."""
        self.config = config
        self._tls = dict(tls)
        for old, new in changes.kept:
            _rekey(self._urls, old, new)
            _rekey(self._delay, old, new)
            _rekey(self._solicits, old, new)
            self._current[remote_name(new)] = new
        for remote in changes.removed:
            task = self._solicits.pop(remote, None)
            if task is not None:
                task.cancel()
            self._urls.pop(remote, None)
            self._delay.pop(remote, None)
            self._current.pop(remote_name(remote), None)
            for conn in list(self.connections):
                if conn.remote == remote:
                    conn.close("Client Closed", flush=True)
        renamed = dict(changes.kept)
        for conn in list(self.connections):
            old = conn.remote
            if old is not None and old in renamed:
                conn.remote = renamed[old]
                if old.compression != conn.remote.compression:
                    conn.recompress()
            elif old is None and changes.compression is not None:
                conn.recompress()
        for remote in changes.added:
            self.solicit(remote)

    # ---- dialling ----------------------------------------------------------------------------

    async def _solicit(self, name: str) -> None:
        """Dial the remote's URLs in turn for as long as the server runs (`Redial`), each
        time with the remote's settings of the moment (a reload may change its TLS)."""
        opts = self.server.opts
        reports = (opts.connect_error_reports, opts.reconnect_error_reports)
        redial = Redial(self.config.reconnect, reports=reports)
        turn = 0
        while True:
            remote = self._current[name]
            urls = self._urls[remote]
            url = urls[turn % len(urls)]
            turn += 1
            conn = await self._dial(remote, url)
            if isinstance(conn, OSError):
                report, delay = redial.failed()
                log.log(
                    logging.ERROR if report else logging.DEBUG,
                    'Error trying to connect as leafnode to remote server "%s" (attempt %d): %s',
                    url.hostport,
                    redial.attempts,
                    conn,
                )
            else:
                redial.linked()
                await conn.done
                delay = self._delay.pop(self._current[name], self.config.reconnect)
            await asyncio.sleep(delay)  # the redial pace, not a synchronisation

    async def _dial(self, remote: RemoteLeaf, url: RouteURL) -> LeafConnection | OSError:
        loop = asyncio.get_running_loop()
        log.debug("Trying to connect as leafnode to remote server on %s", url.hostport)
        try:
            _, conn = await loop.create_connection(
                lambda: LeafConnection(self, self.server.next_id(), remote=remote, url=url),
                host=url.host,
                port=url.port,
            )
        except OSError as exc:
            return exc
        return conn

    def tls_context(self, remote: RemoteLeaf | None = None) -> ssl.SSLContext:
        """The listener's context, or the one a remote dials with: its `tls {}`, else
        (the hub demanded TLS) the system's roots."""
        ctx = self._tls.get(remote)
        if ctx is None:
            ctx = self._tls[remote] = make_client_context(TLSConfig())
        return ctx

    def learn_urls(self, conn: LeafConnection, urls: object) -> None:
        """A hub's INFO names where else its cluster takes leafs: redial those too."""
        if conn.remote is None or not isinstance(urls, list):
            return
        known = self._urls.setdefault(conn.remote, list(conn.remote.urls))
        for text in urls:
            if not isinstance(text, str):
                continue
            try:
                url = parse_route_url(text if "://" in text else f"nats-leaf://{text}")
            except ValueError:
                continue
            if all((u.host, u.port) != (url.host, url.port) for u in known):
                creds = conn.url
                if creds is not None and creds.user is not None:
                    url = RouteURL(host=url.host, port=url.port, user=creds.user,
                                   password=creds.password)  # fmt: skip
                known.append(url)

    def loop_delay(self, conn: LeafConnection) -> float:
        """How long before a link that closed a loop is redialled (if this side dials)."""
        if conn.remote is not None:
            self._delay[conn.remote] = LOOP_RECONNECT_DELAY
        return LOOP_RECONNECT_DELAY

    # ---- what this server tells the remote ----------------------------------------------

    def info(self, cid: int, compression: str = "") -> dict[str, Any]:
        """The INFO a link hears from this side; `compression` only in the greeting and
        in the INFOs of the negotiation (later updates leave it out, as the reference)."""
        server = self.server
        opts = server.opts
        info: dict[str, Any] = {
            "server_id": server.server_id,
            "server_name": server.server_name,
            "version": VERSION,
            "proto": 1,
            "go": "jetlake",
            "host": self.config.host,
            "port": self.port,
            "headers": True,
            "max_payload": opts.max_payload,
            "client_id": cid,
            "leafnode_urls": self.leafnode_urls(),
        }
        if self.config.username is not None or self.config.users or server.auth.required:
            info["auth_required"] = True
        if self.config.tls is not None:
            info["tls_required"] = True
            info["tls_verify"] = self.config.tls.verify
        if opts.jetstream.enabled:
            info["jetstream"] = True
        if self.domain:
            info["domain"] = self.domain
        if server.cluster is not None:
            info["cluster"] = server.cluster.name
        if compression:
            info["compression"] = compression
        return info

    def own_urls(self) -> list[str]:
        """Where leafs reach this server (each address when listening on all); none before
        the listener is up."""
        if self.config.no_advertise or self._listener is None:
            return []
        if self.config.advertise:
            return [self.config.advertise]
        host = self.config.host
        hosts = local_addresses() if host in ("0.0.0.0", "::", "") else [host]
        return [hostport(h, self.port) for h in hosts]

    def leafnode_urls(self) -> list[str]:
        """Where leafs reach the hub: this server and the cluster peers that take leafs
        (their route INFO's `leafnode_urls`), so a leaf redials another when one goes."""
        urls = self.own_urls()
        cluster = self.server.cluster
        if cluster is not None and urls:
            for route in cluster.routes.values():
                theirs = route.remote_info.get("leafnode_urls")
                if isinstance(theirs, list) and not route.lame_duck:
                    urls += [u for u in theirs if isinstance(u, str) and u not in urls]
        return urls

    def _cluster_changed(self) -> None:
        """Peers came, went or changed: accepted leafs hear the hub's URLs again."""
        urls = self.leafnode_urls()
        if urls == self._told:
            return
        self._told = urls
        for links in self.links.values():
            for link in links:
                if not link.solicited:
                    link.queue(encode_info(self.info(link.cid)))

    def connect_options(self, conn: LeafConnection, info: dict[str, Any]) -> dict[str, Any]:
        """CONNECT for a link this server dialled, with the remote's credentials."""
        remote = conn.remote
        assert remote is not None
        server = self.server
        options: dict[str, Any] = {
            "version": VERSION,
            "server_id": server.server_id,
            "name": server.server_name,
            "cluster": self.cluster_name() or server.server_name,
            "headers": True,
            "jetstream": bool(conn.account.jetstream_enabled),
            "remote_account": conn.account.name,
        }
        if self.domain:
            options["domain"] = self.domain
        if conn.compression:
            options["compress_mode"] = conn.compression
        if remote.hub:
            options["hub"] = True
        if remote.deny_imports:
            options["deny_pub"] = list(remote.deny_imports)
        url = conn.url
        if url is not None and url.user is not None:
            options["user"] = url.user
            if url.password is not None:
                options["pass"] = url.password
            else:
                options["auth_token"] = url.user
        if remote.credentials:
            options.update(_signed(remote.credentials, str(info.get("nonce") or "")))
        return options

    def cluster_name(self) -> str:
        cluster = self.server.cluster
        return cluster.name if cluster is not None else ""

    def authenticate(self, options: dict[str, Any], nonce: str = "") -> Account | None:
        """The account an accepted leaf is bound to, or None when its credentials fail:
        the `authorization {}` of `leafnodes {}` when it names a user, else the server's
        users (a leaf logs in as one, with the user's account, or as a JWT user that
        signed `nonce`)."""
        config = self.config
        server = self.server
        if config.users:
            user, password = options.get("user"), options.get("pass")
            for entry in config.users:
                if entry.user == user and entry.password == password:
                    return server.accounts.get(entry.account or GLOBAL_ACCOUNT)
            return None
        if config.username is not None:
            if options.get("user") != config.username or options.get("pass") != config.password:
                return None
            return server.accounts.get(config.account or server.accounts.global_account.name)
        try:
            grant = server.auth.authenticate(options, "LEAFNODE", nonce=nonce)
        except AuthError:
            return None
        name = config.account if config.account and not server.auth.required else grant.account
        return server.accounts.get(name) or server.accounts.ensure(name)

    # ---- registry and interest ----------------------------------------------------------

    def register(self, conn: LeafConnection) -> None:
        account = conn.account
        links = self.links.setdefault(account.name, [])
        if not conn.solicited:
            self._replace_stale(conn, links)
        links.append(conn)
        for hook in self.server.accounts.on_count:  # the peers count it for max_leafnodes
            hook(account)
        if not conn.solicited:  # an accepted leafnode is one of the account's connections
            for connected in self.server.accounts.on_connect:
                connected(conn)
        sublist = account.sublist
        if sublist.watch is None:
            sublist.watch = lambda subject, queue, sub, delta: self._changed(
                account, subject, queue, sub, delta
            )
        advertised = conn.advertised
        advertised.change(self.loop_subject(account), None, 1)
        for subject, queue, sub in sublist.entries():
            if self._announces(conn, subject, sub):
                advertised.change(subject, queue, _weight(sub))
        cluster = self.server.cluster
        if cluster is not None and not conn.spoke:
            for subject, queue, members in cluster.remote.entries(account.name):
                if not conn.deny_in.interest(subject):
                    advertised.change(subject, queue, members)
        role = "spoke" if conn.spoke else "hub"
        log.debug(
            "%s - Leafnode connection registered: %s (this side is the %s, account %s)",
            conn.where,
            conn.remote_name,
            role,
            account.name,
        )

    @staticmethod
    def _replace_stale(conn: LeafConnection, links: list[LeafConnection]) -> None:
        """A leaf that dials again while its old link still stands here (its network went
        away without a FIN) replaces it: both would take the same messages."""
        for old in list(links):
            same = (old.remote_name, old.remote_cluster, old.remote_account)
            if not old.solicited and same == (
                conn.remote_name,
                conn.remote_cluster,
                conn.remote_account,
            ):
                old.queue(encode_err(DUPLICATE))
                old.close(DUPLICATE, flush=True)
                log.warning("%s - Replacing connection from same server", conn.where)

    def unregister(self, conn: LeafConnection) -> None:
        self.connections.discard(conn)
        links = self.links.get(conn.account.name)
        if links is not None and conn in links:
            links.remove(conn)
            for hook in self.server.accounts.on_count:
                hook(conn.account)
            if not conn.solicited:
                for gone in self.server.accounts.on_disconnect:
                    gone(conn)

    def loop_subject(self, account: Account) -> str:
        subject = self._lds.get(account.name)
        if subject is None:
            subject = self._lds[account.name] = LOOP_DETECTION_PREFIX + secrets.token_hex(11)
        return subject

    def _changed(
        self, account: Account, subject: str, queue: str | None, sub: Any, delta: int
    ) -> None:
        """A subscription of `account` came or went: its links announce the change."""
        for link in self.links.get(account.name, ()):
            if self._announces(link, subject, sub):
                link.queue(link.advertised.change(subject, queue, delta * _weight(sub)) or b"")

    def _peers_changed(self, account: str, subject: str, queue: str | None, delta: int) -> None:
        """The cluster's interest changed: a hub passes it on to its leafs (a spoke only
        ever announces its own side's)."""
        for link in self.links.get(account, ()):
            if not link.spoke and not link.deny_in.interest(subject):
                link.queue(link.advertised.change(subject, queue, delta) or b"")

    def weight_changed(
        self, conn: LeafConnection, sub: LeafSub, delta: int, *, update: bool
    ) -> None:
        """The remote's interest grew or shrank by `delta` members: a hub tells its cluster
        (as for a client's subscriptions), and for a queue group's new weight (no insert
        into the list to watch) the other links too."""
        if update:
            for link in self.links.get(conn.account.name, ()):
                if self._announces(link, sub.subject, sub):
                    link.queue(link.advertised.change(sub.subject, sub.queue, delta) or b"")
        cluster = self.server.cluster
        if cluster is None or conn.spoke:
            return
        name = conn.account.name
        for _ in range(abs(delta)):
            if delta > 0:
                cluster.local_added(sub.subject, sub.queue, name)
            else:
                cluster.local_removed(sub.subject, sub.queue, name)

    @staticmethod
    def _announces(link: LeafConnection, subject: str, sub: Any) -> bool:
        """Whether `link` tells its remote of `sub`: not its own remote's interest, nothing
        it does not import, and from a spoke only its own side's interest (its clients,
        its services, leafs for which it is the hub)."""
        conn = getattr(sub, "conn", None)
        if conn is link:
            return False
        if subject.startswith(LOOP_DETECTION_PREFIX):
            return True
        if link.deny_in.interest(subject):
            return False
        return not (link.spoke and isinstance(sub, LeafSub) and conn is not None and conn.spoke)

    # ---- monitoring ---------------------------------------------------------------------

    def leafz(self, *, subs: bool = False, account: str | None = None) -> dict[str, Any]:
        leafs = []
        for links in self.links.values():
            for conn in links:
                if account and conn.account.name != account:
                    continue
                entry: dict[str, Any] = {
                    "id": conn.cid,
                    "name": conn.remote_name,
                    "is_spoke": conn.spoke,
                    "account": conn.account.name,
                    "ip": conn.host,
                    "port": conn.port,
                    "rtt": rtt(conn.rtt),
                    "in_msgs": conn.in_msgs,
                    "out_msgs": conn.out_msgs,
                    "in_bytes": conn.in_bytes,
                    "out_bytes": conn.out_bytes,
                    "subscriptions": len(conn.subs),
                    "compression": conn.compression or NOT_SUPPORTED,
                }
                if subs and conn.subs:
                    entry["subscriptions_list"] = sorted({s for s, _ in conn.subs})
                leafs.append(entry)
        return {"leafnodes": len(leafs), "leafs": leafs}

    def varz(self) -> dict[str, Any]:
        """The `leaf` block of /varz."""
        out: dict[str, Any] = {}
        if self.config.port is not None:
            out.update(host=self.config.host, port=self.port)
        out["auth_timeout"] = number(self.config.auth_timeout)
        tls = self.config.tls
        out["tls_timeout"] = number(DEFAULT_LEAF_AUTH_TIMEOUT if tls is None else tls.timeout)
        if tls is not None:
            out["tls_required"] = True
            if tls.verify:
                out["tls_verify"] = True
        remotes = []
        for remote in self.config.remotes:
            entry: dict[str, Any] = {
                "local_account": remote.account,
                "urls": [u.hostport for u in remote.urls],
            }
            deny = {"exports": list(remote.deny_exports), "imports": list(remote.deny_imports)}
            deny = {key: subjects for key, subjects in deny.items() if subjects}
            if deny:
                entry["deny"] = deny
            remotes.append(entry)
        if remotes:
            out["remotes"] = remotes
        return out


def _weight(sub: Any) -> int:
    return sub.weight if isinstance(sub, LeafSub) and sub.queue is not None else 1


def _domain(opts: Any) -> str:
    return str(getattr(opts.jetstream, "domain", None) or "") if opts.jetstream.enabled else ""


def _signed(path: str, nonce: str) -> dict[str, str]:
    """The JWT of a credentials file and the hub's nonce signed with its seed."""
    import nkeys

    with open(path, "rb") as handle:
        found = _CREDS.findall(handle.read())
    if len(found) < 2:
        raise ValueError(f"credentials file {path} is malformed")
    signer = nkeys.from_seed(found[1])
    signature = base64.urlsafe_b64encode(signer.sign(nonce.encode())).rstrip(b"=")
    return {"jwt": found[0].decode(), "sig": signature.decode()}


def _rekey(table: dict[RemoteLeaf, Any], old: RemoteLeaf, new: RemoteLeaf) -> None:
    if old in table:
        table[new] = table.pop(old)
