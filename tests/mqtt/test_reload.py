"""A config reload judges MQTT clients again, on both servers: a client whose user is
gone or whose password changed is closed, one whose user moved to another account is
closed, and one that kept its user loses the topic filters its new permissions refuse
while keeping the others. A WebSocket login after the reload takes the new users."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
from pathlib import Path
from typing import Any

import aiomqtt
import nats
import pytest

from ingest.parser import mqtt
from tests.conftest import MakeServer
from tests.mqtt.conftest import TIMEOUT, MQTTServer, mqtt_port, next_message
from tests.websocket.conftest import RawWS, ws_port

RELOADED = re.escape("Reloaded server configuration")

CONFIG = """
server_name: rl
jetstream {{ store_dir: "{store}" }}
accounts {{
  APP {{ jetstream: enabled, users: [
    {{user: app, password: pw{perms}}}
    {gone}
    {{user: changed, password: {password}}}
    {mover_app}
  ] }}
  OTHER {{ jetstream: enabled, users: [{mover_other}] }}
}}
mqtt {{ port: -1 }}
websocket {{ port: -1, no_tls: true }}
"""
MOVER = "{user: mover, password: pw}"
BEFORE = {
    "perms": "",
    "gone": "{user: gone, password: pw}",
    "password": "pw",
    "mover_app": MOVER,
    "mover_other": "",
}
AFTER = {
    "gone": "",
    "perms": ', permissions: {subscribe: {deny: "secret.>"}}',
    "password": "new",
    "mover_app": "",
    "mover_other": MOVER,
}


async def test_reload_judges_mqtt_clients_again(
    make_server: MakeServer, tmp_path: Path, open_raw: Any
) -> None:
    store = tmp_path / "js"
    server = make_server(config=CONFIG.format(store=store, **BEFORE))
    port = mqtt_port(server)
    others = {}
    for user in ("gone", "changed", "mover"):
        raw = others[user] = await open_raw(MQTTServer(server, port))
        raw.send(mqtt.Connect(f"rl-{user}", True, 0, None, user, b"pw"))
        assert await raw.packet() == mqtt.ConnAck(False, mqtt.ACCEPTED)
    async with contextlib.AsyncExitStack() as stack:
        app = aiomqtt.Client(
            "127.0.0.1", port, identifier="rl-app", username="app", password="pw", timeout=TIMEOUT
        )
        await stack.enter_async_context(app)
        await app.subscribe("secret/#")
        await app.subscribe("open/#")
        nc = await nats.connect(server.url, user="app", password="pw")
        stack.push_async_callback(nc.close)

        assert server.config_path is not None
        server.config_path.write_text(CONFIG.format(store=store, **AFTER))
        server.send_signal(signal.SIGHUP)
        await server.wait_for_log_async(RELOADED)
        for user, raw in others.items():
            assert await raw.closed(), user
        await nc.publish("secret.x", b"refused now")
        await nc.publish("open.x", b"still allowed")
        msg = await next_message(app)
        assert (msg.topic.value, msg.payload) == ("open/x", b"still allowed")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(aiter(app.messages)), 0.3)

    ws = await RawWS.open(ws_port(server))
    try:
        await ws.read_data(b"\r\n")  # INFO
        ws.send(b'CONNECT {"verbose":false,"user":"changed","pass":"new"}\r\nPING\r\n')
        assert b"PONG" in await ws.read_data(b"\r\n")
    finally:
        await ws.close()
