"""What a client connection and the server it belongs to see of each other.

The server is built from its connections (`Server` creates `Client`s, holds their
`Subscription`s and the routed cluster), so those modules type against these protocols
instead of importing `Server` back: the dependency runs one way, from the server down
to its parts, and this module imports nothing of either side.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import ssl

    from ingest.parser.outlet import Outlet
    from ingest.server.accounts.registry import Account, Accounts
    from ingest.server.auth.authenticator import Authenticator, Grant
    from ingest.server.busypoll import BusyPoll
    from ingest.server.mappings import SubjectMapper
    from ingest.server.settings import Options
    from ingest.server.trouble import Trouble


class Mesh(Protocol):
    """The routed cluster, as a client's subscriptions and its account's limits meet it."""

    @property
    def routes(self) -> Collection[str]: ...  # the peers routed to, by server id
    def local_added(self, subject: str, queue: str | None, account: str) -> None: ...
    def local_removed(self, subject: str, queue: str | None, account: str) -> None: ...


class LoginFetcher(Protocol):
    """An operator's resolver, as a CONNECT meets it: a login may wait for its account."""

    def fetching(self, connect: dict[str, object]) -> asyncio.Future[None] | None: ...


class Connection(Protocol):
    """A client connection, as its subscriptions, its account's limits and the server's
    routing see it."""

    server: Host
    cid: int
    host: str
    port: int
    account: Account
    grant: Grant
    subs: dict[bytes, Any]
    max_payload: int
    trace: bool
    headers: bool
    outlet: Outlet
    transport: asyncio.Transport | None

    def drop_sub(self, sub: Any) -> None: ...
    def trace_out(self, data: bytes) -> None: ...
    def send_err(self, message: str) -> None: ...
    def cut_off(self, error: str, reason: str) -> None: ...
    def pending(self) -> int: ...
    def flush(self) -> None: ...


class Host(Protocol):
    """The server, as one of its client connections uses it."""

    opts: Options
    accounts: Accounts
    auth: Authenticator
    resolver: LoginFetcher | None
    mapper: SubjectMapper | None
    busy_poll: BusyPoll | None
    cluster: Mesh | None
    tls_context: ssl.SSLContext | None
    stalled: set[Connection]  # connections over half their max_pending
    trouble: Trouble
    in_msgs: int
    in_bytes: int
    out_msgs: int
    out_bytes: int

    def register(self, client: Connection) -> bool: ...
    def unregister(self, client: Connection) -> None: ...
    def info_for(
        self, client: Connection, *, ldm: bool = False, connect_info: bool = False
    ) -> bytes: ...
    def mark_dirty(self, client: Connection) -> None: ...
    def flush_dirty(self) -> None: ...
    def route(
        self,
        sender: Connection | None,
        subject: bytes,
        reply: bytes,
        hdr: bytes | None,
        payload: bytes,
        size: int,
        *,
        shown: bytes | None = None,
        account: Account | None = None,
    ) -> int: ...
    def local_only(self, account: Account, subject: bytes) -> bool: ...
    def local_under(self, account: Account, prefix: bytes) -> bool: ...
