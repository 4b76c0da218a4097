"""The authorization override of a listener block (`mqtt {}`, `websocket {}`).

Such a block's `authorization { user, password, token }` or `no_auth_user`
replaces the server's for the clients of that listener, with the server's
users and accounts still known (the reference's rule); otherwise they log in
as any client does. Either way the checks are `Authenticator`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ingest.server.auth import Authenticator


@dataclass(frozen=True, slots=True)
class _Override:
    """A listener's block in the shape `Authenticator` reads."""

    auth_token: str | None
    username: str | None
    password: str | None
    users: tuple[Any, ...]
    no_auth_user: str | None
    accounts: tuple[Any, ...]


def listener_authenticator(server: Any, block: Any) -> Authenticator:
    """The server's authenticator, or the block's when it sets its own credentials."""
    if not (block.username or block.token or block.no_auth_user):
        return server.auth
    opts = server.opts
    return Authenticator(
        _Override(
            block.token,
            block.username,
            block.password,
            opts.users,
            block.no_auth_user,
            opts.accounts,
        )
    )
