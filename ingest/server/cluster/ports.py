"""What the routed cluster and its routes see of the server, and a route of its cluster.

`Server` holds the `Cluster`, the `Cluster` holds its `Route`s: each typing the one
above it against a protocol here keeps the imports running downward only (the server
imports the mesh, the mesh imports the route, nothing imports back up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import ssl

    from ingest.parser.routes import RMsg
    from ingest.server.accounts.registry import Account, Accounts
    from ingest.server.cluster.interest import RemoteInterestMap
    from ingest.server.cluster.settings import ClusterConfig, RouteURL
    from ingest.server.jetstream.port import InternalCallback
    from ingest.server.mappings import SubjectMapper
    from ingest.server.settings import Options
    from ingest.server.sublist import Sublist
    from ingest.server.trouble import Trouble


class ClusterHost(Protocol):
    """The server, as its cluster and the cluster's routes use it."""

    server_id: str
    server_name: str
    opts: Options
    accounts: Accounts
    mapper: SubjectMapper | None
    leafnodes: Any  # the leafnode links, whose URLs the peers pass on to their leafs
    trouble: Trouble
    in_msgs: int
    in_bytes: int
    out_msgs: int
    out_bytes: int

    def next_id(self) -> int: ...
    def cluster_changed(self) -> None: ...
    def own_client_urls(self) -> list[str]: ...
    def mark_dirty(self, client: Any) -> None: ...
    def count_tails(self, sublist: Sublist[Any], msgs: int, framed: int, size: int) -> None: ...
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
    ) -> None: ...


class RouteOwner(Protocol):
    """The cluster, as one of its routes reports to it and asks it."""

    server: ClusterHost
    config: ClusterConfig
    name: str
    routes: dict[str, Any]  # registered routes, by the peer's server id
    connections: set[Any]  # every open route, registered or not
    remote: RemoteInterestMap[Any]
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext] | None

    def info(self) -> dict[str, Any]: ...
    def connect_options(self, url: RouteURL | None) -> dict[str, Any]: ...
    def accepts_cluster_name(self, theirs: str, *, dynamic: bool) -> bool: ...
    def check_peer(self, route: Any) -> bool: ...
    def register(self, route: Any) -> None: ...
    def unregister(self, route: Any) -> None: ...
    def retire(self, route: Any, heir: Any = None) -> None: ...
    def settle(self, route: Any) -> None: ...
    def peer_updated(self, route: Any) -> None: ...
    def learn_peer(self, info: dict[str, Any]) -> None: ...
    def remote_changed(self, account: str | None, subject: str | None = None) -> None: ...
    def deliver_inbound(self, msg: RMsg) -> None: ...


class SystemBus(Protocol):
    """The server, as the system account's services (Raft traffic, $SYS requests) use
    it: internal subscriptions announced to the peers, and publishing."""

    server_id: str
    server_name: str
    accounts: Accounts
    cluster: Any  # the routed cluster (`mesh.Cluster`), if any

    def subscribe(
        self, subject: str, callback: InternalCallback, *, account: Account | None = None
    ) -> object: ...
    def announce(self, sub: object) -> None: ...
    def unsubscribe(self, token: object) -> None: ...
    def publish(
        self,
        subject: str,
        reply: str | None,
        hdr: bytes | None,
        data: bytes,
        *,
        account: Account | None = None,
    ) -> None: ...
    def flush_dirty(self) -> None: ...


class SystemHost(SystemBus, Protocol):
    """The server, as its $SYS.REQ.SERVER answers describe it."""

    opts: Options
    jetstream: Any  # the global account's engine, if it has one
    jetstream_cluster: Any  # the meta group's controller (its meta_info), if clustered
    leafnodes: Any  # the leafnode links, whose traffic is not the clients'
    resolver: Any  # operator mode's account JWTs (`auth.resolver.Resolver`), if any
    clients: dict[int, Any]  # the client connections, by cid
    start_time: float
    in_msgs: int
    in_bytes: int
    out_msgs: int
    out_bytes: int

    def info_for(self, client: Any, *, ldm: bool = False, connect_info: bool = False) -> bytes: ...


class Documents(Protocol):
    """The monitoring documents $SYS.REQ.SERVER requests are answered with."""

    async def document(self, path: str, options: dict[str, Any]) -> Any: ...
    async def jetstream_varz(self) -> dict[str, Any] | None: ...
    def stats(self) -> dict[str, Any]: ...
    def raftz(self, account: str | None, group: str | None) -> dict[str, Any] | None: ...


class Envelope(Protocol):
    """The system services' "server" envelope every $SYS answer carries."""

    def envelope(self) -> dict[str, Any]: ...


class Skip(Exception):
    """This server has nothing to say (the reference's filtered response): no answer."""


class RequestError(Exception):
    """A `$SYS.REQ` answer's `error`, with the reference's code (500 unless the request's
    options were refused) and wording."""

    def __init__(self, description: str, *, code: int = 500) -> None:
        super().__init__(description)
        self.code = code


class AccountDocuments(Protocol):
    """The documents of `$SYS.REQ.ACCOUNT.…` answers (`accounts/requests.py`); they raise
    Skip or RequestError."""

    async def document(self, kind: str, name: str, options: dict[str, Any]) -> Any: ...
    def statz(self, names: list[str] | None, *, include_unused: bool) -> dict[str, Any]: ...
    def conns(self, name: str, reply: str) -> None: ...
    def accountz(self, options: dict[str, Any]) -> dict[str, Any]: ...
