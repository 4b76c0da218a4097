"""The `accounts { … }` and `system_account` settings, as plain frozen values.

Kept apart from the server so the option parsers can build them without
importing any server code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GLOBAL_ACCOUNT = "$G"  # users outside any account block land here, as on the reference
DEFAULT_SYSTEM_ACCOUNT = "$SYS"


@dataclass(frozen=True, slots=True, kw_only=True)
class AccountConfig:
    """One account of the config file; `users` are `settings.User` values."""

    name: str
    users: tuple[Any, ...] = ()
    jetstream: bool = False
