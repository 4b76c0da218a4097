"""The accounts a running server knows: each one a subject space of its own.

A publish is matched in its sender's account only, so two accounts never see
each other's messages. The global account `$G` owns the server's original
subject trie (`Server.sublist`), so a server without accounts routes exactly as
before; the system account always exists, configured or not, as on the reference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from ingest.server.accounts.settings import (
    DEFAULT_SYSTEM_ACCOUNT,
    GLOBAL_ACCOUNT,
    AccountConfig,
    AccountLimits,
)
from ingest.server.sublist import Sublist


class _Options(Protocol):
    accounts: tuple[AccountConfig, ...]
    system_account: str | None


class Account:
    """One subject space; `jetstream` is its engine once the composition root built one.
    `clients` are its connections on this server; with `remote_conns`, its count on each
    peer (by server id), they are what `limits.max_connections` bounds, as its leafnode
    links here and `remote_leafnodes` are what `max_leafnodes` bounds."""

    __slots__ = (
        "clients", "jetstream", "jetstream_enabled", "limits", "name", "remote_conns",
        "remote_leafnodes", "sublist",
    )  # fmt: skip

    def __init__(
        self,
        name: str,
        sublist: Sublist[Any],
        *,
        jetstream_enabled: bool,
        limits: AccountLimits | None = None,
    ) -> None:
        self.name = name
        self.sublist = sublist
        self.jetstream_enabled = jetstream_enabled
        self.limits = limits or AccountLimits()
        self.jetstream: Any = None
        self.clients: set[Any] = set()
        self.remote_conns: dict[str, int] = {}
        self.remote_leafnodes: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"Account({self.name!r})"


class Accounts:
    """Accounts by name. When the config names no account but the system account, `$G`
    gets JetStream when the server has it; otherwise only the accounts that say
    `jetstream: enabled` do (the reference's rule)."""

    def __init__(self, opts: _Options, global_sublist: Sublist[Any], *, jetstream: bool) -> None:
        configured = {account.name: account for account in opts.accounts}
        system = opts.system_account or DEFAULT_SYSTEM_ACCOUNT
        global_only = not set(configured) - {system}
        self.global_account = Account(
            GLOBAL_ACCOUNT, global_sublist, jetstream_enabled=jetstream and global_only
        )
        self._by_name: dict[str, Account] = {GLOBAL_ACCOUNT: self.global_account}
        for name, config in configured.items():
            self._by_name[name] = Account(
                name,
                Sublist(),
                jetstream_enabled=jetstream and config.jetstream,
                limits=config.limits,
            )
        if system not in self._by_name:
            self._by_name[system] = Account(system, Sublist(), jetstream_enabled=False)
        self.system_account = self._by_name[system]
        self.on_create: list[Callable[[Account], None]] = []  # services every account has
        self.on_count: list[Callable[[Account], None]] = []  # a connection came or went
        # A client (or an accepted leafnode) was admitted to its account, or left it
        # (`close_reason` then set).
        self.on_connect: list[Callable[[Any], None]] = []
        self.on_disconnect: list[Callable[[Any], None]] = []

    def ensure(self, name: str) -> Account:
        """The account `name`; in operator mode accounts are known from their JWTs only,
        so one is created empty the first time a user of it connects."""
        account = self._by_name.get(name)
        if account is None:
            account = self._by_name[name] = Account(name, Sublist(), jetstream_enabled=False)
            for hook in self.on_create:
                hook(account)
        return account

    def every(self, hook: Callable[[Account], None]) -> None:
        """Run `hook` on each account there is and on each one created later (a service
        every account has, such as its $SYS.REQ.USER.INFO or its JetStream refusal)."""
        for account in self:
            hook(account)
        self.on_create.append(hook)

    def get(self, name: str) -> Account | None:
        return self._by_name.get(name)

    def __getitem__(self, name: str) -> Account:
        return self._by_name[name]

    def __iter__(self) -> Iterator[Account]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)
