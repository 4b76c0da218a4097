"""An account's connections counted across the cluster, as the reference counts them.

Each server tells the others how many connections an account has on it, with the
reference's `$SYS.ACCOUNT.<account>.SERVER.CONNS` event in the system account, sent
whenever one of them comes or goes. Every server keeps the latest count of each
peer, so `max_connections` bounds the account in the whole cluster: a CONNECT past it
is refused wherever it lands, and when counts crossing at once put the account over
its limit, each server ends its own newest connections until it fits (the reference
is as harsh: clients reconnect when it ends more than needed). The event's `leafnodes`
(the account's leafnode links here) bound `max_leafnodes` likewise, for the next link
accepted anywhere. A peer whose route is gone no longer counts. A single server sends
the event too, as the reference does.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ingest.server.accounts import limits
from ingest.server.accounts.events import event_id
from log.timefmt import now_ns, rfc3339

if TYPE_CHECKING:
    from ingest.server.accounts.events import AccountEvents
    from ingest.server.accounts.registry import Account
    from ingest.server.server import Server
    from ingest.server.system import SystemServices

EVENT = "$SYS.ACCOUNT.{}.SERVER.CONNS"
EVENT_TYPE = "io.nats.server.advisory.v1.account_connections"


class ClusterConns:
    """This server's side of the exchange: its counts out, the peers' counts in."""

    def __init__(self, server: Server, system: SystemServices, events: AccountEvents) -> None:
        self._server = server
        self._system = system
        self._events = events

    def start(self) -> None:
        server = self._server
        accounts = server.accounts
        sub = server.subscribe(EVENT.format("*"), self._on_event, account=accounts.system_account)
        server.announce(sub)
        accounts.on_count.append(self.send)

    def send(self, account: Account, subject: str | None = None) -> None:
        """Tell the peers this account's count here (the global account is never counted
        across servers, as on the reference), or answer a `…CONNS` request on `subject`."""
        server = self._server
        if account is server.accounts.global_account and subject is None:
            return
        event = {
            "type": EVENT_TYPE,
            "id": event_id(),
            "timestamp": rfc3339(now_ns()),
            "server": self._system.envelope(),
            **self.statz(account),
        }
        data = json.dumps(event, separators=(",", ":")).encode()
        server.publish(
            subject or EVENT.format(account.name),
            None,
            None,
            data,
            account=server.accounts.system_account,
        )

    def leafnodes(self, account: Account) -> int:
        """The account's leafnode links on this server."""
        links = self._server.leafnodes.links if self._server.leafnodes is not None else {}
        return len(links.get(account.name, ()))

    def statz(self, account: Account) -> dict[str, Any]:
        """The account's figures on this server: the event's body, and an entry of a
        `$SYS.REQ.ACCOUNT…STATZ` answer."""
        conns = len(account.clients)
        leafnodes = self.leafnodes(account)
        return {
            "acc": account.name,
            "name": account.name,
            "conns": conns,
            "leafnodes": leafnodes,
            "total_conns": conns + leafnodes,
            "num_subscriptions": account.sublist.count,
            **self._events.traffic(account),
        }

    def _on_event(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        try:
            event = json.loads(data)
            peer, name, conns = event["server"]["id"], event["acc"], int(event["conns"])
            leafnodes = int(event.get("leafnodes") or 0)
        except (ValueError, KeyError, TypeError, AttributeError):
            return  # not a count this server can use
        server = self._server
        if peer == server.server_id or not isinstance(name, str):
            return
        account = server.accounts.get(name)
        if account is None:
            return
        account.remote_conns[peer] = conns
        account.remote_leafnodes[peer] = leafnodes
        limit = account.limits.max_connections
        over = len(account.clients) + limits.remote_count(server, account) - limit
        if limit < 0 or over <= 0:
            return
        newest = sorted(account.clients, key=lambda client: client.start, reverse=True)
        for client in newest[:over]:
            limits.refuse(client)
