"""The WebSocket port: accepts upgrades, hands each to a NATS or an MQTT connection.

NATS clients over WebSocket are ordinary `Client`s with three differences
the reference makes too: TLS is the listener's (never the client port's, in
the stream), the INFO names the WebSocket port, and the block's
`authorization` (or its JWT cookie) may replace the server's credentials.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ingest.server.auth.authenticator import Authenticator, Grant
from ingest.server.auth.listener import listener_authenticator
from ingest.server.client import Client
from ingest.server.mqtt.connection import MQTTConnection
from ingest.server.tls_settings import DEFAULT_TLS_TIMEOUT
from ingest.server.websocket import handshake
from ingest.server.websocket.connection import WebSocketConnection
from ingest.server.websocket.settings import WebSocketConfig

if TYPE_CHECKING:
    import ssl

    from ingest.server.server import Server

log = logging.getLogger("jetlake")

WEBSOCKET = "WEBSOCKET"  # the connection type a user's `allowed_connection_types` names
_MAX_MESSAGE_MULTIPLE = 8  # a compressed message may batch this many max_payloads…
_MAX_MESSAGE_LIMIT = 64 * 1024 * 1024  # …up to this, as on the reference


class WebSocketClient(Client):
    """A NATS client whose bytes come and go in WebSocket frames."""

    def __init__(self, server: Server, cid: int, listener: WebSocketListener, cookie_jwt: str):
        super().__init__(server, cid)
        self.listener = listener
        self.cookie_jwt = cookie_jwt
        self.authenticated = not listener.auth.required

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        timeout = self.listener.config.auth_timeout
        timer = self._timers.get("auth")
        if timeout and timer is not None:  # `websocket { authorization { timeout } }`
            timer.cancel()
            loop = asyncio.get_running_loop()
            self._timers["auth"] = loop.call_later(timeout, self._auth_timeout)

    def own_tls(self) -> ssl.SSLContext | None:
        return None  # the listener's TLS wraps the WebSocket, not the NATS stream inside

    def credentials(self, options: dict[str, object]) -> dict[str, object]:
        if self.cookie_jwt and not options.get("jwt"):
            return {**options, "jwt": self.cookie_jwt}
        return options

    def authenticate(self, options: dict[str, object]) -> Grant:
        options = self.credentials(options)
        return self.listener.auth.authenticate(options, WEBSOCKET, nonce=self.nonce, host=self.host)

    def adjust_info(self, info: dict[str, Any]) -> None:
        listener = self.listener
        info["host"], info["port"] = listener.host, listener.port
        info.pop("tls_verify", None)
        if listener.tls:
            info["tls_required"] = info["tls_available"] = True
        else:
            info.pop("tls_required", None)
        if listener.auth.required:
            info["auth_required"] = True


class WebSocketListener:
    def __init__(self, server: Server, config: WebSocketConfig) -> None:
        self.server = server
        self.config = config
        self.host = config.host
        self.port = config.port
        self.tls = config.tls is not None
        tls_timeout = config.tls.timeout if config.tls is not None else DEFAULT_TLS_TIMEOUT
        self.handshake_timeout = config.handshake_timeout or tls_timeout
        max_payload = server.opts.max_payload
        self.max_message = min(max_payload * _MAX_MESSAGE_MULTIPLE, _MAX_MESSAGE_LIMIT)
        self._listener: asyncio.base_events.Server | None = None

    @property
    def auth(self) -> Authenticator:
        """Read at each login: a config reload replaces the server's users."""
        return listener_authenticator(self.server, self.config)

    async def start(self) -> None:
        ssl_ctx = None
        if self.config.tls is not None:
            from ingest.server.tls import make_server_context

            ssl_ctx = make_server_context(self.config.tls)
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            lambda: WebSocketConnection(self),
            host=self.host,
            port=self.port,
            reuse_address=True,
            ssl=ssl_ctx,
            ssl_handshake_timeout=self.handshake_timeout if ssl_ctx is not None else None,
        )
        self.port = self._listener.sockets[0].getsockname()[1]
        scheme = "wss" if self.tls else "ws"
        log.info("Listening for websocket clients on %s://%s:%d", scheme, self.host, self.port)
        if not self.tls:
            log.warning("Websocket not configured with TLS. DO NOT USE IN PRODUCTION!")

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def check(self, request: handshake.Request) -> handshake.Upgrade:
        config = self.config
        result = handshake.upgrade(
            request,
            compression=config.compression,
            same_origin=config.same_origin,
            allowed_origins=config.allowed_origins,
            tls=self.tls,
        )
        if result.mqtt and self.server.mqtt is None:
            raise handshake.HandshakeError(400, "MQTT over websocket needs an mqtt {} block")
        return result

    def inner_for(self, result: handshake.Upgrade) -> Client | MQTTConnection:
        """The connection the frames carry: MQTT on `/mqtt`, NATS elsewhere."""
        server = self.server
        if result.mqtt:
            return MQTTConnection(server.mqtt, server.next_id())
        cookie = result.cookies.get(self.config.jwt_cookie or "", "")
        return WebSocketClient(server, server.next_id(), self, cookie)

    def varz(self) -> dict[str, Any]:
        """The /varz `websocket` block: what was set, as the reference fills it."""
        config = self.config
        info: dict[str, Any] = {"host": self.host, "port": self.port}
        if config.advertise:
            info["advertise"] = config.advertise
        if config.no_auth_user:
            info["no_auth_user"] = config.no_auth_user
        if config.jwt_cookie:
            info["jwt_cookie"] = config.jwt_cookie
        if config.handshake_timeout:
            info["handshake_timeout"] = round(config.handshake_timeout * 1e9)
        if config.auth_timeout:  # seconds, a whole number printed as one (Go's float64)
            timeout = config.auth_timeout
            info["auth_timeout"] = int(timeout) if timeout == int(timeout) else timeout
        if config.no_tls:
            info["no_tls"] = True
        if config.same_origin:
            info["same_origin"] = True
        if config.allowed_origins:
            info["allowed_origins"] = list(config.allowed_origins)
        if config.compression:
            info["compression"] = True
        return info
