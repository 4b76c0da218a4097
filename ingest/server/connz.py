"""What /connz and /subsz say of one connection or subscription, as the reference's
JSON has it; account INFO and connect events reuse the pieces."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ingest.server.accounts.events import name_tag
from ingest.server.accounts.settings import GLOBAL_ACCOUNT
from ingest.server.gofmt import rtt, timestamp, uptime
from ingest.server.mqtt.connection import MQTTConnection
from ingest.server.websocket.listener import WebSocketClient

if TYPE_CHECKING:
    from ingest.server.client import Client


@dataclass(slots=True)
class Conn:
    """An open client, or a closed one with when and why it ended."""

    client: Client
    stop: float | None = None
    reason: str = ""

    def end(self, now: float) -> float:
        return now if self.stop is None else self.stop

    def pending(self) -> int:
        transport = self.client.transport
        if self.stop is not None or transport is None or transport.is_closing():
            return 0
        return transport.get_write_buffer_size()


# The reference's ?sort= keys: identity and time order ascend, sizes and counts descend.
ASCENDING: dict[str, Callable[[Conn, float], Any]] = {
    "cid": lambda c, now: c.client.cid,
    "start": lambda c, now: c.client.start,
    "reason": lambda c, now: c.reason,
}
DESCENDING: dict[str, Callable[[Conn, float], Any]] = {
    "subs": lambda c, now: len(c.client.subs),
    "pending": lambda c, now: c.pending(),
    "msgs_to": lambda c, now: c.client.out_msgs,
    "msgs_from": lambda c, now: c.client.in_msgs,
    "bytes_to": lambda c, now: c.client.out_bytes,
    "bytes_from": lambda c, now: c.client.in_bytes,
    "last": lambda c, now: c.client.last_activity,
    "idle": lambda c, now: c.end(now) - c.client.last_activity,
    "uptime": lambda c, now: c.end(now) - c.client.start,
    "rtt": lambda c, now: c.client.rtt,
    "stop": lambda c, now: c.stop or 0.0,
}


def sub_detail(sub: Any, cid: int, *, account: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if account:
        out["account"] = out["account_tag"] = sub.conn.account.name
    out["subject"] = sub.subject
    if sub.queue:
        out["qgroup"] = sub.queue
    out["sid"] = sub.sid.decode("utf-8", "replace") if isinstance(sub.sid, bytes) else sub.sid
    out["msgs"] = sub.delivered
    if sub.max_msgs:
        out["max"] = sub.max_msgs
    out["cid"] = cid
    return out


def sublist_stats(sublist: Any) -> dict[str, Any]:
    """A subject trie's figures as /subsz and an account's INFO give them (None: zeros)."""
    if sublist is None:
        zero = ("num_subscriptions", "num_cache", "num_inserts", "num_removes", "num_matches")
        return {**dict.fromkeys(zero, 0), "cache_hit_rate": 0, "max_fanout": 0, "avg_fanout": 0}
    max_fanout, avg_fanout = sublist.fanout()
    return {
        "num_subscriptions": sublist.count,
        "num_cache": sublist.cache_size(),
        "num_inserts": sublist.inserts,
        "num_removes": sublist.removes,
        "num_matches": sublist.matches,
        "cache_hit_rate": sublist.cache_hits / sublist.matches if sublist.matches else 0,
        "max_fanout": max_fanout,
        "avg_fanout": avg_fanout,
    }


def connection_type(c: Any) -> str:
    """The `type` /connz gives and the `client_type` of connect events."""
    if isinstance(c, MQTTConnection):
        return "mqtt"
    return "websocket" if isinstance(c, WebSocketClient) else "nats"


def conn_info(conn: Conn, now: float, subs: str, auth: bool) -> dict[str, Any]:
    c = conn.client
    end = conn.end(now)
    out: dict[str, Any] = {
        "cid": c.cid,
        "kind": "Client",
        "type": connection_type(c),
        "ip": c.host,
        "port": c.port,
        "start": timestamp(c.start),
        "last_activity": timestamp(c.last_activity),
    }
    if conn.stop is not None:
        out["stop"] = timestamp(conn.stop)
        out["reason"] = conn.reason
    out.update(
        rtt=rtt(c.rtt),
        uptime=uptime(end - c.start),
        idle=uptime(end - c.last_activity),
        pending_bytes=conn.pending(),
        in_msgs=c.in_msgs,
        out_msgs=c.out_msgs,
        in_bytes=c.in_bytes,
        out_bytes=c.out_bytes,
        subscriptions=len(c.subs),
    )
    for key in ("name", "lang", "version"):
        if getattr(c, key):
            out[key] = getattr(c, key)
    ssl_object = c.transport.get_extra_info("ssl_object") if c.transport else None
    if ssl_object is not None:
        out["tls_version"] = (ssl_object.version() or "").removeprefix("TLSv")
        cipher = ssl_object.cipher()
        if cipher:
            out["tls_cipher_suite"] = cipher[0]
    if auth and c.grant.user:
        out["authorized_user"] = c.grant.user
    if auth and c.account.name != GLOBAL_ACCOUNT:
        out["account"] = c.account.name
    if subs == "detail":
        out["subscriptions_list_detail"] = [
            sub_detail(s, c.cid, account=False) for s in c.subs.values()
        ]
    elif subs:
        out["subscriptions_list"] = [s.subject for s in c.subs.values()]
    if auth:  # as the reference: the account's tag (its name, or its JWT's)
        out["name_tag"] = name_tag(c.server.resolver, c.account)
    if isinstance(c, MQTTConnection):
        out["mqtt_client"] = c.client_id
    return out
