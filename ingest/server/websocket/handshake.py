"""The HTTP/1.1 upgrade, sans-IO: parse the request, decide, write the answer.

The checks, their order, the status codes and the reasons logged are the
reference's, so a browser or a proxy sees the same refusals from either
server. `/mqtt` is the path MQTT clients use (it answers with the `mqtt`
subprotocol); every other path carries NATS.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlsplit

MAX_REQUEST = 16 * 1024  # an upgrade request's head; more is refused, not buffered
MQTT_PATH = "/mqtt"
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_PMC = "permessage-deflate"


class HandshakeError(Exception):
    """Refused: answer `status`; the log line says `reason`."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, list[str]]  # lower-cased names

    def get(self, name: str) -> str:
        values = self.headers.get(name, [])
        return values[0] if values else ""

    def has_token(self, name: str, token: str) -> bool:
        """A comma-separated header holds `token` (case-insensitive), as the reference asks."""
        return any(
            part.strip(" \t").lower() == token.lower()
            for value in self.headers.get(name, [])
            for part in value.split(",")
        )


@dataclass(frozen=True, slots=True)
class Upgrade:
    accept: str
    compress: bool
    mqtt: bool
    cookies: dict[str, str] = field(default_factory=dict)
    forwarded_for: str | None = None


def parse_request(buf: bytes) -> tuple[Request, bytes] | None:
    """The request and the bytes after its head; None while the head is incomplete."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > MAX_REQUEST:
            raise HandshakeError(431, "request header too large")
        return None
    lines = buf[:end].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HandshakeError(400, "malformed HTTP request")
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HandshakeError(400, "malformed HTTP header")
        headers.setdefault(name.lower(), []).append(value.strip())
    return Request(parts[0], parts[1], headers), buf[end + 4 :]


def upgrade(
    request: Request,
    *,
    compression: bool,
    same_origin: bool,
    allowed_origins: tuple[str, ...],
    tls: bool,
) -> Upgrade:
    """Check the request as RFC 6455 §4.2.1 and the origin rules ask; raise to refuse."""
    if request.method != "GET":
        raise HandshakeError(405, "request method must be GET")
    if not request.get("host"):
        raise HandshakeError(400, "'Host' missing in request")
    if not request.has_token("upgrade", "websocket"):
        raise HandshakeError(400, "invalid value for header 'Upgrade'")
    if not request.has_token("connection", "Upgrade"):
        raise HandshakeError(400, "invalid value for header 'Connection'")
    key = request.get("sec-websocket-key")
    if not key:
        raise HandshakeError(400, "key missing")
    try:
        if len(base64.b64decode(key, validate=True)) != 16:
            raise ValueError
    except (binascii.Error, ValueError):
        raise HandshakeError(400, "invalid websocket key") from None
    if not request.has_token("sec-websocket-version", "13"):
        raise HandshakeError(400, "invalid version")
    problem = origin_problem(request, same_origin, allowed_origins, tls)
    if problem:
        raise HandshakeError(403, f"origin not allowed: {problem}")
    compress = compression and any(
        param.strip(" \t").lower() == _PMC
        for value in request.headers.get("sec-websocket-extensions", [])
        for ext in value.split(",")
        for param in ext.split(";")[:1]
    )
    accept = base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()
    forwarded = request.get("x-forwarded-for").split(",")[0].strip() or None
    return Upgrade(
        accept,
        compress,
        urlsplit(request.path).path == MQTT_PATH,
        _cookies(request),
        forwarded,
    )


def _cookies(request: Request) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    for value in request.headers.get("cookie", []):
        try:
            jar.load(value)
        except CookieError:
            continue
    return {name: morsel.value for name, morsel in jar.items()}


def _host_port(netloc: str, secure: bool) -> tuple[str, str]:
    host, sep, port = netloc.rpartition(":")
    if not sep or "]" in port:
        host, port = netloc, ""
    return host.strip("[]").lower(), port or ("443" if secure else "80")


def origin_problem(
    request: Request, same_origin: bool, allowed: tuple[str, ...], tls: bool
) -> str | None:
    """Why an Origin is refused, or None. No Origin header passes (a non-browser client)."""
    if not same_origin and not allowed:
        return None
    origin = request.get("origin") or request.get("sec-websocket-origin")
    if not origin:
        return None
    parts = urlsplit(origin)
    host, port = _host_port(parts.netloc, parts.scheme == "https")
    if same_origin:
        own_host, own_port = _host_port(request.get("host"), tls)
        scheme = "https" if tls else "http"
        if (host, port) != (own_host, own_port) or parts.scheme.lower() != scheme:
            return "not same origin"
    if allowed:
        for entry in allowed:
            listed = urlsplit(entry)
            if (listed.scheme, *_host_port(listed.netloc, listed.scheme == "https")) == (
                parts.scheme,
                host,
                port,
            ):
                return None
        return "not in the allowed list"
    return None


def accepted(result: Upgrade) -> bytes:
    lines = [
        "HTTP/1.1 101 Switching Protocols",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Accept: {result.accept}",
    ]
    if result.compress:
        lines.append(
            f"Sec-WebSocket-Extensions: {_PMC}; server_no_context_takeover; "
            "client_no_context_takeover"
        )
    if result.mqtt:
        lines.append("Sec-Websocket-Protocol: mqtt")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def refused(status: int) -> bytes:
    """The plain-text error page Go's http.Error writes, which the reference sends."""
    text = HTTPStatus(status).phrase
    body = f"{text}\n".encode()
    head = (
        f"HTTP/1.1 {status} {text}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        "Sec-Websocket-Version: 13\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        f"Date: {formatdate(usegmt=True)}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body
