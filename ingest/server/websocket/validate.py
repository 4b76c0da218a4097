"""Start-up checks of `websocket { … }`, with the reference's words."""

from __future__ import annotations

from typing import Any

from ingest.parser.conf import ConfigError


def check_websocket_options(opts: Any) -> None:
    """What the reference refuses to start with once the whole configuration is known."""
    ws = opts.websocket
    if ws is None:
        return
    if ws.tls is None and not ws.no_tls:
        raise ConfigError("websocket requires TLS configuration")
    users = opts.users + tuple(u for account in opts.accounts for u in account.users)
    if ws.no_auth_user is not None:
        if not users:
            raise ConfigError(
                f'no_auth_user: "{ws.no_auth_user}" present, but users/nkeys are not defined'
            )
        if all(user.user != ws.no_auth_user for user in users):
            raise ConfigError(
                f'no_auth_user: "{ws.no_auth_user}" not present as user or nkey in '
                "authorization block or account configuration"
            )
    if opts.users and ws.username:
        raise ConfigError(
            "websocket authentication username not compatible with presence of users/nkeys"
        )
    if opts.users and ws.token:
        raise ConfigError(
            "websocket authentication token not compatible with presence of users/nkeys"
        )
    if ws.jwt_cookie and not opts.operators:
        raise ConfigError(
            "trusted operators or trusted keys configuration is required for JWT "
            f'authentication via cookie "{ws.jwt_cookie}"'
        )
