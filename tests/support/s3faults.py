"""Faults SeaweedFS cannot make: a proxy before it that answers 503 SlowDown, 500, or nothing.

The lake is pointed at the proxy's port instead of the S3 server's. While no
fault is set, each connection is piped to the server byte for byte (no HTTP
parsing, so signatures, chunked bodies and keep-alive pass untouched). Setting
a fault aborts every open connection, as a store's load balancer dropping
them would, so a client's next request opens a new one and meets the fault:
`SLOW_DOWN` and `INTERNAL` read the request and answer with the error body S3
sends, then close; `STALL` reads and never answers, so every call runs into
its client's timeout. Clearing the fault aborts the stalled connections too.

The proxy runs on a loop of its own in a thread: the lake's callers are other
processes and threads, and a test's own loop must stay free to publish.
"""

from __future__ import annotations

import asyncio
import enum
import threading
from collections import Counter
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

HEAD_END = b"\r\n\r\n"


class Fault(enum.Enum):
    NONE = "none"
    SLOW_DOWN = "503 SlowDown"
    INTERNAL = "500 InternalError"
    STALL = "no answer"


_ANSWERS = {
    Fault.SLOW_DOWN: (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
    Fault.INTERNAL: (
        500,
        "Internal Server Error",
        "InternalError",
        "We encountered an internal error. Please try again.",
    ),
}


def content_length(head: bytes) -> int:
    """The request body's length from its head (0 when it says none)."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip() or 0)
    return 0


def error_response(fault: Fault, head: bytes) -> bytes:
    """The answer S3 gives for `fault` to the request whose head is `head`: its status and
    XML error, the connection closed after it (a HEAD request gets no body)."""
    status, reason, code, message = _ANSWERS[fault]
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        "<RequestId>jetlake-fault</RequestId></Error>"
    ).encode()
    if head.startswith(b"HEAD "):
        body = b""
    lines = [
        f"HTTP/1.1 {status} {reason}",
        "Content-Type: application/xml",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class FaultProxy:
    """A proxy on a free loopback port before `upstream_port`; `set` a fault, `counts` says
    how many requests each fault answered."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.counts: Counter[Fault] = Counter()
        self._fault = Fault.NONE
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="s3-faults", daemon=True
        )

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def set(self, fault: Fault) -> None:
        """Answer every request from now on with `fault` (NONE: pass them to the server)."""

        async def switch() -> None:
            self._fault = fault
            for writer in list(self._open):
                writer.transport.abort()

        self._call(switch())

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for writer in list(self._open):  # each connection's task ends on its own
                writer.transport.abort()
            tasks = asyncio.all_tasks() - {asyncio.current_task()}
            if tasks:
                await asyncio.wait(tasks, timeout=5)

        self._call(close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            if self._fault is Fault.NONE:
                await self._pipe(reader, writer)
            else:
                await self._refuse(self._fault, reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client gave up, or we aborted the connection
        finally:
            self._open.discard(writer)
            writer.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._open.add(up_writer)
        try:
            await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
        finally:
            self._open.discard(up_writer)
            up_writer.transport.abort()

    async def _refuse(
        self, fault: Fault, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        head = await reader.readuntil(HEAD_END)
        self.counts[fault] += 1
        if fault is Fault.STALL:
            await reader.read()  # until the client times out and closes, or we abort
            return
        if b"100-continue" not in head.lower():  # else the body waits for a go-ahead never sent
            await reader.readexactly(content_length(head))
        writer.write(error_response(fault, head))
        await writer.drain()
        writer.close()  # gracefully: an abort could drop the answer before the client reads it
        await writer.wait_closed()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.transport.abort()
