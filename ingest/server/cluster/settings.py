"""The `cluster {}` settings and the route URLs they are written with.

Kept apart from the connections so the option parsers can build a
`ClusterConfig` without importing any server code.
"""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from ingest.server.tls_settings import TLSConfig

DEFAULT_CLUSTER_PORT = 6222
DEFAULT_ROUTE_AUTH_TIMEOUT = 2.0


class RouteURLError(ValueError):
    """A route or cluster URL the reference would not parse either."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteURL:
    """Where a route is dialled, with the credentials its CONNECT carries (if any)."""

    host: str
    port: int
    user: str | None = None
    password: str | None = None
    scheme: str = "nats"

    @property
    def hostport(self) -> str:
        return hostport(self.host, self.port)

    def __str__(self) -> str:
        """As the reference prints a configured route URL (credentials included)."""
        userinfo = f"{self.user}:{self.password or ''}@" if self.user is not None else ""
        return f"{self.scheme}://{userinfo}{self.hostport}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterConfig:
    """`cluster { … }` and its flags. `port` 0 asks the OS for a free port (the user's -1)."""

    name: str | None = None  # None: generated at start, as the reference does
    host: str = "0.0.0.0"
    port: int = DEFAULT_CLUSTER_PORT
    routes: tuple[RouteURL, ...] = ()
    username: str | None = None
    password: str | None = None
    auth_timeout: float = DEFAULT_ROUTE_AUTH_TIMEOUT
    no_advertise: bool = False
    connect_retries: int = 0  # implicit routes: attempts after the first failure
    pool_size: int = -1  # accepted for compatibility; jetlake keeps one route per peer
    tls: TLSConfig | None = None  # set: every route, dialled or accepted, starts with TLS


def parse_route_url(text: str, *, listen: bool = False) -> RouteURL:
    """`nats://[user:pass@]host:port` (also `nats-route://`, `tls://`); -1 as a listen port
    means any free port and comes back as 0."""
    try:
        parts = urlsplit(text.strip())
        host = parts.hostname
        raw_port = parts.netloc.rpartition(":")[2]
    except ValueError as exc:
        raise RouteURLError(f'error parsing route url ["{text}"]') from exc
    if not parts.scheme or not host or not raw_port.lstrip("-").isdigit():
        raise RouteURLError(f'error parsing route url ["{text}"]')
    port = int(raw_port)
    if listen and port == -1:
        port = 0
    elif not 0 <= port <= 65535:
        raise RouteURLError(f'error parsing route url ["{text}"]')
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    return RouteURL(host=host, port=port, user=user, password=password, scheme=parts.scheme)


def parse_route_list(text: str) -> tuple[RouteURL, ...]:
    """The `--routes` flag: URLs separated by commas (spaces around them are allowed)."""
    return tuple(parse_route_url(item) for item in text.split(",") if item.strip())


def hostport(host: str, port: int) -> str:
    """`host:port` as the reference logs and gossips it, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def local_addresses() -> list[str]:
    """This machine's non-loopback addresses, for a server listening on every interface."""
    found: list[str] = []
    with contextlib.suppress(OSError):
        for *_, sockaddr in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            address = str(sockaddr[0])
            if not address.startswith("127.") and address not in found:
                found.append(address)
    return found or ["127.0.0.1"]
