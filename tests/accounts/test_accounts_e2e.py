"""Accounts on real servers, the reference and jetlake alike: separate subject spaces,
JetStream per account stored under the account's name, the refusal for accounts
without JetStream, and accounts kept apart across routes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nats.errors import NoRespondersError

from tests.conftest import Connect, MakeServer
from tests.support.clients import barrier, crossed, drain_pending, sync
from tests.support.cluster import cluster_args, free_port, stop_all, wait_mesh
from tests.support.http import get_json
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess, start_server

ACCOUNTS = """
authorization { users [ {user: g, password: g} ] }
accounts {
  A { users [ {user: a, password: a} ], jetstream: enabled }
  B { users [ {user: b, password: b} ] }
  SYS { users [ {user: sys, password: sys} ] }
}
system_account: SYS
"""
PAGE = {"total": 0, "offset": 0, "limit": 0}
NOT_ENABLED = {"code": 503, "err_code": 10039, "description": "JetStream not enabled for account"}


def url(server: ServerProcess, user: str) -> str:
    return f"nats://{user}:{user}@{server.host}:{server.port}"


async def test_each_account_has_its_own_subjects(make_server: MakeServer, connect: Connect) -> None:
    server = make_server(config=ACCOUNTS)
    a1, a2, b, g = [await connect(url(server, u)) for u in ("a", "a", "b", "g")]
    subs = {name: await nc.subscribe("x") for name, nc in (("a2", a2), ("b", b), ("g", g))}
    await barrier(a1, a2, b, g)
    await a1.publish("x", b"in A")
    await b.publish("x", b"in B")
    await barrier(a1, a2, b, g)
    await barrier(b, a2, g)
    got = {name: [m.data for m in await drain_pending(sub)] for name, sub in subs.items()}
    assert got == {"a2": [b"in A"], "b": [b"in B"], "g": []}


async def test_user_info_names_the_account(make_server: MakeServer, connect: Connect) -> None:
    server = make_server(config=ACCOUNTS)
    nc = await connect(url(server, "a"))
    reply = await nc.request("$SYS.REQ.USER.INFO", b"", timeout=5)
    data = json.loads(reply.data)["data"]
    assert (data["user"], data["account"]) == ("a", "A")


async def test_jetstream_per_account(
    make_server: MakeServer, connect: Connect, tmp_path: Path
) -> None:
    store = tmp_path / "js"
    server = make_server("-js", "-sd", str(store), config=ACCOUNTS)
    a = await connect(url(server, "a"))
    refusals = {  # B, the global account and the system account have no JetStream
        ("b", "$JS.API.STREAM.CREATE.S"): ("stream_create_response", {}),
        ("g", "$JS.API.STREAM.LIST"): ("stream_list_response", {**PAGE, "streams": []}),
        ("g", "$JS.API.INFO"): ("account_info_response", {}),
        ("sys", "$JS.API.STREAM.INFO.S"): ("system_response", {}),
        ("sys", "$JS.API.INFO"): ("account_info_response", {}),
    }
    for (user, subject), (kind, extra) in refusals.items():
        nc = await connect(url(server, user))
        reply = await nc.request(subject, b"", timeout=5)
        assert json.loads(reply.data) == {
            "type": "io.nats.jetstream.api.v1." + kind,
            "error": NOT_ENABLED,
            **extra,
        }
    js = a.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    ack = await js.publish("s.1", b"one")
    assert (ack.stream, ack.seq) == ("S", 1)
    assert (await js.stream_info("S")).state.messages == 1
    assert (store / "jetstream" / "A" / "streams" / "S").is_dir()
    assert not (store / "jetstream" / "$G" / "streams" / "S").exists()
    server.restart()
    a = await connect(url(server, "a"))
    assert (await a.jetstream().stream_info("S")).state.messages == 1


async def test_without_accounts_the_global_account_keeps_its_streams(
    make_server: MakeServer, connect: Connect, tmp_path: Path
) -> None:
    store = tmp_path / "js"
    server = make_server("-js", "-sd", str(store))
    js = (await connect(server)).jetstream()
    await js.add_stream(name="G", subjects=["g"])
    assert (store / "jetstream" / "$G" / "streams" / "G").is_dir()
    info = await (await connect(server)).request("$JS.API.INFO", b"", timeout=5)
    assert json.loads(info.data)["streams"] == 1


async def test_routes_keep_accounts_apart(
    server_kind: str, tmp_path: Path, connect: Connect
) -> None:
    ports = [free_port() for _ in range(2)]
    servers = []
    try:
        for i in range(2):
            args = cluster_args(f"S{i}", ports[i], [ports[0]] if i else [])
            config = ACCOUNTS + "cluster { pool_size: -1 }\n"
            servers.append(
                start_server(server_kind, *args, config=config, tmp_path=tmp_path, name=f"S{i}")
            )
        wait_mesh(servers, ["S0", "S1"])
        sub_a = await connect(url(servers[1], "a"))
        sub_b = await connect(url(servers[1], "b"))
        in_a, in_b = await sub_a.subscribe("x"), await sub_b.subscribe("x")
        await sync(sub_a)
        await sync(sub_b)
        pub_a = await connect(url(servers[0], "a"))
        pub_b = await connect(url(servers[0], "b"))

        # Interest crosses the route on its own time: publish until it has.
        await poll_async(lambda: crossed(pub_a, "x", in_a, b"A"), "A's interest on S0")
        await poll_async(lambda: crossed(pub_b, "x", in_b, b"B"), "B's interest on S0")
        await pub_a.publish("x", b"A again")
        await pub_b.publish("x", b"B marker")  # sent after A's on the same route
        await sync(pub_a)
        await sync(pub_b)
        assert (await in_b.next_msg(timeout=5)).data == b"B marker"
        assert (await in_a.next_msg(timeout=5)).data == b"A again"
    finally:
        stop_all(servers)


async def test_system_requests_are_answered_in_the_system_account_only(
    make_server: MakeServer, connect: Connect
) -> None:
    server = make_server("-n", "ONE", config=ACCOUNTS)
    sys_nc = await connect(url(server, "sys"))
    server_id = sys_nc._server_info["server_id"]
    for subject, key in (
        (f"$SYS.REQ.SERVER.{server_id}.VARZ", "data"),
        ("$SYS.REQ.SERVER.PING.VARZ", "data"),
        ("$SYS.REQ.SERVER.PING", "statsz"),
    ):
        answer = json.loads((await sys_nc.request(subject, b"{}", timeout=5)).data)
        assert (answer["server"]["id"], answer["server"]["name"]) == (server_id, "ONE")
        assert key in answer
    connz = json.loads((await sys_nc.request("$SYS.REQ.SERVER.PING.CONNZ", b"", timeout=5)).data)
    assert connz["data"]["num_connections"] == 1
    statsz = json.loads((await sys_nc.request("$SYS.REQ.SERVER.PING", b"", timeout=5)).data)
    assert statsz["statsz"]["connections"] == 1
    a = await connect(url(server, "a"))
    with pytest.raises(NoRespondersError):
        await a.request("$SYS.REQ.SERVER.PING", b"", timeout=5)


async def test_servers_send_statsz_events_with_their_jetstream(
    make_server: MakeServer, connect: Connect, tmp_path: Path
) -> None:
    """Unasked, soon after start and then every few seconds: what watchers of
    `$SYS.SERVER.*.STATSZ` read, and what the meta leader places streams by."""
    config = ACCOUNTS + "jetstream { max_file_store: 64MB }\n"
    server = make_server("-n", "ONE", "-js", "-sd", str(tmp_path / "js"), config=config)
    sys_nc = await connect(url(server, "sys"))
    sub = await sys_nc.subscribe("$SYS.SERVER.*.STATSZ")
    event = json.loads((await sub.next_msg(timeout=15)).data)
    server_id = sys_nc._server_info["server_id"]
    assert (event["server"]["id"], event["server"]["name"]) == (server_id, "ONE")
    js = event["statsz"]["jetstream"]
    assert js["config"]["max_storage"] == 64 * 1024 * 1024
    assert js["stats"]["storage"] == 0


async def test_jsz_reports_the_named_accounts_jetstream(
    make_server: MakeServer, connect: Connect, tmp_path: Path
) -> None:
    """Monitoring sees streams that live in a named account (the global account has none)."""
    server = make_server("-js", "-sd", str(tmp_path / "js"), "-m", "-1", config=ACCOUNTS)
    js = (await connect(url(server, "a"))).jetstream()
    await js.add_stream(name="S", subjects=["s"])
    for _ in range(3):
        await js.publish("s", b"x")
    jsz = await get_json(server.http_url + "/jsz?streams=true")
    assert (jsz.get("disabled"), jsz["streams"], jsz["messages"]) == (None, 1, 3)
    details = [(d["name"], [s["name"] for s in d["stream_detail"]]) for d in jsz["account_details"]]
    assert details == [("A", ["S"])]
    varz = await get_json(server.http_url + "/varz")
    assert varz["jetstream"]["stats"]["accounts"] == 1
