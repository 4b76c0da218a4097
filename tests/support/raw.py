"""A raw-socket NATS client for protocol-level (differential) checks.

nats-py hides exactly what these tests look at -- the server's ``-ERR`` text,
``+OK`` acknowledgements, whether the connection is closed or kept -- and it
refuses to send malformed input. This client sends bytes verbatim and reports
lines and closes as they arrive, each read bounded by a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

DEFAULT_TIMEOUT = 5.0

# INFO fields whose values differ between servers or runs by nature.
VOLATILE_INFO_FIELDS = frozenset(
    {
        "server_id",
        "server_name",
        "version",
        "go",
        "git_commit",
        "host",
        "port",
        "client_id",
        "client_ip",
        "nonce",
        "xkey",
        "connect_urls",
        "ws_connect_urls",
        "ip",
    }
)


class Closed(Exception):
    """The server closed the connection; ``lines`` is what came before."""

    def __init__(self, lines: list[bytes]) -> None:
        super().__init__(f"connection closed after {lines!r}")
        self.lines = lines


@dataclass(frozen=True)
class Outcome:
    """What a client can observe from a script: lines received, closed or kept."""

    lines: tuple[bytes, ...]
    closed: bool


@dataclass
class RawClient:
    """One TCP connection speaking the NATS text protocol by hand."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    info: dict[str, Any] = field(default_factory=dict)
    infos: list[dict[str, Any]] = field(default_factory=list)
    keepalives: bool = False
    """Whether the server's PINGs are lines to read (tests of keepalive itself)."""

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        read_info: bool = True,
        ssl_context: ssl.SSLContext | None = None,
        limit: int = 2**20,
        rcvbuf: int | None = None,
    ) -> RawClient:
        """Open the socket and (by default) read the server's INFO.

        ``rcvbuf`` shrinks the kernel receive buffer so a subscriber that stops
        reading backs up onto the server quickly (slow-consumer tests).
        """
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(
                asyncio.get_running_loop().sock_connect(sock, (host, port)), timeout
            )
        except BaseException:
            sock.close()
            raise
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                sock=sock,
                ssl=ssl_context,
                limit=limit,
                server_hostname=host if ssl_context else None,
            ),
            timeout,
        )
        client = cls(reader, writer)
        if read_info:
            line = await client.read_line(timeout)
            client.info = parse_info(line)
        return client

    async def send(self, data: bytes | str) -> None:
        """Write bytes verbatim (no CRLF added)."""
        self.writer.write(data.encode() if isinstance(data, str) else data)
        await self.writer.drain()

    async def handshake(self, **options: Any) -> None:
        """CONNECT with ``options`` then PING, and wait for the PONG."""
        opts = {
            "verbose": False,
            "pedantic": False,
            "protocol": 1,
            "headers": True,
            "lang": "raw",
            "version": "0",
            **options,
        }
        await self.send(f"CONNECT {json.dumps(opts)}\r\nPING\r\n")
        lines = await self.read_until(rb"^PONG$")
        unexpected = [ln for ln in lines[:-1] if ln != b"+OK"]
        assert not unexpected, f"unexpected reply to CONNECT: {unexpected!r}"

    async def read_line(self, timeout: float = DEFAULT_TIMEOUT) -> bytes:
        """One CRLF-terminated line without its terminator; Closed at EOF."""
        try:
            line = await asyncio.wait_for(self.reader.readuntil(b"\r\n"), timeout)
        except asyncio.IncompleteReadError as exc:
            raise Closed([exc.partial] if exc.partial else []) from None
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            raise Closed([]) from None
        return line[:-2]

    async def read_payload(self, size: int, timeout: float = DEFAULT_TIMEOUT) -> bytes:
        """A MSG/HMSG payload of the declared size plus its CRLF."""
        try:
            data = await asyncio.wait_for(self.reader.readexactly(size + 2), timeout)
        except asyncio.IncompleteReadError:
            raise Closed([]) from None
        assert data.endswith(b"\r\n"), f"payload not followed by CRLF: {data!r}"
        return data[:-2]

    async def read_op(self, timeout: float = DEFAULT_TIMEOUT) -> tuple[bytes, bytes | None]:
        """One server op: its control line and, for MSG/HMSG, the payload.

        INFO lines are set aside in ``infos``: the server may send them at any
        time to protocol-1 clients (the reference sends one right after the
        first PONG, and another with ``ldm`` on lame duck), so they would
        otherwise make every expected transcript racy. So are the server's PINGs
        unless ``keepalives``: the reference pings a client whose round trip it has
        not measured 2-2.4 s after it connects (and when /connz asks for it), which
        a slow test's transcript would otherwise catch. Unanswered, they matter
        only after ping_max intervals (minutes by default).
        """
        line = await self.read_line(timeout)
        while line.startswith(b"INFO ") or (line == b"PING" and not self.keepalives):
            if line != b"PING":
                self.infos.append(parse_info(line))
            line = await self.read_line(timeout)
        if line.startswith((b"MSG ", b"HMSG ")):
            size = int(line.split()[-1])
            return line, await self.read_payload(size, timeout)
        return line, None

    async def read_until(
        self, pattern: bytes | re.Pattern[bytes], timeout: float = DEFAULT_TIMEOUT
    ) -> list[bytes]:
        """Lines up to and including the first matching one (payloads skipped)."""
        rx = re.compile(pattern) if isinstance(pattern, bytes) else pattern
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        lines: list[bytes] = []
        while True:
            left = deadline - loop.time()
            try:
                if left <= 0:
                    raise TimeoutError
                line, _ = await self.read_op(left)
            except Closed as exc:
                raise Closed(lines + exc.lines) from None
            except TimeoutError:
                raise TimeoutError(
                    f"no line matching {rx.pattern!r} within {timeout}s; got {lines!r}"
                ) from None
            lines.append(line)
            if rx.search(line):
                return lines

    async def expect_closed(self, timeout: float = DEFAULT_TIMEOUT) -> list[bytes]:
        """Read until the server closes; return the lines seen before it did."""
        try:
            lines = await self.read_until(rb"(?!)", timeout)
        except Closed as exc:
            return exc.lines
        raise AssertionError(f"connection still open, got {lines!r}")  # pragma: no cover

    async def read_to_eof(self, timeout: float = DEFAULT_TIMEOUT) -> bytes:
        """Every remaining byte up to the server's close (for "closed silently")."""
        try:
            return await asyncio.wait_for(self.reader.read(), timeout)
        except (ConnectionResetError, ssl.SSLError):
            return b""

    async def outcome(self, script: bytes = b"", timeout: float = DEFAULT_TIMEOUT) -> Outcome:
        """Send ``script`` then PING: PONG proves the connection was kept, EOF a close.

        Ordering makes this exact without sleeping: anything the server says in
        reply to the script arrives before the PONG. Script and PING go in one
        write so a server that closes has already read everything we sent (an
        unread PING would turn its FIN into an RST that can drop the -ERR).
        """
        try:
            await self.send(script + b"PING\r\n")
            lines = await self.read_until(rb"^PONG$", timeout)
        except (ConnectionResetError, BrokenPipeError):
            return Outcome((), closed=True)
        except Closed as exc:
            return Outcome(tuple(exc.lines), closed=True)
        return Outcome(tuple(lines[:-1]), closed=False)

    async def close(self) -> None:
        """Close our end; errors from an already-closed socket do not matter."""
        self.writer.close()
        with contextlib.suppress(OSError, TimeoutError, ssl.SSLError):
            await asyncio.wait_for(self.writer.wait_closed(), DEFAULT_TIMEOUT)

    async def __aenter__(self) -> RawClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def parse_info(line: bytes) -> dict[str, Any]:
    """The JSON object of an ``INFO {...}`` line."""
    assert line.startswith(b"INFO "), f"expected INFO, got {line!r}"
    return json.loads(line[5:])


def info_shape(info: dict[str, Any]) -> dict[str, str]:
    """Field name -> JSON type name, volatile fields dropped: what must match."""
    return {k: type(v).__name__ for k, v in info.items() if k not in VOLATILE_INFO_FIELDS}
