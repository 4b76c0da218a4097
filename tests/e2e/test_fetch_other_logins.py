"""Logins other than a NATS client's wait for their account to be fetched too, on both
servers: a leaf whose remote's credentials are a user of an account the hub has not
seen, and a WebSocket client whose JWT comes in the `jwt_cookie`. The hub's URL
resolver fetches the account once, at that login, and the login then succeeds."""

from __future__ import annotations

import json
from collections.abc import Iterator

import nats
import pytest

from tests.conftest import MakeServer
from tests.e2e.test_url_resolver import AccountServer
from tests.leafnode.conftest import leaf_port, leafz, linked
from tests.support.nsc import Nsc
from tests.support.poll import poll
from tests.support.servers import ServerProcess
from tests.websocket.conftest import RawWS, ws_port


@pytest.fixture(scope="module")
def nsc(tmp_path_factory: pytest.TempPathFactory) -> Nsc:
    nsc = Nsc(tmp_path_factory.mktemp("nsc-fetch"))
    nsc.operator()
    for account in ("L", "W"):
        nsc.run("add", "account", account)
    nsc.run("add", "user", "-a", "L", "leaf")
    nsc.run("add", "user", "-a", "L", "reader")
    nsc.run("add", "user", "-a", "W", "browser", "--bearer")
    return nsc


@pytest.fixture
def accounts(nsc: Nsc) -> Iterator[AccountServer]:
    served = {nsc.public("account", n): nsc.account_jwt(n) for n in ("SYS", "L", "W")}
    server = AccountServer(served)
    yield server
    server.close()


async def test_leaf_and_cookie_logins_wait_for_the_fetch(
    make_server: MakeServer,
    nsc: Nsc,
    accounts: AccountServer,
) -> None:
    hub = make_server(
        "-m",
        "-1",
        config=(
            f"operator: {nsc.operator_jwt()}\nsystem_account: {nsc.public('account', 'SYS')}\n"
            f'resolver: URL("{accounts.url}")\n'
            "leafnodes { listen: 127.0.0.1:-1 }\n"
            'websocket { port: -1, no_tls: true, jwt_cookie: "jwt" }\n'
        ),
    )
    leaf = make_server(
        "-m",
        "-1",
        config=(
            "leafnodes { remotes: [ { url: "
            f'"nats-leaf://127.0.0.1:{leaf_port(hub)}", credentials: "{nsc.creds("L", "leaf")}"'
            " } ] }\n"
        ),
    )
    poll(lambda: linked(hub), "the leaf linked to the hub")
    assert accounts.gets.count(nsc.public("account", "L")) == 1  # fetched at its login
    # The link is the account's: a hub client of L hears what the leaf's client publishes.
    reader = await nats.connect(hub.url, user_credentials=str(nsc.creds("L", "reader")))
    try:
        sub = await reader.subscribe("from.leaf")
        await reader.flush()
        sender = await nats.connect(leaf.url)
        try:
            poll(lambda: _leaf_has_interest(leaf), "the hub's interest reached the leaf")
            await sender.publish("from.leaf", b"up")
            assert (await sub.next_msg(5)).data == b"up"
        finally:
            await sender.close()
    finally:
        await reader.close()

    cookie = f"Cookie: jwt={nsc.user_jwt('W', 'browser')}\r\n"
    ws = await RawWS.open(ws_port(hub), headers=cookie)
    try:
        assert ws.status == 101
        await ws.read_data(b"\r\n")  # INFO
        ws.send(b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
        assert b"PONG" in await ws.read_data(b"\r\n")
    finally:
        await ws.close()
    assert accounts.gets.count(nsc.public("account", "W")) == 1


def _leaf_has_interest(leaf: ServerProcess) -> bool:
    found = leafz(leaf)
    subs = [s for node in found["leafs"] for s in node.get("subscriptions_list") or ()]
    return "from.leaf" in json.dumps(subs)
