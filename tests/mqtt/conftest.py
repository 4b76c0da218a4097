"""MQTT servers and clients for the differential tests: reference and jetlake, same `mqtt {}`."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from ingest.parser import mqtt
from tests.conftest import MakeServer, ServerPool
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess

_MQTT_LISTEN = re.compile(r"Listening for MQTT clients on (?:mqtt|tls)://(\S+):(\d+)")
TIMEOUT = 5.0


@dataclass
class MQTTServer:
    process: ServerProcess
    mqtt_port: int

    @property
    def kind(self) -> str:
        return self.process.kind


def mqtt_port(server: ServerProcess) -> int:
    found = server.find_log(_MQTT_LISTEN)
    assert found is not None, f"{server.kind} did not log its MQTT port\n{server.log()}"
    return int(found.group(2))


def on(server: ServerProcess) -> MQTTServer:
    return MQTTServer(server, mqtt_port(server))


CLUSTER_DEADLINE = 20.0  # a kill -9 may take the leader of MQTT's streams: an election


async def connected(server: MQTTServer, client_id: str, **options: Any) -> aiomqtt.Client:
    """A connected client on a cluster's server, retried until the deadline: the first
    CONNECT to a new cluster waits for MQTT's streams, and after a kill -9 for their new
    leaders (and may time out meanwhile)."""

    async def entered() -> aiomqtt.Client:
        client = aiomqtt.Client(
            "127.0.0.1", server.mqtt_port, identifier=client_id, timeout=TIMEOUT, **options
        )
        await client.__aenter__()
        return client

    return await poll_async(
        entered,
        f"{client_id} connected on {server.kind}",
        CLUSTER_DEADLINE,
        interval=0.2,
        retry=aiomqtt.MqttError,
    )


StartMQTT = Callable[..., MQTTServer]


@pytest.fixture
def start_mqtt(make_server: MakeServer, tmp_path: Path) -> StartMQTT:
    """`start_mqtt(extra_conf="", *flags)`: a JetStream server with `mqtt { port: -1 … }`."""
    count = 0

    def start(mqtt_block: str = "", top: str = "", *flags: str) -> MQTTServer:
        nonlocal count
        count += 1
        store = tmp_path / f"store{count}"
        config = f"{top}\nmqtt {{\n  port: -1\n  {mqtt_block}\n}}\n"
        server = make_server("-js", "-sd", str(store), *flags, config=config)
        return MQTTServer(server, mqtt_port(server))

    return start


@pytest.fixture(scope="session")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mqtt-shared")


@pytest.fixture
def mqtt_server(server_kind: str, server_pool: ServerPool, shared_store: Path) -> MQTTServer:
    """A server shared by the tests of its kind: each uses its own client ids and topics."""
    store = shared_store / server_kind
    server = server_pool.get(server_kind, "-js", "-sd", str(store), config=SHARED_CONFIG)
    return MQTTServer(server, mqtt_port(server))


SHARED_CONFIG = "max_payload: 1000\nmqtt { port: -1 }\n"


Connect = Callable[..., Awaitable[aiomqtt.Client]]


@pytest.fixture
async def mqtt_client(mqtt_server: MQTTServer) -> AsyncIterator[Connect]:
    """aiomqtt clients on `mqtt_server` (or `server=`), closed after the test."""
    stack = contextlib.AsyncExitStack()

    async def connect(server: MQTTServer | None = None, **options: Any) -> aiomqtt.Client:
        target = server or mqtt_server
        options.setdefault("timeout", TIMEOUT)
        client = aiomqtt.Client("127.0.0.1", target.mqtt_port, **options)
        await stack.enter_async_context(client)
        return client

    async with stack:
        yield connect


async def next_message(client: aiomqtt.Client) -> aiomqtt.Message:
    return await asyncio.wait_for(anext(aiter(client.messages)), TIMEOUT)


async def messages_until(client: aiomqtt.Client, marker: str) -> list[aiomqtt.Message]:
    """Everything received before the message on topic `marker` (the ordering barrier)."""
    got = []
    while True:
        msg = await next_message(client)
        if msg.topic.value == marker:
            return got
        if not msg.retain:  # what other tests retained on a shared server
            got.append(msg)


class RawMQTT:
    """A socket speaking bytes, for the protocol cases a client library will not produce."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = mqtt.Decoder(server=False)
        self.packets: list[mqtt.Packet] = []

    @classmethod
    async def open(cls, server: MQTTServer) -> RawMQTT:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.mqtt_port)
        return cls(reader, writer)

    def send(self, data: bytes | mqtt.Packet) -> None:
        self.writer.write(data if isinstance(data, bytes) else mqtt.encode(data))

    async def packet(self) -> mqtt.Packet | None:
        """The next packet, or None once the server closed the connection."""
        while not self.packets:
            data = await asyncio.wait_for(self.reader.read(65536), TIMEOUT)
            if not data:
                return None
            self.packets += self.decoder.receive(data)
        return self.packets.pop(0)

    async def closed(self) -> bool:
        """True when the server closes (after any packets it still sends)."""
        while True:
            try:
                if await self.packet() is None:
                    return True
            except ConnectionResetError:
                return True

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
async def raw_clients() -> AsyncIterator[list[RawMQTT]]:
    opened: list[RawMQTT] = []
    yield opened
    for raw in opened:
        raw.close()


@pytest.fixture
def open_raw(raw_clients: list[RawMQTT]) -> Callable[[MQTTServer], Awaitable[RawMQTT]]:
    async def open_(server: MQTTServer) -> RawMQTT:
        raw = await RawMQTT.open(server)
        raw_clients.append(raw)
        return raw

    return open_
