"""A reload that changes a set of `pinned_certs`: the TLS clients and routes whose peer
key the new set leaves out are closed, as the reference closes them. Here, above the
server, rather than in `pinning`, which the TLS layer of every connection imports."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingest.server.options import Options
    from ingest.server.server import Server

log = logging.getLogger("jetlake")


def recheck(server: Server, before: Options, after: Options) -> None:
    """A reload changed a set of pins: the TLS clients and routes whose peer key the new
    set leaves out are closed, as the reference closes them."""
    clients, routes = [], []
    if _pins(before.tls) != _pins(after.tls):
        pins = _pins(after.tls)
        clients = [c for c in server.clients.values() if c.tls and not c.tls.pinned_by(pins)]
    cluster = server.cluster
    if cluster is not None and _pins(_route_tls(before)) != _pins(_route_tls(after)):
        pins = _pins(_route_tls(after))
        routes = [r for r in cluster.connections if r.tls and not r.tls.pinned_by(pins)]
    if clients or routes:
        log.info("Disconnect %d clients due to pinned certs reload", len(clients) + len(routes))
    for client in clients:
        client.close_with("TLS Handshake Failure", flush=False)
    for route in routes:
        route.close("TLS Handshake Failure")


def _route_tls(opts: Options) -> Any:
    return opts.cluster.tls if opts.cluster is not None else None


def _pins(tls: Any) -> frozenset[str] | None:
    return tls.pinned_certs if tls is not None else None
