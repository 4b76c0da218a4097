"""Config keys of decentralized authentication: nkey users, `operator`, `resolver`,
`resolver_preload`, with the reference's syntax and errors.

The JWTs are only read and checked for their shape here; `options` checks the whole
(operator and preloaded accounts agree, no users configured beside an operator).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from ingest.parser.conf import ConfigError, Table
from ingest.server.jwt import claims as jwt
from ingest.server.jwt import nkey
from ingest.server.jwt.settings import FULL, MEMORY, ResolverConfig
from ingest.server.settings import parse_duration

_JWT_START = "eyJ"  # base64 of '{"': an inline token rather than a file name
_RESOLVER_ERROR = (
    'error parsing account resolver, should be MEM or  URL("url") or a map containing '
    "dir and type state=[FULL|CACHE])"
)


class _Section(Protocol):
    table: Table

    def error(self, key: str, reason: str) -> ConfigError: ...
    def unknown(self, key: str) -> None: ...
    def string(self, key: str) -> str: ...
    def boolean(self, key: str) -> bool: ...
    def integer(self, key: str) -> int: ...
    def section(self, key: str) -> Any: ...


def nkey_user(section: _Section, key: str, entry: Table) -> str:
    """A user entry's `nkey`: a user's public key, and then no name or password."""
    value = section.string(key)
    if not nkey.is_public(value, nkey.USER):
        raise section.error(key, "Not a valid public nkey for a user")
    for other in entry:
        if other.lower() in ("user", "username", "pass", "password"):
            where = key if other.lower() in ("user", "username") else other
            raise section.error(where, "Nkey users do not take usernames or passwords")
    return value


def _operator_jwt(section: _Section, key: str, value: object) -> str:
    if not isinstance(value, str):
        raise section.error(key, f"error parsing operator JWT: expected a string, got {value!r}")
    if not value.startswith(_JWT_START):
        try:
            value = _unwrap(Path(value).read_text())
        except OSError as exc:
            reason = exc.strerror.lower() if exc.strerror else str(exc)
            raise section.error(key, f"error parsing operator JWT: open {value}: {reason}") from exc
    try:
        jwt.decode(value, "operator")
    except jwt.JWTError as exc:
        raise section.error(key, f"error parsing operator JWT: {exc}") from exc
    return value.strip()


def _unwrap(text: str) -> str:
    """An operator file holds the bare JWT, or the JWT between `-----BEGIN` armor lines."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    inner = [line for line in lines if not line.startswith("---")]
    return inner[0] if inner else text.strip()


def operators(section: _Section, key: str, out: dict[str, Any]) -> None:
    value = section.table[key]
    items = value if isinstance(value, list) else [value]
    out["operators"] = tokens = tuple(_operator_jwt(section, key, item) for item in items)
    for token in tokens:  # the operator names the system account unless the config does
        system = jwt.decode(token, "operator").nats.get("system_account")
        if isinstance(system, str) and system:
            out.setdefault("system_account", system)


def resolver(section: _Section, key: str, out: dict[str, Any]) -> None:
    value = section.table[key]
    if isinstance(value, str):
        if value.upper() in ("MEM", "MEMORY"):
            out["resolver"] = ResolverConfig(type=MEMORY)
            return
        if value.upper().startswith("URL("):
            raise section.error(key, "resolver URL(...) is not supported by jetlake")
        raise section.error(key, _RESOLVER_ERROR)
    if not isinstance(value, Table):
        raise section.error(key, _RESOLVER_ERROR)
    inner = section.section(key)
    fields: dict[str, Any] = {}
    for name in value:
        lowered = name.lower()
        if lowered == "type":
            kind = inner.string(name).lower()
            if kind != FULL:
                reason = "resolver type cache" if kind == "cache" else None
                raise section.error(
                    key, f"{reason} is not supported by jetlake" if reason else _RESOLVER_ERROR
                )
            fields["type"] = FULL
        elif lowered == "dir":
            fields["dir"] = inner.string(name)
        elif lowered == "allow_delete":
            fields["allow_delete"] = inner.boolean(name)
        elif lowered in ("interval", "timeout"):
            try:
                fields[lowered] = parse_duration(inner.string(name))
            except ValueError as exc:
                raise inner.error(name, f"error parsing {lowered}: {exc}") from exc
        elif lowered == "limit":
            fields["limit"] = inner.integer(name)
        elif lowered == "hard_delete":
            inner.boolean(name)  # deleted JWTs are removed either way
        else:
            inner.unknown(name)
    if fields.get("type") != FULL:
        raise section.error(key, _RESOLVER_ERROR)
    if not fields.get("dir"):
        raise section.error(key, "mkdir : no such file or directory")
    out["resolver"] = ResolverConfig(**fields)


def resolver_preload(section: _Section, key: str, out: dict[str, Any]) -> None:
    inner = section.section(key)
    preload: list[tuple[str, str]] = []
    for name in inner.table:
        if name in inner.table.variables:
            continue
        token = inner.string(name)
        try:
            claims = jwt.decode(token, "account")
        except jwt.JWTError as exc:
            raise inner.error(name, "invalid account JWT") from exc
        if claims.subject != name:
            raise inner.error(name, f"JWT subject {claims.subject} does not match key {name}")
        preload.append((name, token))
    out["resolver_preload"] = tuple(preload)


def check_operator_mode(opts: Any) -> None:
    """What the reference refuses at start in operator mode."""
    if opts.users or opts.username or opts.auth_token:
        raise ConfigError("operators do not allow users to be configured directly")
    if opts.accounts:
        raise ConfigError("operators do not allow Accounts to be configured directly")
    if opts.resolver is None:
        raise ConfigError("operator mode needs a resolver: jetlake has no URL resolver")
    named = {
        c.nats.get("system_account") for c in (jwt.decode(t, "operator") for t in opts.operators)
    } - {None, ""}
    if opts.system_account and named and opts.system_account not in named:
        raise ConfigError("system_account in config and operator JWT must be identical")
