"""The `websocket { … }` (or `ws { … }`) section of a config file, with the reference's
keys and its start-up refusals (no TLS without `no_tls`, bad origins, a JWT cookie
without trusted operators)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ingest.server.cluster.config_section import (
    TLSReader,
    optional_listener,
    single_user_authorization,
)
from ingest.server.config_reader import Section
from ingest.server.websocket.settings import WebSocketConfig

_ORIGIN_KEYS = ("allowed_origins", "allowed_origin", "allow_origins", "allow_origin", "origins")


def read_websocket(top: Section, key: str, *, tls: TLSReader) -> WebSocketConfig | None:
    """None without a port: the reference then opens no WebSocket listener."""
    return optional_listener(top, key, tls, _websocket_key, WebSocketConfig)


def _websocket_key(section: Section, key: str) -> dict[str, Any] | None:
    """The websocket block's keys beyond every listener's, as fields; None for another."""
    lowered = key.lower()
    if lowered == "advertise":
        return {"advertise": section.string(key)}
    if lowered == "no_tls":
        return {"no_tls": section.boolean(key)}
    if lowered in ("compression", "compress"):
        return {"compression": section.boolean(key)}
    if lowered == "same_origin":
        return {"same_origin": section.boolean(key)}
    if lowered in _ORIGIN_KEYS:
        return {"allowed_origins": _origins(section, key)}
    if lowered == "handshake_timeout":
        return {"handshake_timeout": section.timeout(key, "websocket handshake")}
    if lowered in ("authorization", "authentication"):
        return single_user_authorization(section, key, token=True)
    if lowered == "no_auth_user":
        return {"no_auth_user": section.string(key)}
    if lowered == "jwt_cookie":
        return {"jwt_cookie": section.string(key)}
    return None


def _origins(section: Section, key: str) -> tuple[str, ...]:
    value = section.typed(key, (list, str), "a list of origins")
    items = [value] if isinstance(value, str) else value
    for origin in items:
        if not isinstance(origin, str):
            raise section.error(key, f"unable to parse allowed origin: {origin!r}")
        problem = origin_problem(origin)
        if problem:
            raise section.error(key, problem)
    return tuple(items)


def origin_problem(origin: str) -> str | None:
    """Why the reference refuses an allowed origin at start, or None."""
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https"):
        return (
            f'unable to parse allowed origin "{origin}": allowed origins must be absolute '
            "URLs with http or https scheme"
        )
    if not parts.netloc:
        return f'unable to parse allowed origin "{origin}": host is required'
    return None
