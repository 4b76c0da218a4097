"""MQTT in named accounts, on both servers: a user's MQTT state lives in its account's
JetStream, its publishes reach that account only, and two accounts share nothing (not
even a client id); `no_auth_user` places a client with no credentials; an account
without JetStream takes no MQTT client."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiomqtt
import nats
import pytest

from ingest.parser import mqtt as codec
from tests.conftest import ServerPool
from tests.mqtt.conftest import TIMEOUT, MQTTServer, mqtt_port, next_message

CONFIG = """
server_name: acc
jetstream {{ store_dir: "{store}" }}
accounts {{
  APP {{ jetstream: enabled, users: [
    {{user: app, password: pw}}
    {{user: guest, password: pw, permissions: {{publish: {{deny: "secret.>"}}}}}}
  ] }}
  OTHER {{ jetstream: enabled, users: [{{user: other, password: pw}}] }}
  BARE {{ users: [{{user: bare, password: pw}}] }}
  SYS {{ users: [{{user: sys, password: pw}}] }}
}}
system_account: SYS
no_auth_user: other
mqtt {{ port: -1 }}
"""

MQTT_STREAMS = {"$MQTT_sess", "$MQTT_msgs", "$MQTT_rmsgs"}


@pytest.fixture
def server(server_kind: str, server_pool: ServerPool, tmp_path_factory: Any) -> MQTTServer:
    store = Path(tmp_path_factory.getbasetemp()) / f"mqtt-accounts-{server_kind}"
    config = CONFIG.format(store=store)
    process = server_pool.get(server_kind, config=config)
    return MQTTServer(process, mqtt_port(process))


@pytest.fixture
async def clients(server: MQTTServer) -> AsyncIterator[Any]:
    stack = contextlib.AsyncExitStack()

    async def mqtt(user: str | None, client_id: str, **options: Any) -> aiomqtt.Client:
        creds = {"username": user, "password": "pw"} if user else {}
        client = aiomqtt.Client(
            "127.0.0.1",
            server.mqtt_port,
            identifier=client_id,
            timeout=TIMEOUT,
            **creds,
            **options,
        )
        await stack.enter_async_context(client)
        return client

    async def nats_client(user: str) -> Any:
        nc = await nats.connect(server.process.url, user=user, password="pw")
        stack.push_async_callback(nc.close)
        return nc

    async with stack:
        yield mqtt, nats_client


async def _stream_names(nc: Any) -> set[str]:
    reply = await nc.request("$JS.API.STREAM.NAMES", b"", timeout=TIMEOUT)
    return set(json.loads(reply.data).get("streams") or ())


async def test_publishes_stay_in_the_account(clients: Any) -> None:
    mqtt, nats_client = clients
    app_nats, other_nats = await nats_client("app"), await nats_client("other")
    app_sub = await app_nats.subscribe("acc.t1")
    other_sub = await other_nats.subscribe("acc.t1")
    await app_nats.flush()
    await other_nats.flush()
    other_mqtt = await mqtt("other", "acc-t1-o")
    await other_mqtt.subscribe("acc/t1", qos=1)
    app_mqtt = await mqtt("app", "acc-t1-a")
    await app_mqtt.subscribe("acc/t1", qos=1)
    await app_mqtt.publish("acc/t1", b"q0", qos=0)
    await app_mqtt.publish("acc/t1", b"q1", qos=1)
    got = [await app_sub.next_msg(TIMEOUT), await app_sub.next_msg(TIMEOUT)]
    assert [m.data for m in got] == [b"q0", b"q1"]
    assert got[1].headers == {"Nmqtt-Pub": "1"}
    mine = [await next_message(app_mqtt), await next_message(app_mqtt)]
    assert sorted(m.payload for m in mine) == [b"q0", b"q1"]
    # A NATS publish of the other account marks where the other account's clients are.
    await other_nats.publish("acc.t1", b"mark")
    assert (await other_sub.next_msg(TIMEOUT)).data == b"mark"
    assert (await next_message(other_mqtt)).payload == b"mark"
    with pytest.raises(nats.errors.TimeoutError):
        await app_sub.next_msg(0.2)  # nor did the other account's publish reach APP


async def test_state_is_kept_in_the_accounts_streams(clients: Any) -> None:
    mqtt, nats_client = clients
    await mqtt("app", "acc-t2", clean_session=False)
    app_nats, bare_nats = await nats_client("app"), await nats_client("bare")
    assert await _stream_names(app_nats) >= MQTT_STREAMS
    reply = await bare_nats.request("$JS.API.STREAM.NAMES", b"", timeout=TIMEOUT)
    assert b"10039" in reply.data  # BARE has no JetStream: no MQTT state there either


async def test_retained_messages_are_the_accounts(clients: Any) -> None:
    mqtt, _ = clients
    app = await mqtt("app", "acc-t3-a")
    await app.publish("acc/t3", b"kept", qos=1, retain=True)
    other = await mqtt("other", "acc-t3-o")
    await other.subscribe("acc/t3")
    await other.publish("acc/t3-mark", b"")
    await other.subscribe("acc/t3-mark")
    await other.publish("acc/t3-mark", b"m")
    assert (await next_message(other)).topic.value == "acc/t3-mark"  # no retained first
    reader = await mqtt("app", "acc-t3-r")
    await reader.subscribe("acc/t3")
    msg = await next_message(reader)
    assert (msg.payload, msg.retain) == (b"kept", True)
    await app.publish("acc/t3", b"", qos=1, retain=True)  # cleared for the next run


async def test_one_client_id_in_two_accounts_is_two_sessions(clients: Any) -> None:
    mqtt, _ = clients
    app = await mqtt("app", "acc-same", clean_session=False)
    other = await mqtt("other", "acc-same", clean_session=False)
    await app.subscribe("acc/same", qos=1)
    await other.subscribe("acc/same", qos=1)
    await app.publish("acc/same", b"from app", qos=1)
    await other.publish("acc/same", b"from other", qos=1)
    assert (await next_message(app)).payload == b"from app"
    assert (await next_message(other)).payload == b"from other"


async def test_no_auth_user_places_a_client_without_credentials(clients: Any) -> None:
    mqtt, nats_client = clients
    other_nats = await nats_client("other")
    sub = await other_nats.subscribe("acc.t5")
    await other_nats.flush()
    anonymous = await mqtt(None, "acc-t5")
    await anonymous.publish("acc/t5", b"who", qos=1)
    assert (await sub.next_msg(TIMEOUT)).data == b"who"


async def test_permissions_of_an_account_user_hold(clients: Any) -> None:
    mqtt, nats_client = clients
    app_nats = await nats_client("app")
    sub = await app_nats.subscribe("secret.t6")
    ok = await app_nats.subscribe("open.t6")
    await app_nats.flush()
    guest = await mqtt("guest", "acc-t6")
    await guest.publish("secret/t6", b"no", qos=1)
    await guest.publish("open/t6", b"yes", qos=1)
    assert (await ok.next_msg(TIMEOUT)).data == b"yes"
    with pytest.raises(nats.errors.TimeoutError):
        await sub.next_msg(0.2)


async def test_an_account_without_jetstream_takes_no_mqtt_client(
    server: MQTTServer, open_raw: Any
) -> None:
    raw = await open_raw(server)
    raw.send(codec.Connect("acc-t7", True, 0, None, "bare", b"pw"))
    assert await raw.closed()  # no CONNACK: its MQTT streams cannot be made
    found = await server.process.wait_for_log_async(
        re.compile(r'"acc-t7" - unable to connect: .*JetStream not enabled for account \(10039\)')
    )
    assert found is not None
