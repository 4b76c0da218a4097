"""MQTT logins in operator mode, on both servers: the password carries a bearer user
JWT (MQTT has no nonce to sign), the account is fetched from a URL resolver at the
login, the client's MQTT state lives in that account's JetStream, and a revocation
pushed for the account cuts the user off."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiomqtt
import nats
import pytest

from ingest.parser import mqtt
from tests.conftest import MakeServer
from tests.e2e.test_url_resolver import AccountServer
from tests.mqtt.conftest import TIMEOUT, MQTTServer, mqtt_port, next_message
from tests.support.nsc import Nsc


@pytest.fixture(scope="module")
def nsc(tmp_path_factory: pytest.TempPathFactory) -> Nsc:
    nsc = Nsc(tmp_path_factory.mktemp("nsc-mqtt"))
    nsc.operator()
    nsc.run("add", "account", "D")
    nsc.run("edit", "account", "D", "--js-mem-storage", "-1", "--js-disk-storage", "-1")
    nsc.run("add", "user", "-a", "D", "device", "--bearer")
    nsc.run("add", "user", "-a", "D", "signer")  # not bearer: it would have to sign a nonce
    return nsc


@pytest.fixture
def accounts(nsc: Nsc) -> Iterator[AccountServer]:
    served = {nsc.public("account", name): nsc.account_jwt(name) for name in ("SYS", "D")}
    server = AccountServer(served)
    yield server
    server.close()


async def test_a_bearer_jwt_logs_in_and_its_account_is_fetched(
    make_server: MakeServer,
    nsc: Nsc,
    accounts: AccountServer,
    tmp_path: Path,
    server_kind: str,
    open_raw: Any,
) -> None:
    victim = f"victim-{server_kind}"  # the module's nsc is shared: one user per kind
    nsc.run("add", "user", "-a", "D", victim, "--bearer")
    config = (
        f"operator: {nsc.operator_jwt()}\nsystem_account: {nsc.public('account', 'SYS')}\n"
        f'resolver: URL("{accounts.url}")\nserver_name: jwt\n'
        f'jetstream {{ store_dir: "{tmp_path / "js"}" }}\nmqtt {{ port: -1 }}\n'
    )
    server = make_server(config=config)
    port = mqtt_port(server)
    device = nsc.user_jwt("D", "device")
    async with aiomqtt.Client(
        "127.0.0.1", port, identifier="dev", username="x", password=device, timeout=TIMEOUT
    ) as client:
        assert accounts.gets.count(nsc.public("account", "D")) == 1  # fetched at the login
        await client.subscribe("d/t", qos=1)
        await client.publish("d/t", b"stored", qos=1)
        assert (await next_message(client)).payload == b"stored"
    signer = nsc.user_jwt("D", "signer")
    refused = aiomqtt.Client(
        "127.0.0.1", port, identifier="s", username="x", password=signer, timeout=TIMEOUT
    )
    with pytest.raises(aiomqtt.MqttCodeError, match="Not authorized"):
        await refused.__aenter__()

    raw = await open_raw(MQTTServer(server, port))
    raw.send(mqtt.Connect("v", True, 0, None, "x", nsc.user_jwt("D", victim).encode()))
    assert await raw.packet() == mqtt.ConnAck(False, mqtt.ACCEPTED)
    nsc.run("revocations", "add-user", "-a", "D", "-n", victim)
    sys_nc = await nats.connect(server.url, user_credentials=str(nsc.creds("SYS", "sys")))
    try:
        subject = f"$SYS.ACCOUNT.{nsc.public('account', 'D')}.CLAIMS.UPDATE"
        reply = await sys_nc.request(subject, nsc.account_jwt("D").encode(), timeout=TIMEOUT)
        assert json.loads(reply.data)["data"]["message"] == "jwt updated"
    finally:
        await sys_nc.close()
    assert await raw.closed()  # cut off: MQTT has no -ERR
