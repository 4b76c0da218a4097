"""The MQTT port: accepts connections, authenticates them, reports them to monitoring.

MQTT clients are checked against the same users and permissions as NATS
clients, unless `mqtt { authorization {…} }` or its `no_auth_user` override
them (the reference's rule); the password doubles as a token, and in operator
mode carries the user JWT (a bearer one: MQTT has no nonce to sign). A client
works in its user's account, whose MQTT state its `SessionManager` keeps.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import TYPE_CHECKING, Any

from ingest.parser import mqtt
from ingest.server.auth.authenticator import MQTT, Authenticator, AuthError, Grant
from ingest.server.auth.listener import listener_authenticator
from ingest.server.jwt import claims as jwt
from ingest.server.jwt.claims import JWTError
from ingest.server.mqtt.connection import MQTTConnection
from ingest.server.mqtt.sessions import SessionManager
from ingest.server.settings import MQTTConfig
from ingest.server.tls_settings import DEFAULT_TLS_TIMEOUT

if TYPE_CHECKING:
    from ingest.server.accounts.registry import Account
    from ingest.server.server import Server

log = logging.getLogger("jetlake")


class MQTTListener:
    def __init__(self, server: Server, config: MQTTConfig) -> None:
        self.server = server
        self.config = config
        self.auth_timeout = config.auth_timeout or server.opts.auth_timeout
        self.managers: dict[str, SessionManager] = {}  # by account name
        self._tasks: set[asyncio.Task[Any]] = set()
        self.connections: dict[int, MQTTConnection] = {}
        self.host = config.host or "0.0.0.0"  # not the client port's host, as the reference
        self.port = config.port
        self._listener: asyncio.base_events.Server | None = None
        self._tls: ssl.SSLContext | None = None  # what new handshakes use (a reload swaps it)
        self._stopped = False

    def _current_tls(self, conn: ssl.SSLObject, name: str | None, ctx: ssl.SSLContext) -> None:
        """Each handshake is switched to the context of the last reload (asyncio keeps
        the one the port was opened with; the hello, SNI or not, comes here first)."""
        if self._tls is not None and self._tls is not ctx:
            conn.context = self._tls

    def reload(self, config: MQTTConfig, tls: ssl.SSLContext | None) -> None:
        """A reload's settings: the consumers' for those made from now on, the TLS
        context (built, so checked, before the reload was applied) for new handshakes.
        TLS switched on or off reopens the port (asyncio fixes it per listening socket);
        open connections stay as they are."""
        self.config = config
        switched = (tls is None) != (self._tls is None)
        self._tls = tls
        if switched and self._listener is not None:
            self._listener.close()
            self._listener = None
            self.spawn(self._open())

    @property
    def auth(self) -> Authenticator:
        """Read at each login: a config reload replaces the server's users."""
        return listener_authenticator(self.server, self.config)

    async def start(self) -> None:
        """The global account's MQTT streams are made now when it has JetStream; another
        account's when its first MQTT client logs in, as on the reference."""
        account = self.server.accounts.global_account
        if account.jetstream_enabled:
            self.managers[account.name] = manager = SessionManager(self, account)
            await manager.start()
        if self.config.tls is not None:
            from ingest.server.tls import make_server_context

            self._tls = make_server_context(self.config.tls)
        await self._open()

    async def _open(self) -> None:
        """Listen, with TLS when there is a context: the first one's hello callback hands
        each handshake the context of the last reload."""
        ssl_ctx = self._tls
        if ssl_ctx is not None:
            ssl_ctx.sni_callback = self._current_tls
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            lambda: MQTTConnection(self, self.server.next_id()),
            host=self.host,
            port=self.port,
            reuse_address=True,
            ssl=ssl_ctx,
        )
        if self._stopped:  # the server stopped while a reload reopened the port
            self._listener.close()
            return
        sock = self._listener.sockets[0]
        self.port = sock.getsockname()[1]
        scheme = "tls" if ssl_ctx is not None else "mqtt"
        log.info("Listening for MQTT clients on %s://%s:%d", scheme, self.host, self.port)

    def stop(self) -> None:
        """Close the port and every connection; a second call finds nothing left to do."""
        self._stopped = True
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for conn in list(self.connections.values()):
            conn.close("Server Shutdown")
        for manager in self.managers.values():
            manager.stop()
        self.managers.clear()

    def manager_for(self, account: Account) -> SessionManager:
        """The account's MQTT state, its streams made in the background the first time."""
        manager = self.managers.get(account.name)
        if manager is None:
            self.managers[account.name] = manager = SessionManager(self, account)
            manager.begin()
        return manager

    def failed(self, manager: SessionManager) -> None:
        """Its streams could not be made: the next login of its account tries again."""
        if self.managers.get(manager.account.name) is manager:
            del self.managers[manager.account.name]
            manager.stop()

    def spawn(self, work: Any, conn: MQTTConnection | None = None) -> None:
        """Run MQTT state work; a failure closes the connection it was for."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("MQTT: %s", t.exception())
                if conn is not None:
                    conn.close("Protocol Violation", abnormal=True)

        task.add_done_callback(done)

    def register(self, conn: MQTTConnection) -> None:
        self.connections[conn.cid] = conn
        sock = conn.transport.get_extra_info("socket") if conn.transport else None
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def unregister(self, conn: MQTTConnection) -> None:
        self.connections.pop(conn.cid, None)

    def authenticate(self, connect: dict[str, object], host: str) -> Grant:
        return self.auth.authenticate(connect, MQTT, host=host)

    def logged_in(self, account: str) -> list[MQTTConnection]:
        """The account's clients past their login (a revocation or deletion reaches them)."""
        return [
            conn
            for conn in self.connections.values()
            if conn.manager is not None and not conn.closed and conn.account.name == account
        ]

    def recheck(self) -> None:
        """After a config reload, every logged-in client is judged again as a NATS
        client is: credentials that no longer pass close it (as an authorization
        violation), a user now in another account is closed, the others take their
        new permissions."""
        for conn in list(self.connections.values()):
            if conn.manager is None or conn.closed:
                continue  # not logged in yet: its CONNECT is judged by the new rules
            try:
                grant = self.authenticate(conn.credentials, conn.host)
            except AuthError:
                log.error("%s:%d - mid:%d - authentication error", conn.host, conn.port, conn.cid)
                conn.close("Authentication Failure", abnormal=True)
                continue
            if grant.account != conn.account.name:
                conn.close("Client Closed", abnormal=True)
                continue
            conn.regrant(grant)

    def credentials(self, packet: mqtt.Connect) -> dict[str, object]:
        """A CONNECT's credentials as a NATS client sends them: the password is a token
        too, and in operator mode the user JWT when it reads as one."""
        password = packet.password.decode("utf-8", "replace") if packet.password else None
        connect: dict[str, object] = {
            "user": packet.username,
            "pass": password,
            "auth_token": password,
        }
        if password and self.server.auth.store is not None:
            try:
                jwt.decode(password, "user")
            except JWTError:
                return connect
            connect["jwt"] = password
        return connect

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
