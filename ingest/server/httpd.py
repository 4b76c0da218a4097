"""A deliberately tiny HTTP/1.1 server for jetlake's operator-facing endpoints.

GET/HEAD, one request per connection, `Connection: close`: it faces only
operators' tools, but a port scanner or a half-open socket must never hang or
crash the server, so the request head is bounded in size and in time, the
number of connections is capped, and every failure ends in a closed socket.
Query values are parsed the way Go's strconv does, and refused with its error
texts, because the clients were written against nats-server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger("jetlake")

MAX_LINE = 8 * 1024  # one request or header line
MAX_HEAD = 32 * 1024  # the whole request head
MAX_HEADERS = 100
READ_TIMEOUT = 5.0  # a client that does not finish its request head by then is dropped
WRITE_TIMEOUT = 10.0
MAX_CONNECTIONS = 256  # concurrent HTTP connections; more are dropped on accept

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


class HttpError(Exception):
    """A request the server refuses; `status` and a plain-text body go back as is."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]

    def arg(self, name: str) -> str:
        """The first value of a query parameter ("" when absent), as Go's FormValue reads it."""
        values = self.query.get(name)
        return values[0] if values else ""


@dataclass(slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Awaitable[Response]]


# ---- query parameters ------------------------------------------------------------------------


def bad_arg(kind: str, name: str, func: str, raw: str) -> HttpError:
    """The reference's text for a query value Go's strconv refused."""
    return HttpError(
        400,
        f"Error decoding {kind} for '{name}': strconv.{func}: parsing \"{raw}\": invalid syntax",
    )


def bool_arg(req: Request, name: str) -> bool:
    """strconv.ParseBool's spellings."""
    raw = req.arg(name)
    if raw in ("", "0", "f", "F", "false", "FALSE", "False"):
        return False
    if raw in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    raise bad_arg("boolean", name, "ParseBool", raw)


_INT = re.compile(r"[+-]?[0-9]{1,18}")


def int_arg(req: Request, name: str) -> int:
    """strconv.Atoi's syntax; absent is 0, as an unset Go int."""
    raw = req.arg(name)
    if raw and not _INT.fullmatch(raw):
        raise bad_arg("int", name, "Atoi", raw)
    return int(raw or 0)


# ---- the server ------------------------------------------------------------------------------


class HttpServer:
    """Accepts connections and hands each parsed request to `handler`.

    An HttpError raised by the handler becomes a plain-text response with its
    status; anything else is logged under `name` and the socket is closed.
    """

    def __init__(self, handler: Handler, host: str, port: int, *, name: str = "http") -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.name = name
        self.tasks: set[asyncio.Task[Any]] = set()  # connections being served
        self._listener: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self._listener = await asyncio.start_server(
            self._handle, self.host, self.port, limit=MAX_LINE, reuse_address=True
        )
        self.port = self._listener.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        if self._listener is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._listener.wait_closed(), 1.0)
            self._listener = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is None or len(self.tasks) >= MAX_CONNECTIONS:
            writer.transport.abort()
            return
        self.tasks.add(task)
        try:
            await self._serve_one(reader, writer)
        except (TimeoutError, ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("%s: request failed", self.name)
        finally:
            self.tasks.discard(task)
            writer.transport.abort()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = True
        try:
            req = await asyncio.wait_for(_read_request(reader), READ_TIMEOUT)
            head = req.method == "HEAD"
            response = await self.handler(req)
        except HttpError as exc:
            response = Response(exc.status, str(exc).encode(), TEXT)
            head = False
        writer.write(_encode(response, head=head))
        writer.close()  # flushes what is buffered, then FIN; the finally clause aborts a laggard
        await asyncio.wait_for(writer.wait_closed(), WRITE_TIMEOUT)


# ---- the wire --------------------------------------------------------------------------------


async def _read_request(reader: asyncio.StreamReader) -> Request:
    """Read and check the request head; the body (GET/HEAD have none) is never read."""
    try:
        line = await reader.readline()
        size = len(line)
        parts = line.rstrip(b"\r\n").split(b" ")
        headers = 0
        while True:
            header = await reader.readline()
            if not header.endswith(b"\n"):
                raise HttpError(400, "400 Bad Request: incomplete request head")
            size += len(header)
            header = header.rstrip(b"\r\n")
            if not header:
                break
            headers += 1
            if size > MAX_HEAD or headers > MAX_HEADERS:
                raise HttpError(431, "431 Request Header Fields Too Large")
            name, colon, _ = header.partition(b":")
            if not colon or not name or name != name.strip() or b" " in name:
                raise HttpError(400, "400 Bad Request: malformed header")
    except (ValueError, asyncio.LimitOverrunError):
        raise HttpError(431, "431 Request Header Fields Too Large") from None
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.0", b"HTTP/1.1"):
        raise HttpError(400, "400 Bad Request: malformed request line")
    method, target = parts[0], parts[1]
    if not method.isalpha() or not method.isupper():
        raise HttpError(400, "400 Bad Request: malformed method")
    try:
        url = urlsplit(target.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise HttpError(400, "400 Bad Request: malformed target") from None
    if not url.path.startswith("/"):
        raise HttpError(400, "400 Bad Request: malformed target")
    query = parse_qs(url.query, keep_blank_values=True)
    return Request(method.decode("ascii"), url.path, query)


def _encode(response: Response, *, head: bool) -> bytes:
    reason = HTTPStatus(response.status).phrase
    lines = [
        f"HTTP/1.1 {response.status} {reason}",
        f"Content-Type: {response.content_type}",
        *(f"{k}: {v}" for k, v in response.headers.items()),
        f"Date: {formatdate(usegmt=True)}",
        f"Content-Length: {len(response.body)}",
        "Connection: close",
        "",
        "",
    ]
    data = "\r\n".join(lines).encode("latin-1")
    return data if head else data + response.body
