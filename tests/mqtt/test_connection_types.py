"""`allowed_connection_types`: a user kept to MQTT cannot use NATS, and the other way round."""

from __future__ import annotations

import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from ingest.parser import mqtt
from tests.conftest import Connect as NatsConnect
from tests.e2e.test_core_auth import expect_auth_failure
from tests.mqtt.conftest import MQTTServer, RawMQTT, StartMQTT
from tests.support.servers import server_command

OpenRaw = Callable[[MQTTServer], Awaitable[RawMQTT]]

USERS = """
authorization {
  users: [
    {user: device, password: pw, allowed_connection_types: ["mqtt"]}
    {user: app, password: pw, allowed_connection_types: "STANDARD"}
    {user: both, password: pw, connection_types: ["STANDARD", "MQTT"]}
  ]
}
"""


async def _connack(open_raw: OpenRaw, server: MQTTServer, user: str) -> mqtt.Packet | None:
    raw = await open_raw(server)
    raw.send(mqtt.Connect(f"id-{user}", True, 0, None, user, b"pw"))
    return await raw.packet()


async def test_users_are_kept_to_their_connection_types(
    start_mqtt: StartMQTT, open_raw: OpenRaw, connect: NatsConnect
) -> None:
    server = start_mqtt("", USERS)
    assert await _connack(open_raw, server, "device") == mqtt.ConnAck(False, mqtt.ACCEPTED)
    assert await _connack(open_raw, server, "both") == mqtt.ConnAck(False, mqtt.ACCEPTED)
    refused = await open_raw(server)
    refused.send(mqtt.Connect("id-app", True, 0, None, "app", b"pw"))
    assert await refused.packet() == mqtt.ConnAck(False, mqtt.NOT_AUTHORIZED)
    assert await refused.closed()
    await expect_auth_failure(server.process, user="device", password="pw")
    for user in ("app", "both"):
        nc = await connect(server.process, user=user, password="pw")
        assert nc.is_connected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('["STANDARD", "bogus", "x"]', ':3:28: invalid connection types ["BOGUS" "X"]'),
        ("5", ":3:28: error parsing allowed connection types: unsupported type int64"),
    ],
)
def test_unknown_connection_types_are_config_errors(
    server_kind: str, tmp_path: Path, value: str, message: str
) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text(
        f"authorization {{\n  users: [\n    {{user: a, password: b, allowed_connection_types: "
        f"{value}}}\n  ]\n}}\n"
    )
    argv = [*server_command(server_kind), "-c", str(conf), "-p", "-1"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert done.returncode == 1
    assert message in done.stderr
