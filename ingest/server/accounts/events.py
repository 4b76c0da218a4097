"""An account's connect and disconnect events, as the reference publishes them in the
system account: `$SYS.ACCOUNT.<account>.CONNECT` when a client is admitted to its
account and `$SYS.ACCOUNT.<account>.DISCONNECT` when it leaves, with the reference's
JSON (the client's identity; at the end its stop, RTT, what it sent and received, and
why it closed). They cross the routes like any system-account message, so a system
user anywhere in the cluster sees every server's; operators bill and audit from them.

Also the `account_connections` event's body: what the account's clients here sent and
received (`ClientTraffic`'s figures).
"""

from __future__ import annotations

import json
import secrets
import string
import time
from typing import TYPE_CHECKING, Any

from ingest.server.jwt.claims import Claims, JWTError, decode
from log.timefmt import now_ns, rfc3339

if TYPE_CHECKING:
    from ingest.server.accounts.registry import Account
    from ingest.server.client import Client
    from ingest.server.leafnode.connection import LeafConnection
    from ingest.server.mqtt.connection import MQTTConnection

    Connection = Client | LeafConnection | MQTTConnection
    from ingest.server.server import Server
    from ingest.server.system import SystemServices

CONNECT = "$SYS.ACCOUNT.{}.CONNECT"
DISCONNECT = "$SYS.ACCOUNT.{}.DISCONNECT"
CONNECT_TYPE = "io.nats.server.advisory.v1.client_connect"
DISCONNECT_TYPE = "io.nats.server.advisory.v1.client_disconnect"
_ALPHABET = string.ascii_letters + string.digits


def event_id() -> str:
    """A 22-character id, unique per event, as the reference's nuid."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(22))


class AccountEvents:
    def __init__(self, server: Server, system: SystemServices) -> None:
        self._server = server
        self._system = system

    def start(self) -> None:
        accounts = self._server.accounts
        accounts.on_connect.append(self._connected)
        accounts.on_disconnect.append(self._disconnected)

    def traffic(self, account: Account) -> dict[str, Any]:
        """The `sent` and `received` of an `account_connections` event: sent is what the
        account's clients were delivered, received what they published."""
        in_msgs, in_bytes, out_msgs, out_bytes = self._server.client_traffic.of(account)
        none = {"msgs": 0, "bytes": 0}
        kinds = {"gateways": none, "routes": none, "leafs": none}
        return {
            "sent": {"msgs": out_msgs, "bytes": out_bytes, **kinds},
            "received": {"msgs": in_msgs, "bytes": in_bytes, **kinds},
            "slow_consumers": 0,
        }

    def _connected(self, client: Connection) -> None:
        self._publish(CONNECT, client, {"type": CONNECT_TYPE}, _info(client))

    def _disconnected(self, client: Connection) -> None:
        info = _info(client, stop=time.time())
        self._publish(DISCONNECT, client, {"type": DISCONNECT_TYPE}, info, **_totals(client))

    def _publish(
        self,
        subject: str,
        client: Connection,
        head: dict[str, Any],
        info: dict[str, Any],
        **tail: Any,
    ) -> None:
        server = self._server
        system = server.accounts.system_account
        if system is None:
            return
        event = {
            **head,
            "id": event_id(),
            "timestamp": rfc3339(now_ns()),
            "server": self._system.envelope(),
            "client": info,
            **tail,
        }
        data = json.dumps(event, separators=(",", ":")).encode()
        server.publish(subject.format(client.account.name), None, None, data, account=system)


def _totals(client: Connection) -> dict[str, Any]:
    """A disconnect's figures: what the connection sent, what it was sent, why it ended."""
    return {
        "sent": {"msgs": client.in_msgs, "bytes": client.in_bytes},
        "received": {"msgs": client.out_msgs, "bytes": client.out_bytes},
        "reason": client.close_reason,
    }


def _info(client: Connection, *, stop: float | None = None) -> dict[str, Any]:
    """The reference's ClientInfo, its empty fields left out as it leaves them out. An
    accepted leafnode is named by its CONNECT and has no language, version or type; an
    MQTT client is its user and its client id."""
    from ingest.server.connz import connection_type
    from ingest.server.leafnode.connection import LeafConnection
    from ingest.server.mqtt.connection import MQTTConnection

    leaf = isinstance(client, LeafConnection)
    if isinstance(client, LeafConnection):
        name, lang, version = client.remote_name, "", ""
    else:
        name, lang, version = client.name, client.lang, client.version
    mqtt = isinstance(client, MQTTConnection)
    token = None if isinstance(client, MQTTConnection) else client.connect_options.get("jwt")
    user_jwt = _decoded(token, "user")
    info: dict[str, Any] = {
        "start": rfc3339(int(client.start * 1e9)),
        "host": client.host,
        "id": client.cid,
        "acc": client.account.name,
        "user": client.grant.user if mqtt else _raw_user(client),
        "name": name,
        "lang": lang,
        "ver": version,
    }
    if stop is not None:
        info["rtt"] = int(client.rtt * 1e9)
        info["stop"] = rfc3339(int(stop * 1e9))
    if user_jwt is not None:
        info.update(jwt=token, issuer_key=user_jwt.issuer)
    info["name_tag"] = name_tag(client.server.resolver, client.account)
    if user_jwt is not None and user_jwt.nats.get("tags"):
        info["tags"] = user_jwt.nats["tags"]
    if leaf:
        info["kind"] = "Leafnode"
    else:
        info.update(kind="Client", client_type=connection_type(client))
    if isinstance(client, MQTTConnection):
        info["client_id"] = client.client_id
    return {key: value for key, value in info.items() if value not in ("", 0)}


def _raw_user(client: Client | LeafConnection) -> str:
    """Who logged in, as the reference names them: the nkey, the user name, the JWT's
    user key; a token is not repeated."""
    connect = client.connect_options
    for key in ("nkey", "user"):
        if connect.get(key):
            return str(connect[key])
    if connect.get("jwt"):
        return client.grant.user
    return "[REDACTED]" if connect.get("auth_token") else ""


def name_tag(resolver: Any, account: Account) -> str:
    """An operator-mode account's JWT name; a configured account's own name."""
    claims = resolver.store.get(account.name) if resolver is not None else None
    return claims.name if claims is not None and claims.name else account.name


def _decoded(token: object, kind: str) -> Claims | None:
    if not isinstance(token, str):
        return None
    try:
        return decode(token, kind)
    except JWTError:
        return None
