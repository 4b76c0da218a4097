"""The MQTT port: accepts connections, authenticates them, reports them to monitoring.

MQTT clients are checked against the same users and permissions as NATS
clients, unless `mqtt { authorization {…} }` or its `no_auth_user` override
them (the reference's rule); the password doubles as a token.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING, Any

from ingest.parser import mqtt
from ingest.parser.mqtt_topics import to_subject
from ingest.server.auth import MQTT, Grant
from ingest.server.listener_auth import listener_authenticator
from ingest.server.mqtt.connection import MQTTConnection
from ingest.server.mqtt.sessions import SessionManager
from ingest.server.settings import DEFAULT_TLS_TIMEOUT, MQTTConfig

if TYPE_CHECKING:
    from ingest.server.server import Server

log = logging.getLogger("jetlake")


class MQTTListener:
    def __init__(self, server: Server, config: MQTTConfig) -> None:
        self.server = server
        self.config = config
        opts = server.opts
        self.auth = listener_authenticator(server, config)
        self.auth_timeout = config.auth_timeout or opts.auth_timeout
        self.sessions = SessionManager(server, config)
        self.connections: dict[int, MQTTConnection] = {}
        self.host = config.host or "0.0.0.0"  # not the client port's host, as the reference
        self.port = config.port
        self._listener: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        await self.sessions.start()
        ssl_ctx = None
        if self.config.tls is not None:
            from ingest.server.tls import make_server_context

            ssl_ctx = make_server_context(self.config.tls)
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            lambda: MQTTConnection(self, self.server.next_id()),
            host=self.host,
            port=self.port,
            reuse_address=True,
            ssl=ssl_ctx,
        )
        sock = self._listener.sockets[0]
        self.port = sock.getsockname()[1]
        scheme = "tls" if ssl_ctx is not None else "mqtt"
        log.info("Listening for MQTT clients on %s://%s:%d", scheme, self.host, self.port)

    def stop(self) -> None:
        """Close the port and every connection; a second call finds nothing left to do."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for conn in list(self.connections.values()):
            conn.close("Server Shutdown")
        self.sessions.stop()

    def register(self, conn: MQTTConnection) -> None:
        self.connections[conn.cid] = conn
        sock = conn.transport.get_extra_info("socket") if conn.transport else None
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def unregister(self, conn: MQTTConnection) -> None:
        self.connections.pop(conn.cid, None)

    def authenticate(self, packet: mqtt.Connect) -> Grant:
        password = packet.password.decode("utf-8", "replace") if packet.password else None
        return self.auth.authenticate(
            {"user": packet.username, "pass": password, "auth_token": password}, MQTT
        )

    def publish_will(self, will: mqtt.Will, grant: Grant) -> None:
        subject = to_subject(will.topic).decode()
        allowed = not grant.restricted or grant.can_publish(subject.encode())
        self.sessions.publish_will(will, subject, allowed=allowed)

    def varz(self) -> dict[str, Any]:
        """The /varz `mqtt` block, as the reference fills it."""
        config = self.config
        info: dict[str, Any] = {"host": self.host, "port": self.port}
        if config.no_auth_user:
            info["no_auth_user"] = config.no_auth_user
        if config.auth_timeout:
            info["auth_timeout"] = config.auth_timeout
        info["tls_timeout"] = config.tls.timeout if config.tls else DEFAULT_TLS_TIMEOUT
        if config.ack_wait:
            info["ack_wait"] = round(config.ack_wait * 1e9)
        if config.max_ack_pending:
            info["max_ack_pending"] = config.max_ack_pending
        return info
