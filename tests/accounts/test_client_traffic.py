"""What clients published and were delivered, over every account, without sockets:
live connections' own counts plus those of the ones that left (routes and leafnode
links are not clients)."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

from ingest.server.accounts.registry import Account, Accounts
from ingest.server.accounts.settings import AccountConfig
from ingest.server.accounts.traffic import ClientTraffic
from ingest.server.leafnode.connection import LeafConnection
from ingest.server.sublist import Sublist


@dataclass(eq=False)
class Conn:
    account: Account
    in_msgs: int
    in_bytes: int
    out_msgs: int
    out_bytes: int


def leave(accounts: Accounts, conn: Any) -> None:
    conn.account.clients.discard(conn)
    for hook in accounts.on_disconnect:
        hook(conn)


def test_totals_are_every_accounts_live_and_departed_clients() -> None:
    opts = SimpleNamespace(accounts=(AccountConfig(name="APP"),), system_account="SYS")
    accounts = Accounts(cast(Any, opts), Sublist(), jetstream=False)
    traffic = ClientTraffic(accounts)
    app, g = accounts.get("APP"), accounts.global_account
    assert app is not None
    a, b = Conn(app, 1, 10, 2, 20), Conn(g, 3, 30, 4, 40)
    app.clients.add(a)
    g.clients.add(b)
    both = {"in_client_msgs": 4, "in_client_bytes": 40, "out_client_msgs": 6,
            "out_client_bytes": 60}  # fmt: skip
    assert traffic.totals() == both
    leave(accounts, a)
    assert traffic.totals() == both  # what it counted stays counted
    assert traffic.of(app) == (1, 10, 2, 20)
    a.in_msgs = 100  # a departed connection's later counts are not the account's
    assert traffic.of(app) == (1, 10, 2, 20)
    link = LeafConnection.__new__(LeafConnection)
    link.account, link.in_msgs, link.in_bytes, link.out_msgs, link.out_bytes = app, 5, 5, 5, 5
    leave(accounts, link)
    assert traffic.totals() == both
