"""The `accounts { … }` section of a config file, read with the reference's keys and errors.

The config-file module hands over its section reader and its users reader (the
entries of an account's `users` are written exactly like `authorization`'s), so
account parsing stays out of the top-level key table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ingest.parser.conf import ConfigError, Table
from ingest.server.accounts.config_sharing import (
    check_sharing,
    read_exports,
    read_imports,
    read_jetstream_limits,
    read_limits,
)
from ingest.server.accounts.settings import GLOBAL_ACCOUNT, AccountConfig, AccountLimits
from ingest.server.config_reader import Section

# Account keys the reference knows that jetlake refuses rather than ignores.
_LATER = ("mappings", "nkey", "default_permissions")


UsersReader = Callable[[Any, str, Any], list[Any]]


def read_accounts(
    top: Section, key: str, read_users: UsersReader, taken: set[str]
) -> tuple[AccountConfig, ...]:
    """Every account; `taken` holds user names already defined (authorization's, earlier
    accounts'), so a user is bound to one account only, as the reference insists."""
    value = top.table[key]
    if isinstance(value, list):  # `accounts [A, B]`: accounts without users
        return tuple(_named(top, key, item) for item in value)
    section = top.section(key)
    accounts = []
    for name in section.table:
        if name in section.table.variables:
            continue
        if name == GLOBAL_ACCOUNT:
            raise section.error(name, f'"{name}" is a Reserved Account')
        if not isinstance(section.table[name], Table):
            raise section.error(name, "Expected map entries for accounts")
        accounts.append(_account(section.section(name), name, read_users, taken))
    check_sharing(top, key, tuple(accounts))
    return tuple(accounts)


def _named(top: Section, key: str, item: object) -> AccountConfig:
    if not isinstance(item, str):
        raise top.error(key, "Expected map entries for accounts")
    if item == GLOBAL_ACCOUNT:
        raise top.error(key, f'"{item}" is a Reserved Account')
    return AccountConfig(name=item)


def _account(
    section: Section, name: str, read_users: UsersReader, taken: set[str]
) -> AccountConfig:
    users: tuple[Any, ...] = ()
    jetstream = False
    shared: dict[str, Any] = {}
    limits: dict[str, int] = {}
    js_limits = None
    for field in section.table:
        lowered = field.lower()
        if lowered == "users":
            if not isinstance(section.table[field], list):
                raise ConfigError(
                    f"Expected users field to be an array, got {section.table[field]!r}"
                )
            users = tuple(read_users(section, field, None))
            for user in users:
                if user.user in taken:
                    raise section.error(field, f'Duplicate user "{user.user}" detected')
                taken.add(user.user)
        elif lowered == "jetstream":
            jetstream = _jetstream(section, field)
            value = section.table[field]
            if isinstance(value, Table):
                js_limits = read_jetstream_limits(section, field, value)
        elif lowered == "exports":
            shared["exports"] = read_exports(section, field)
        elif lowered == "imports":
            shared["imports"] = read_imports(section, field)
        elif lowered == "limits":
            limits = read_limits(section, field)
        elif lowered in _LATER:
            raise section.error(field, f'account "{field}" is not supported by jetlake yet')
        else:
            section.unknown(field)
    return AccountConfig(
        name=name,
        users=users,
        jetstream=jetstream,
        limits=AccountLimits(**limits, jetstream=js_limits),
        **shared,
    )


def _jetstream(section: Section, field: str) -> bool:
    value = section.table[field]
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value.lower() not in ("enabled", "enable", "disabled", "disable"):
            raise ConfigError(f"Expected 'enabled' or 'disabled' for string value, got '{value}'")
        return value.lower().startswith("enable")
    if isinstance(value, Table):
        return True
    raise section.error(field, f"Expected map, bool or string to define JetStream, got {value!r}")
