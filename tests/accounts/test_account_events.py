"""An account's connect and disconnect events and its `account_connections` figures,
the reference and jetlake alike: on one server, what a system user sees of a client's
life; on two routed servers, each other's events and leafnode counts, which make
`max_leafnodes` bound the account in the whole cluster."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import nats
import paho.mqtt.client as paho
import pytest
from nats.aio.subscription import Subscription

from tests.accounts.test_leafnode_limits_e2e import REFUSED, leaf_connect
from tests.conftest import Connect, ServerPool
from tests.support.clients import routed_interest
from tests.support.cluster import (
    ONE_ROUTE_PER_PEER,
    free_port,
    start_cluster,
    stop_all,
    wait_mesh,
)
from tests.support.nsc import Nsc
from tests.support.servers import ServerProcess, start_server

ACCOUNTS = """
accounts {
  A { users [ {user: a, password: a}, {user: lim, password: lim} ], limits { max_leafnodes: 1 } }
  L { users [ {user: l, password: l} ], limits { max_connections: 1 } }
  SYS { users [ {user: sys, password: sys} ] }
}
system_account: SYS
"""
CLIENT_KEYS = ["start", "host", "id", "acc", "user", "name", "lang", "ver"]
KIND = {"name_tag": "A", "kind": "Client", "client_type": "nats"}


async def next_event(sub: Subscription, **match: Any) -> dict[str, Any]:
    """The next event on `sub` whose top-level fields include `match`."""
    while True:
        event = dict(json.loads((await sub.next_msg(10)).data))
        if all(event.get(key) == value for key, value in match.items()):
            return event


async def test_connect_and_disconnect_events(
    server_kind: str, server_pool: ServerPool, connect: Connect
) -> None:
    server = server_pool.get(server_kind, config=ACCOUNTS)  # A's traffic is this test's
    sys_nc = await connect(f"nats://sys:sys@{server.host}:{server.port}")
    connects = await sys_nc.subscribe("$SYS.ACCOUNT.A.CONNECT")
    disconnects = await sys_nc.subscribe("$SYS.ACCOUNT.A.DISCONNECT")
    counts = await sys_nc.subscribe("$SYS.ACCOUNT.A.SERVER.CONNS")
    await sys_nc.flush()
    nc = await nats.connect(f"nats://a:a@{server.host}:{server.port}", name="alice")
    event = await next_event(connects)
    assert event["type"] == "io.nats.server.advisory.v1.client_connect"
    assert len(event["id"]) == 22 and event["server"]["id"]
    client = event["client"]
    assert list(client) == [*CLIENT_KEYS, *KIND]
    assert (client["acc"], client["user"], client["name"], client["lang"]) == (
        "A",
        "a",
        "alice",
        "python3",
    )
    assert {k: client[k] for k in KIND} == KIND
    sub = await nc.subscribe("echo")
    await nc.publish("echo", b"hello")  # in 1 message, 5 bytes; out the same
    await nc.publish("nobody", b"12")
    await sub.next_msg(2)
    await nc.close()
    event = await next_event(disconnects)
    assert event["type"] == "io.nats.server.advisory.v1.client_disconnect"
    gone = event["client"]
    assert list(gone) == [*CLIENT_KEYS, "rtt", "stop", *KIND]
    assert gone["id"] == client["id"] and gone["start"] == client["start"]
    assert isinstance(gone["rtt"], int) and gone["rtt"] > 0
    assert (event["sent"], event["received"]) == (
        {"msgs": 2, "bytes": 7},
        {"msgs": 1, "bytes": 5},
    )
    assert event["reason"] == "Client Closed"
    count = await next_event(counts, conns=0)
    none = {"msgs": 0, "bytes": 0}
    kinds = {"gateways": none, "routes": none, "leafs": none}
    assert (count["leafnodes"], count["total_conns"], count["slow_consumers"]) == (0, 0, 0)
    assert count["sent"] == {"msgs": 1, "bytes": 5, **kinds}
    assert count["received"] == {"msgs": 2, "bytes": 7, **kinds}


async def test_a_client_refused_for_max_connections_is_reported_as_it_ends(
    server_kind: str, server_pool: ServerPool, connect: Connect
) -> None:
    server = server_pool.get(server_kind, config=ACCOUNTS)
    sys_nc = await connect(f"nats://sys:sys@{server.host}:{server.port}")
    disconnects = await sys_nc.subscribe("$SYS.ACCOUNT.L.DISCONNECT")
    await sys_nc.flush()
    await connect(f"nats://l:l@{server.host}:{server.port}", name="one")
    with pytest.raises(nats.errors.Error, match="maximum account active connections"):
        await nats.connect(
            f"nats://l:l@{server.host}:{server.port}", name="two", allow_reconnect=False
        )
    event = await next_event(disconnects)
    assert event["client"]["name"] == "two"
    assert event["reason"] == "Maximum Account Connections Exceeded"


def leaf_port(server: ServerProcess) -> int:
    found = server.wait_for_log(r"Listening for leafnode connections on [\d.]+:(\d+)")
    return int(found.group(1))


async def test_leafnodes_counted_across_the_cluster(
    server_kind: str, tmp_path: Path, connect: Connect
) -> None:
    config = ONE_ROUTE_PER_PEER + ACCOUNTS + "leafnodes { listen: 127.0.0.1:-1 }\n"
    servers = start_cluster(server_kind, tmp_path, 2, config=config)
    try:
        wait_mesh(servers, ["S0", "S1"])
        sys_nc = await connect(f"nats://sys:sys@{servers[1].host}:{servers[1].port}")
        counts = await sys_nc.subscribe("$SYS.ACCOUNT.A.SERVER.CONNS")
        connects = await sys_nc.subscribe("$SYS.ACCOUNT.A.CONNECT")
        disconnects = await sys_nc.subscribe("$SYS.ACCOUNT.A.DISCONNECT")
        await sys_nc.flush()
        await routed_interest(sys_nc, f"nats://sys:sys@{servers[0].host}:{servers[0].port}")
        nc = await nats.connect(f"nats://a:a@{servers[0].host}:{servers[0].port}", name="far")
        # S0's connect event crosses the route to S1's system user.
        event = await next_event(connects)
        assert (event["server"]["name"], event["client"]["name"]) == ("S0", "far")
        await nc.close()
        first, answer = leaf_connect(leaf_port(servers[0]), "LEAF1")
        assert answer == b"PONG\r\n"
        leaf = (await next_event(connects))["client"]  # an accepted leafnode's own event
        assert list(leaf) == ["start", "host", "id", "acc", "user", "name", "name_tag", "kind"]
        assert (leaf["user"], leaf["name"], leaf["kind"]) == ("lim", "LEAF1", "Leafnode")
        count = await next_event(counts, leafnodes=1)
        assert count["server"]["name"] == "S0" and count["total_conns"] == 1
        # S1 has no leafnode of A, but the cluster has its one: a second is refused there.
        second, answer = leaf_connect(leaf_port(servers[1]), "LEAF2")
        assert answer == REFUSED
        second.close()
        first.close()
        await next_event(counts, leafnodes=0)
        ended: dict[str, dict] = {}
        while len(ended) < 3:
            event = await next_event(disconnects)
            ended[event["client"]["name"]] = event
        # LEAF2 ended on S1 and LEAF1 on S0: their events cross no common path, so
        # either may come first.
        assert {name: e["reason"] for name, e in ended.items()} == {
            "far": "Client Closed",
            "LEAF2": "Maximum Account Connections Exceeded",
            "LEAF1": "Client Closed",
        }
        gone = ended["LEAF1"]
        assert gone["client"]["kind"] == "Leafnode"
        assert gone["reason"] == "Client Closed"
        assert gone["sent"] == gone["received"] == {"msgs": 0, "bytes": 0}
        third, answer = leaf_connect(leaf_port(servers[1]), "LEAF3")
        assert answer == b"PONG\r\n"
        third.close()
    finally:
        stop_all(servers)


async def test_a_jwt_users_connect_event(
    server_kind: str, tmp_path: Path, connect: Connect
) -> None:
    """Operator mode: the account is its public key, named by its JWT; the user is its
    key, with its JWT, its issuer and its tags."""
    nsc = Nsc(tmp_path / "nsc")
    nsc.operator()
    nsc.run("add", "account", "B")
    nsc.run("add", "user", "-a", "B", "--tag", "team:blue", "alice")
    server = start_server(server_kind, config=nsc.memory_config(), tmp_path=tmp_path)
    try:
        account = nsc.public("account", "B")
        sys_nc = await connect(server, user_credentials=str(nsc.creds("SYS", "sys")))
        connects = await sys_nc.subscribe(f"$SYS.ACCOUNT.{account}.CONNECT")
        await sys_nc.flush()
        await connect(server, user_credentials=str(nsc.creds("B", "alice")), name="alice")
        client = (await next_event(connects))["client"]
        assert list(client) == [*CLIENT_KEYS, "jwt", "issuer_key", "name_tag", "tags", "kind",
                                "client_type"]  # fmt: skip
        assert (client["acc"], client["user"]) == (account, nsc.public("user", "-a", "B", "alice"))
        assert client["jwt"] == nsc.user_jwt("B", "alice")
        assert (client["issuer_key"], client["name_tag"], client["tags"]) == (
            account,
            "B",
            ["team:blue"],
        )
    finally:
        stop_all([server])


MQTT_CONFIG = """
server_name: M1
mqtt {{ port: {port} }}
accounts {{
  SYS {{ users [ {{user: sys, password: sys}} ] }}
  M {{ users [ {{user: m, password: m}} ], jetstream: enabled }}
}}
system_account: SYS
"""


async def test_an_mqtt_clients_events(server_kind: str, tmp_path: Path, connect: Connect) -> None:
    """The client is its user and its client id, of type mqtt; what it published counts
    as sent."""
    port = free_port()
    config = MQTT_CONFIG.format(port=port)
    server = start_server(server_kind, "-js", "-sd", str(tmp_path / "js"), config=config,
                          tmp_path=tmp_path)  # fmt: skip
    try:
        sys_nc = await connect(f"nats://sys:sys@{server.host}:{server.port}")
        connects = await sys_nc.subscribe("$SYS.ACCOUNT.M.CONNECT")
        disconnects = await sys_nc.subscribe("$SYS.ACCOUNT.M.DISCONNECT")
        await sys_nc.flush()
        await asyncio.to_thread(mqtt_session, port)
        client = (await next_event(connects))["client"]
        assert list(client) == ["start", "host", "id", "acc", "user", "name_tag", "kind",
                                "client_type", "client_id"]  # fmt: skip
        assert (client["user"], client["client_type"], client["client_id"]) == ("m", "mqtt", "dev1")
        gone = await next_event(disconnects)
        assert gone["client"]["client_id"] == "dev1" and gone["reason"] == "Client Closed"
        assert gone["sent"]["msgs"] == 1
    finally:
        stop_all([server])


def mqtt_session(port: int) -> None:
    """Connect as dev1, publish one message, disconnect."""
    done = threading.Event()
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="dev1")
    client.username_pw_set("m", "m")
    client.on_connect = lambda *_: done.set()
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        assert done.wait(10), "no CONNACK"
        client.publish("a/b", b"hello", qos=1).wait_for_publish(10)
    finally:
        client.disconnect()
        client.loop_stop()
