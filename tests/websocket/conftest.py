"""WebSocket servers (reference and jetlake, same `websocket {}`) and a raw frame client.

The raw client writes frames byte by byte, so the tests can send what no
real client would (unmasked, oversized, torn) and read exactly what comes back.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import ssl
import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.conftest import ServerPool
from tests.support.servers import ServerProcess

_WS_LISTEN = re.compile(r"Listening for websocket clients on wss?://(\S+):(\d+)")
TIMEOUT = 5.0
SHARED_CONFIG = """
websocket { port: -1, no_tls: true, compression: true }
mqtt { port: -1 }
"""


def ws_port(server: ServerProcess) -> int:
    found = server.find_log(_WS_LISTEN)
    assert found is not None, f"{server.kind} did not log its WebSocket port\n{server.log()}"
    return int(found.group(2))


@dataclass
class WSServer:
    process: ServerProcess
    port: int

    @property
    def kind(self) -> str:
        return self.process.kind


@pytest.fixture(scope="session")
def ws_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ws-shared")


@pytest.fixture
def ws_server(server_kind: str, server_pool: ServerPool, ws_store: Path) -> WSServer:
    """A server shared by the tests of its kind (NATS and MQTT over WebSocket, compression)."""
    store = ws_store / server_kind
    server = server_pool.get(
        server_kind, "-js", "-sd", str(store), "-m", "-1", config=SHARED_CONFIG
    )
    return WSServer(server, ws_port(server))


class RawWS:
    """One WebSocket connection driven frame by frame."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.response = b""

    @classmethod
    async def open(
        cls,
        port: int,
        *,
        path: str = "/",
        headers: str = "",
        upgrade: bool = True,
        tls: ssl.SSLContext | None = None,
    ) -> RawWS:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
        ws = cls(reader, writer)
        if upgrade:
            key = base64.b64encode(os.urandom(16)).decode()
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                f"Sec-WebSocket-Version: 13\r\n{headers}\r\n".encode()
            )
            ws.response = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
        return ws

    @property
    def status(self) -> int:
        return int(self.response.split(b" ", 2)[1])

    def header(self, name: str) -> str | None:
        for line in self.response.decode("latin-1").split("\r\n")[1:]:
            key, _, value = line.partition(":")
            if key.lower() == name.lower():
                return value.strip()
        return None

    def send_frame(
        self,
        opcode: int,
        payload: bytes,
        *,
        fin: bool = True,
        rsv1: bool = False,
        mask: bool = True,
    ) -> None:
        b0 = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
        n = len(payload)
        mbit = 0x80 if mask else 0
        if n < 126:
            head = struct.pack(">BB", b0, mbit | n)
        elif n < 1 << 16:
            head = struct.pack(">BBH", b0, mbit | 126, n)
        else:
            head = struct.pack(">BBQ", b0, mbit | 127, n)
        if mask:
            key = os.urandom(4)
            payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
            head += key
        self.writer.write(head + payload)

    def send_together(self, *datas: bytes) -> None:
        """One data frame for each of `datas`, in a single write (so the server reads
        them at once)."""
        writer, gathered = self.writer, bytearray()
        self.writer = cast(asyncio.StreamWriter, SimpleNamespace(write=gathered.extend))
        try:
            for data in datas:
                self.send_frame(2, data)
        finally:
            self.writer = writer
        writer.write(bytes(gathered))

    def send(self, data: bytes, *, compress: bool = False) -> None:
        if compress:
            deflater = zlib.compressobj(6, zlib.DEFLATED, -15)
            body = deflater.compress(data) + deflater.flush(zlib.Z_SYNC_FLUSH)
            self.send_frame(2, body[:-4], rsv1=True)
        else:
            self.send_frame(2, data)

    async def read_frame(self, timeout: float = TIMEOUT) -> tuple[int, bytes]:
        """(opcode, payload), inflated when the frame was compressed."""
        head = await asyncio.wait_for(self.reader.readexactly(2), timeout)
        n = head[1] & 0x7F
        if n == 126:
            (n,) = struct.unpack(">H", await self.reader.readexactly(2))
        elif n == 127:
            (n,) = struct.unpack(">Q", await self.reader.readexactly(8))
        payload = await asyncio.wait_for(self.reader.readexactly(n), timeout)
        if head[0] & 0x40:
            payload = zlib.decompressobj(-15).decompress(payload + b"\x00\x00\xff\xff")
        return head[0] & 0x0F, payload

    async def read_data(self, until: bytes, timeout: float = TIMEOUT) -> bytes:
        """Data frames' bytes until `until` has arrived (frames may split or batch lines)."""
        data = b""
        while until not in data:
            opcode, payload = await self.read_frame(timeout)
            assert opcode in (1, 2), (opcode, payload)
            data += payload
        return data

    async def closed(self, timeout: float = TIMEOUT) -> tuple[int | None, bytes]:
        """Read to the end: the close code sent (None if the socket just closed, or was
        reset with our bytes unread) and reason."""
        while True:
            try:
                opcode, payload = await self.read_frame(timeout)
            except (asyncio.IncompleteReadError, ConnectionResetError):
                return None, b""
            if opcode == 8:
                code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
                return code, payload[2:]

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


OpenWS = Callable[..., Awaitable[RawWS]]


@pytest.fixture
async def open_ws() -> AsyncIterator[OpenWS]:
    """`await open_ws(port, path=…, headers=…)`: raw connections, closed after the test."""
    opened: list[RawWS] = []

    async def open_(port: int, **options: Any) -> RawWS:
        ws = await RawWS.open(port, **options)
        opened.append(ws)
        return ws

    yield open_
    for ws in opened:
        await ws.close()
