"""The `leafnodes {}` settings, apart from the connections so option parsing imports no
server code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ingest.server.accounts.settings import GLOBAL_ACCOUNT
from ingest.server.cluster.settings import RouteURL
from ingest.server.compression import DEFAULT_COMPRESSION, Compression

if TYPE_CHECKING:
    from ingest.server.settings import TLSConfig

DEFAULT_LEAFNODE_PORT = 7422
DEFAULT_LEAF_AUTH_TIMEOUT = 2.0  # seconds, the reference's for leafnode connections
DEFAULT_RECONNECT = 1.0  # seconds between attempts to dial a remote (the reference's)
LOOP_RECONNECT_DELAY = 30.0  # a link that closed a loop is redialled this much later


@dataclass(frozen=True, slots=True, kw_only=True)
class LeafUser:
    """One entry of `authorization { users [ … ] }`: a leaf logging in as `user` is bound
    to `account` (the global account when unset)."""

    user: str
    password: str | None = None
    account: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLeaf:
    """One `remotes [ … ]` entry: where this server dials a hub, and as whom."""

    urls: tuple[RouteURL, ...] = ()  # none: accepted, never dialled (as the reference)
    account: str = GLOBAL_ACCOUNT  # the local account the link is bound to
    credentials: str | None = None  # a .creds file: its JWT and a nonce signed by its seed
    hub: bool = False  # this server is the hub of the link although it dials
    deny_imports: tuple[str, ...] = ()  # subjects not taken from the hub
    deny_exports: tuple[str, ...] = ()  # subjects not sent to the hub
    tls: TLSConfig | None = None  # set (or a tls:// URL): the link runs over TLS
    compression: Compression = DEFAULT_COMPRESSION  # the reference's default: s2_auto


@dataclass(frozen=True, slots=True, kw_only=True)
class LeafnodeConfig:
    """`leafnodes { … }`. `port` None: no listener (a server with remotes only); 0 asks
    the OS for a free port (the user's -1)."""

    host: str = "0.0.0.0"
    port: int | None = None
    username: str | None = None
    password: str | None = None
    account: str | None = None  # the account accepted leafs are bound to (default $G)
    users: tuple[LeafUser, ...] = ()  # set: leafs log in as one of these
    auth_timeout: float = DEFAULT_LEAF_AUTH_TIMEOUT
    advertise: str | None = None
    no_advertise: bool = False
    remotes: tuple[RemoteLeaf, ...] = ()
    reconnect: float = DEFAULT_RECONNECT
    tls: TLSConfig | None = None  # set: accepted links run over TLS after the INFO
    compression: Compression = DEFAULT_COMPRESSION  # what accepted links negotiate (s2_auto)
