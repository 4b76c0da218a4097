"""`websocket { … }` as the reference reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class WebSocketConfig:
    """Present only when the block names a port. Authorization here replaces the
    server's for WebSocket clients when it sets a username, token or no_auth_user
    (the reference's override rule, as for MQTT)."""

    host: str = "0.0.0.0"
    port: int = 0  # 0: a free port (the user wrote -1)
    advertise: str | None = None
    tls: Any = None  # a TLSConfig; None needs no_tls
    no_tls: bool = False
    compression: bool = False
    same_origin: bool = False
    allowed_origins: tuple[str, ...] = ()
    handshake_timeout: float = 0.0  # 0: the TLS timeout with TLS, else 2 s (/varz shows set ones)
    username: str | None = None
    password: str | None = None
    token: str | None = None
    auth_timeout: float | None = None
    no_auth_user: str | None = None
    jwt_cookie: str | None = None
