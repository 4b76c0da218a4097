"""Start-up checks of `websocket { … }`, with the reference's words."""

from __future__ import annotations

from typing import Any

from ingest.parser.conf import ConfigError
from ingest.server.auth.listener import check_block_credentials, check_no_auth_user, server_users


def check_websocket_options(opts: Any) -> None:
    """What the reference refuses to start with once the whole configuration is known."""
    ws = opts.websocket
    if ws is None:
        return
    if ws.tls is None and not ws.no_tls:
        raise ConfigError("websocket requires TLS configuration")
    check_no_auth_user(ws.no_auth_user, server_users(opts))
    check_block_credentials("websocket", ws, server_users(opts))
    if ws.jwt_cookie and not opts.operators:
        raise ConfigError(
            "trusted operators or trusted keys configuration is required for JWT "
            f'authentication via cookie "{ws.jwt_cookie}"'
        )
