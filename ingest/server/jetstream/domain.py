"""A JetStream domain: `$JS.<domain>.API.>` answered as `$JS.API.>`.

Every server answers its own clients' `$JS.API.>`, so over a leafnode link (which
never carries the plain API) one side's JetStream is reached through its domain's
prefix instead: the edge's `$JS.edge.API.STREAM.INFO.ORDERS` from the hub, a hub
stream sourcing an edge stream with `external: {api: "$JS.edge.API"}`. As on the
reference, the prefixed API also answers locally, and the KV and object store
spaces keep their own names (`$JS.<domain>.API.$KV.>` is `$KV.>`).
"""

from __future__ import annotations

from typing import Any

API = "$JS.API."
_OWN_SPACES = (b"$KV.", b"$OBJ.")


def domain_prefix(domain: str) -> str:
    return f"$JS.{domain}.API"


def serve_domain(server: Any, domain: str) -> None:
    """Subscribe each JetStream account to its domain's API, re-routing every request
    (reply and headers as they came) to the plain API in the same account."""
    prefix = domain_prefix(domain).encode() + b"."
    for account in server.accounts:
        if not account.jetstream_enabled:
            continue

        def forward(
            subject: bytes, reply: bytes, hdr: bytes | None, data: bytes, account: Any = account
        ) -> None:
            rest = subject[len(prefix) :]
            target = rest if rest.startswith(_OWN_SPACES) else API.encode() + rest
            size = len(data) + (len(hdr) if hdr else 0)
            server.route(None, target, reply, hdr, data, size, account=account, internal=True)

        server.subscribe_raw(prefix.decode() + ">", forward, account=account)
