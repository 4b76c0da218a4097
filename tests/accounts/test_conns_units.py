"""Cluster-wide connection counts without sockets: what a server does with its peers'
`account_connections` events (the limit it admits against, the newest connections it
ends when counts crossing at once put the account over, peers whose route is gone)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest

from ingest.server.accounts import limits
from ingest.server.accounts.conns import ClusterConns
from ingest.server.accounts.registry import Account
from ingest.server.accounts.settings import AccountLimits
from ingest.server.mqtt.connection import MQTTConnection
from ingest.server.sublist import Sublist


@dataclass(eq=False)
class FakeClient:
    start: float
    host: str = "127.0.0.1"
    port: int = 1
    cid: int = 0
    ended: list[str] = field(default_factory=list)

    def cut_off(self, error: str, reason: str) -> None:
        self.ended.append(error)


def setup(limit: int, local: int) -> tuple[ClusterConns, Account, list[FakeClient], Any]:
    account = Account("LIM", Sublist(), jetstream_enabled=False,
                      limits=AccountLimits(max_connections=limit))  # fmt: skip
    clients = [FakeClient(start=float(i), cid=i) for i in range(local)]
    account.clients.update(clients)
    server = SimpleNamespace(
        server_id="ME",
        cluster=SimpleNamespace(routes={"P1": object(), "P2": object()}),
        accounts=SimpleNamespace(get={"LIM": account}.get),
    )
    return (
        ClusterConns(cast(Any, server), cast(Any, None), cast(Any, None)),
        account,
        clients,
        server,
    )


def event(peer: str, conns: int, leafnodes: int = 0) -> bytes:
    doc = {"server": {"id": peer}, "acc": "LIM", "conns": conns, "leafnodes": leafnodes}
    return json.dumps(doc).encode()


def test_peers_counts_bound_the_account() -> None:
    conns, account, clients, server = setup(limit=4, local=2)
    conns._on_event("", None, None, event("P1", 1))
    assert limits.remote_count(server, account) == 1
    assert not any(c.ended for c in clients)
    conns._on_event("", None, None, event("P1", 2))  # a newer count replaces the older
    assert limits.remote_count(server, account) == 2
    conns._on_event("", None, None, event("GONE", 5))  # no route to it: not counted
    assert limits.remote_count(server, account) == 2
    conns._on_event("", None, None, event("ME", 9))  # its own event, heard back
    assert limits.remote_count(server, account) == 2


def test_over_the_limit_the_newest_here_are_ended() -> None:
    conns, _, clients, _ = setup(limit=3, local=3)
    conns._on_event("", None, None, event("P2", 2))
    ended = [c.cid for c in clients if c.ended]
    assert ended == [1, 2]  # two over: the two that started last
    assert clients[2].ended == [limits.MAX_CONNECTIONS]


def test_events_it_cannot_use_change_nothing() -> None:
    conns, account, clients, server = setup(limit=1, local=1)
    for data in (b"not json", b"{}", json.dumps({"server": {"id": "P1"}, "acc": "NOPE",
                                                  "conns": 3}).encode()):  # fmt: skip
        conns._on_event("", None, None, data)
    assert limits.remote_count(server, account) == 0
    assert not clients[0].ended


def test_peers_leafnodes_bound_max_leafnodes() -> None:
    """The peers' `leafnodes` count with the links here; a peer without a route not."""
    conns, account, _, server = setup(limit=-1, local=0)
    account.limits = AccountLimits(max_leafnodes=2)
    assert limits.leafnode_allowed(server, account, 1)
    conns._on_event("", None, None, event("P1", 0, leafnodes=1))
    assert not limits.leafnode_allowed(server, account, 1)
    assert limits.leafnode_allowed(server, account, 0)
    conns._on_event("", None, None, event("GONE", 0, leafnodes=5))
    assert limits.leafnode_allowed(server, account, 0)
    conns._on_event("", None, None, event("P1", 0, leafnodes=0))
    assert limits.leafnode_allowed(server, account, 1)


def test_an_mqtt_client_ended_over_the_limit_is_logged_once_with_its_client_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The reference logs one line, in the MQTT client's own words (`mid:`, its client
    id), where the count and the MQTT connection each logged one."""
    conns, account, clients, _ = setup(limit=2, local=1)
    stub = SimpleNamespace(server=SimpleNamespace(
        opts=SimpleNamespace(max_payload=1024), accounts=SimpleNamespace(global_account=None)
    ))  # fmt: skip
    device = MQTTConnection(cast(Any, stub), 9)
    device.host, device.port, device.client_id, device.start = "127.0.0.1", 5, "dev", 9.0
    ended: list[str] = []
    device.close = lambda reason, **_: ended.append(reason)  # type: ignore[method-assign]
    account.clients.add(cast(Any, device))
    with caplog.at_level(logging.ERROR, logger="jetlake"):
        conns._on_event("", None, None, event("P1", 1))
    lines = [r.getMessage() for r in caplog.records if limits.MAX_CONNECTIONS in r.getMessage()]
    assert lines == [f'127.0.0.1:5 - mid:9 - "dev" - {limits.MAX_CONNECTIONS}']
    assert ended == ["Maximum Account Connections Exceeded"] and not clients[0].ended
