"""The `accounts { … }` and `system_account` settings, as plain frozen values.

Kept apart from the server so the option parsers can build them without
importing any server code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GLOBAL_ACCOUNT = "$G"  # users outside any account block land here, as on the reference
DEFAULT_SYSTEM_ACCOUNT = "$SYS"
# How long a stream or chunked response mapping lives after its last use (the reference's).
DEFAULT_RESPONSE_THRESHOLD = 120.0

SINGLETON, STREAM, CHUNKED = "Singleton", "Stream", "Chunked"
# `sampling: headers`: a request is sampled when it carries a sampled trace header.
HEADERS_SAMPLING = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Latency:
    """Where a service export reports how long its responses took, and for what share."""

    sampling: int  # percent of requests, 1-100, or HEADERS_SAMPLING
    subject: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Export:
    """`{stream: …}` or `{service: …}`; `accounts` None is public."""

    service: bool
    subject: str
    accounts: tuple[str, ...] | None = None
    response_type: str = SINGLETON
    response_threshold: float = DEFAULT_RESPONSE_THRESHOLD
    latency: Latency | None = None
    # Set (1-based): an importer takes only the subjects with its own name at this token.
    account_token_position: int = 0

    def allows(self, account: str, subject: str) -> bool:
        """Whether `account` may import `subject` (a subset of this export's): with a
        token position the reference checks the importer's name there alone."""
        at = self.account_token_position
        if at > 0:
            tokens = subject.split(".")
            return at <= len(tokens) and tokens[at - 1] == account
        return self.accounts is None or account in self.accounts

    def token_position_error(self) -> str | None:
        """The reference's refusal of a token position that is not a `*` of the subject."""
        at = self.account_token_position
        tokens = self.subject.split(".")
        if at < 0 or (at > 0 and (at > len(tokens) or tokens[at - 1] != "*")):
            kind = "service" if self.service else "stream"
            return f'Error adding {kind} export "{self.subject}": sublist: invalid subject'
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Import:
    """`{stream: {account, subject}, prefix|to}` or `{service: {account, subject}, to}`.

    `local` is the subject importers see: a stream's exported subject under its
    prefix or `to`, or the subject a service is requested on in the importing account.
    """

    service: bool
    account: str
    subject: str
    to: str = ""
    prefix: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class AccountLimits:
    """An account's `limits { … }` and its JetStream limits; -1 is unlimited."""

    max_connections: int = -1
    max_subscriptions: int = -1
    max_payload: int = -1
    max_leafnodes: int = -1
    jetstream: JetStreamLimits | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JetStreamLimits:
    max_memory: int = -1
    max_file: int = -1
    max_streams: int = -1
    max_consumers: int = -1
    max_ack_pending: int = -1
    max_bytes_required: bool = False
    memory_max_stream_bytes: int = -1
    disk_max_stream_bytes: int = -1
    # An account JWT's tiered limits (`nsc edit account --js-tier N`): each replica
    # count's own limits; a stream of a count without a tier is refused.
    tiers: tuple[tuple[int, JetStreamLimits], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AccountConfig:
    """One account of the config file; `users` are `settings.User` values."""

    name: str
    users: tuple[Any, ...] = ()
    jetstream: bool = False
    exports: tuple[Export, ...] = ()
    imports: tuple[Import, ...] = ()
    limits: AccountLimits = field(default_factory=AccountLimits)
