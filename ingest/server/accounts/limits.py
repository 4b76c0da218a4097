"""An account's connection limits (`limits { … }`), as the reference enforces them: its
connections in the whole cluster (the peers' counts come from `conns`), subscriptions
per connection, a payload size below the server's, and the leafnodes it accepts.

Each check answers with the reference's -ERR and log line; the connection stays
open after a refused subscription and closes after a connection or payload refusal.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ingest.server.accounts.registry import Account
    from ingest.server.host import Connection, Host

log = logging.getLogger("jetlake")

MAX_CONNECTIONS = "maximum account active connections exceeded"
MAX_SUBSCRIPTIONS = "maximum subscriptions exceeded"
MAX_PAYLOAD = "Maximum Payload Violation"


def admit(client: Connection) -> bool:
    """Count a newly authenticated client in its account; False, with the connection
    refused, when the account already has its connections here."""
    account = client.account
    if client in account.clients:  # a second CONNECT
        return True
    if not has_room(client):
        refuse(client)
        for hook in client.server.accounts.on_disconnect:  # refused: reported as it ends
            hook(client)
        return False
    payload = account.limits.max_payload
    if 0 <= payload < client.max_payload:
        client.max_payload = payload
    enter(client)
    return True


def has_room(client: Connection) -> bool:
    """Whether the client's account has room for one more connection in the cluster
    (NATS and MQTT clients alike count, as on the reference)."""
    account = client.account
    limit = account.limits.max_connections
    return limit < 0 or len(account.clients) + remote_count(client.server, account) < limit


def enter(client: Connection) -> None:
    """Count an admitted client in its account, with the account's connect event."""
    client.account.clients.add(client)
    _counted(client)
    for hook in client.server.accounts.on_connect:
        hook(client)


def remote_count(server: Host, account: Account) -> int:
    """The account's connections on the peers this server is routed to."""
    cluster = server.cluster
    if cluster is None or not account.remote_conns:
        return 0
    return sum(n for peer, n in account.remote_conns.items() if peer in cluster.routes)


def leafnode_allowed(server: Host, account: Account, links: int) -> bool:
    """Whether one more leafnode connection fits the account's max_leafnodes: its `links`
    here and those its routed peers last reported (refused with the clients' -ERR, as
    the reference does)."""
    limit = account.limits.max_leafnodes
    if limit < 0:
        return True
    cluster = server.cluster
    if cluster is not None:
        links += sum(n for peer, n in account.remote_leafnodes.items() if peer in cluster.routes)
    return links < limit


def refuse(client: Connection) -> None:
    """End a connection its account has no room for, logged once: a connection that logs
    its own cut-off (MQTT, which has no -ERR to carry it) says it in its own words."""
    if not getattr(client, "logs_cut_off", False):
        log.error("%s - %s", _where(client), MAX_CONNECTIONS)
    client.cut_off(MAX_CONNECTIONS, "Maximum Account Connections Exceeded")


def leave(client: Connection) -> None:
    account = client.account
    if client in account.clients:
        account.clients.discard(client)
        for hook in client.server.accounts.on_disconnect:  # its traffic, then the count
            hook(client)
        _counted(client)


def _counted(client: Connection) -> None:
    for hook in client.server.accounts.on_count:
        hook(client.account)


def subscription_allowed(client: Connection) -> bool:
    """Whether one more subscription fits this connection (the reference counts them per
    connection against the account's max_subscriptions)."""
    limit = client.account.limits.max_subscriptions
    own = client.grant.max_subscriptions  # a JWT user's
    limit = own if limit < 0 or 0 <= own < limit else limit
    if limit < 0 or len(client.subs) < limit:
        return True
    log.error('%s - "%s" - %s', _where(client), _user(client), MAX_SUBSCRIPTIONS)
    client.send_err(MAX_SUBSCRIPTIONS)
    return False


def payload_allowed(client: Connection, size: int) -> bool:
    """Whether a message fits the account's max_payload; the connection is closed if not."""
    if size <= client.max_payload:
        return True
    log.error(
        '%s - "%s" - maximum payload exceeded: %d vs %d',
        _where(client), _user(client), size, client.max_payload,
    )  # fmt: skip
    client.cut_off(MAX_PAYLOAD, "Maximum Payload Exceeded")
    return False


def _where(client: Connection) -> str:
    return f"{client.host}:{client.port} - cid:{client.cid}"


def _user(client: Connection) -> str:
    return f"{client.account.name}/user:{client.grant.user}"
