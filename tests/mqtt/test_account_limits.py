"""An account's `max_connections` counts its MQTT clients with its NATS clients, on both
servers: an MQTT CONNECT past the limit is closed without a CONNACK (the reference's
refusal closes the socket first) and logged as the reference logs it, a NATS client is
refused while MQTT clients hold the places, and a place comes back when one leaves."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiomqtt
import nats
import pytest

from ingest.parser import mqtt
from tests.conftest import ServerPool
from tests.mqtt.conftest import TIMEOUT, MQTTServer, RawMQTT, mqtt_port

CONFIG = """
jetstream {{ store_dir: "{store}" }}
accounts {{
  APP {{
    jetstream: enabled, limits: {{ max_connections: 2 }}, users: [{{user: app, password: pw}}]
  }}
}}
mqtt {{ port: -1 }}
"""

LIMIT = "maximum account active connections exceeded"


@pytest.fixture
def server(server_kind: str, server_pool: ServerPool, tmp_path_factory: Any) -> MQTTServer:
    store = Path(tmp_path_factory.getbasetemp()) / f"mqtt-limits-{server_kind}"
    process = server_pool.get(server_kind, config=CONFIG.format(store=store))
    return MQTTServer(process, mqtt_port(process))


def _device(server: MQTTServer, client_id: str) -> aiomqtt.Client:
    return aiomqtt.Client(
        "127.0.0.1", server.mqtt_port, identifier=client_id, username="app", password="pw",
        timeout=TIMEOUT,
    )  # fmt: skip


async def _refused_mqtt(server: MQTTServer, client_id: str) -> None:
    raw = await RawMQTT.open(server)
    try:
        raw.send(mqtt.Connect(client_id, True, 0, None, "app", b"pw"))
        assert await raw.packet() is None  # closed, no CONNACK
    finally:
        raw.close()


async def test_mqtt_clients_count_against_max_connections(server: MQTTServer) -> None:
    url = server.process.url
    async with _device(server, "lim-a"):
        nc = await nats.connect(url, user="app", password="pw", allow_reconnect=False)
        try:
            await _refused_mqtt(server, "lim-b")
            server.process.wait_for_log(
                rf'mid:\d+ - "lim-b" - {LIMIT}$', timeout=TIMEOUT
            )  # fmt: skip
            server.process.wait_for_log(
                r'"lim-b" - authentication error - User "app"', timeout=TIMEOUT
            )  # fmt: skip
            with pytest.raises(nats.errors.Error, match=LIMIT):
                await nats.connect(url, user="app", password="pw", allow_reconnect=False)
        finally:
            await nc.close()
        async with _device(server, "lim-c"):  # the NATS client's place
            with pytest.raises(nats.errors.Error, match=LIMIT):
                await nats.connect(url, user="app", password="pw", allow_reconnect=False)
    # Both devices gone: their places come back once the server has seen them leave.
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            nc = await nats.connect(url, user="app", password="pw", allow_reconnect=False)
            break
        except nats.errors.Error:
            assert time.monotonic() < deadline, "the devices' places never came back"
            await asyncio.sleep(0.05)
    async with _device(server, "lim-d"):
        await nc.close()
