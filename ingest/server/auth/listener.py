"""The authorization override of a listener block (`mqtt {}`, `websocket {}`).

Such a block's `authorization { user, password, token }` or `no_auth_user`
replaces the server's for the clients of that listener, with the server's
users and accounts still known (the reference's rule); otherwise they log in
as any client does. Either way the checks are `Authenticator`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ingest.parser.conf import ConfigError
from ingest.server.auth.authenticator import Authenticator


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


def server_users(opts: Any) -> tuple[Any, ...]:
    """The top level's users and every account block's: the reference counts them all
    as the server's users when it judges a `no_auth_user` or a listener's credentials."""
    return opts.users + tuple(user for account in opts.accounts for user in account.users)


def check_no_auth_user(no_auth_user: str | None, users: tuple[Any, ...]) -> None:
    """The reference refuses to start with a `no_auth_user` that names none of `users`."""
    if no_auth_user is None:
        return
    if not users:
        raise ConfigError(
            f'no_auth_user: "{no_auth_user}" present, but users/nkeys are not defined'
        )
    if all(user.user != no_auth_user for user in users):
        raise ConfigError(
            f'no_auth_user: "{no_auth_user}" not present as user or nkey in '
            "authorization block or account configuration"
        )


def check_block_credentials(kind: str, block: Any, users: tuple[Any, ...]) -> None:
    """A listener block's own username or token cannot stand beside the server's users:
    the reference refuses to start, naming the block (`kind`)."""
    if users and block.username:
        raise ConfigError(
            f"{kind} authentication username not compatible with presence of users/nkeys"
        )
    if users and block.token:
        raise ConfigError(
            f"{kind} authentication token not compatible with presence of users/nkeys"
        )
