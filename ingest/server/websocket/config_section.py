"""The `websocket { … }` (or `ws { … }`) section of a config file, with the reference's
keys and its start-up refusals (no TLS without `no_tls`, bad origins, a JWT cookie
without trusted operators)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from ingest.server.cluster.config_section import (
    listener_fields,
    single_user_authorization,
)
from ingest.server.config_reader import Section
from ingest.server.websocket.settings import WebSocketConfig

_ORIGIN_KEYS = ("allowed_origins", "allowed_origin", "allow_origins", "allow_origin", "origins")


def read_websocket(
    top: Section, key: str, *, tls: Callable[[Any, str], Any]
) -> WebSocketConfig | None:
    """None without a port: the reference then opens no WebSocket listener."""
    section = top.section(key)
    fields: dict[str, Any] = {}
    for name in section.table:
        lowered = name.lower()
        listener = listener_fields(section, name, tls)
        if listener is not None:
            fields.update(listener)
        elif lowered == "advertise":
            fields["advertise"] = section.string(name)
        elif lowered == "no_tls":
            fields["no_tls"] = section.boolean(name)
        elif lowered in ("compression", "compress"):
            fields["compression"] = section.boolean(name)
        elif lowered == "same_origin":
            fields["same_origin"] = section.boolean(name)
        elif lowered in _ORIGIN_KEYS:
            fields["allowed_origins"] = _origins(section, name)
        elif lowered == "handshake_timeout":
            fields["handshake_timeout"] = section.timeout(name, "websocket handshake")
        elif lowered in ("authorization", "authentication"):
            fields.update(single_user_authorization(section, name, token=True))
        elif lowered == "no_auth_user":
            fields["no_auth_user"] = section.string(name)
        elif lowered == "jwt_cookie":
            fields["jwt_cookie"] = section.string(name)
        else:
            section.unknown(name)
    if "port" not in fields:
        return None
    return dataclasses.replace(WebSocketConfig(), **fields)


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
