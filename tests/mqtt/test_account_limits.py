"""An account's `max_connections` counts its MQTT clients with its NATS clients, on both
servers: an MQTT CONNECT past the limit is closed without a CONNACK (the reference's
refusal closes the socket first), logged as the reference logs it and reported by the
account's DISCONNECT event alone; a NATS client is refused while MQTT clients hold the
places, and a place comes back when one leaves."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiomqtt
import nats
import pytest

from ingest.parser import mqtt
from tests.conftest import ServerPool
from tests.mqtt.conftest import TIMEOUT, MQTTServer, RawMQTT, mqtt_port
from tests.support.poll import poll_async

CONFIG = """
jetstream {{ store_dir: "{store}" }}
accounts {{
  APP {{
    jetstream: enabled, limits: {{ max_connections: 2 }}, users: [{{user: app, password: pw}}]
  }}
  ONE {{
    jetstream: enabled, limits: {{ max_connections: 1 }}, users: [{{user: one, password: pw}}]
  }}
  SYS {{ users: [{{user: sys, password: pw}}] }}
}}
system_account: SYS
mqtt {{ port: -1 }}
"""

LIMIT = "maximum account active connections exceeded"


@pytest.fixture
def server(
    server_kind: str, server_pool: ServerPool, tmp_path_factory: Any, request: pytest.FixtureRequest
) -> MQTTServer:
    """One server per test (its own store makes its own config): the reference logs an
    error statement at most once a second server-wide, so another test's refusal just
    before would keep this one's "maximum account active connections" line out of the log."""
    test = request.node.originalname
    store = Path(tmp_path_factory.getbasetemp()) / f"mqtt-limits-{server_kind}-{test}"
    process = server_pool.get(server_kind, config=CONFIG.format(store=store))
    return MQTTServer(process, mqtt_port(process))


def _device(server: MQTTServer, client_id: str, timeout: float = TIMEOUT) -> aiomqtt.Client:
    return aiomqtt.Client(
        "127.0.0.1", server.mqtt_port, identifier=client_id, username="app", password="pw",
        timeout=timeout,
    )  # fmt: skip


async def _refused_mqtt(server: MQTTServer, client_id: str, user: str = "app") -> None:
    raw = await RawMQTT.open(server)
    try:
        raw.send(mqtt.Connect(client_id, True, 0, None, user, b"pw"))
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
        # The NATS client's place, once the server has seen it leave (close() does not wait).
        async with AsyncExitStack() as stack:
            await poll_async(
                # A refused CONNECT gets no CONNACK: each try waits out its own timeout.
                lambda: stack.enter_async_context(_device(server, "lim-c", timeout=1.0)),
                "the NATS client's place back",
                3 * TIMEOUT,
                retry=aiomqtt.MqttError,
            )
            with pytest.raises(nats.errors.Error, match=LIMIT):
                await nats.connect(url, user="app", password="pw", allow_reconnect=False)
    # Both devices gone: their places come back once the server has seen them leave.
    nc = await poll_async(
        lambda: nats.connect(url, user="app", password="pw", allow_reconnect=False),
        "the devices' places back",
        TIMEOUT,
        retry=nats.errors.Error,
    )
    async with _device(server, "lim-d"):
        await nc.close()


async def test_a_refused_mqtt_client_is_reported_as_it_ends(server: MQTTServer) -> None:
    """As a refused NATS client: no CONNECT event, a DISCONNECT naming its client id."""
    sys_nc = await nats.connect(server.process.url, user="sys", password="pw")
    try:
        events = await sys_nc.subscribe("$SYS.ACCOUNT.ONE.*")
        await sys_nc.flush()
        device = aiomqtt.Client(
            "127.0.0.1", server.mqtt_port, identifier="one-a", username="one", password="pw",
            timeout=TIMEOUT,
        )  # fmt: skip
        async with device:
            await _refused_mqtt(server, "one-b", "one")
            seen = []
            while not seen or seen[-1]["subject"] != "$SYS.ACCOUNT.ONE.DISCONNECT":
                msg = await events.next_msg(TIMEOUT)
                seen.append(json.loads(msg.data) | {"subject": msg.subject})
        ends = [(e["subject"], e["client"]["client_id"]) for e in seen]
        assert ends == [
            ("$SYS.ACCOUNT.ONE.CONNECT", "one-a"),
            ("$SYS.ACCOUNT.ONE.DISCONNECT", "one-b"),
        ]
        gone = seen[-1]
        assert gone["reason"] == "Maximum Account Connections Exceeded"
        assert (gone["client"]["client_type"], gone["client"]["user"]) == ("mqtt", "one")
        assert (gone["sent"], gone["received"]) == ({"msgs": 0, "bytes": 0},) * 2
        assert list(gone["client"]) == ["start", "host", "id", "acc", "user", "stop", "name_tag",
                                        "kind", "client_type", "client_id"]  # fmt: skip
    finally:
        await sys_nc.close()
