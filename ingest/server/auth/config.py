"""Config keys of decentralized authentication: nkey users, `operator`, `resolver`,
`resolver_preload`, with the reference's syntax and errors.

The JWTs are only read and checked for their shape here; `options` checks the whole
(operator and preloaded accounts agree, no users configured beside an operator).
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Any

from ingest.parser.conf import ConfigError, Table
from ingest.server.config_reader import Section
from ingest.server.jwt import claims as jwt
from ingest.server.jwt import nkey
from ingest.server.jwt.settings import CACHE, FULL, MEMORY, URL, ResolverConfig
from ingest.server.settings import parse_duration

_JWT_START = "eyJ"  # base64 of '{"': an inline token rather than a file name
_URL_RESOLVER = re.compile(r'URL\(\s*"?([^\s"]*)"?\s*\)', re.IGNORECASE)
_RESOLVER_ERROR = (
    'error parsing account resolver, should be MEM or  URL("url") or a map containing '
    "dir and type state=[FULL|CACHE])"
)


def nkey_user(section: Section, key: str, entry: Table) -> str:
    """A user entry's `nkey`: a user's public key, and then no name or password."""
    value = section.string(key)
    if not nkey.is_public(value, nkey.USER):
        raise section.error(key, "Not a valid public nkey for a user")
    for other in entry:
        if other.lower() in ("user", "username", "pass", "password"):
            where = key if other.lower() in ("user", "username") else other
            raise section.error(where, "Nkey users do not take usernames or passwords")
    return value


def _operator_jwt(section: Section, key: str, value: object) -> str:
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


def operators(section: Section, key: str, out: dict[str, Any]) -> None:
    value = section.table[key]
    items = value if isinstance(value, list) else [value]
    out["operators"] = tokens = tuple(_operator_jwt(section, key, item) for item in items)
    for token in tokens:  # the operator names the system account unless the config does
        system = jwt.decode(token, "operator").nats.get("system_account")
        if isinstance(system, str) and system:
            out.setdefault("system_account", system)
    server_url = jwt.decode(tokens[0], "operator").nats.get("account_server_url")
    if len(tokens) == 1 and isinstance(server_url, str) and server_url:
        # An operator's account server is its URL resolver unless `resolver` says otherwise
        # (`nsc push` appends `/accounts` to it).
        url = account_server(server_url.rstrip("/") + "/accounts")
        out.setdefault("resolver", ResolverConfig(type=URL, url=url))


def resolver(section: Section, key: str, out: dict[str, Any]) -> None:
    value = section.table[key]
    if isinstance(value, str):
        out["resolver"] = _named_resolver(section, key, value)
        return
    if not isinstance(value, Table):
        raise section.error(key, _RESOLVER_ERROR)
    inner = section.section(key)
    fields: dict[str, Any] = {}
    hard_delete: bool | None = None
    for name in value:
        lowered = name.lower()
        if lowered == "type":
            kind = inner.string(name).lower()
            fields["type"] = {"full": FULL, "cache": CACHE}.get(kind, kind)
        elif lowered == "dir":
            fields["dir"] = inner.string(name)
        elif lowered == "allow_delete":
            fields["allow_delete"] = inner.boolean(name)
        elif lowered in ("interval", "timeout", "ttl"):
            try:
                fields[lowered] = parse_duration(inner.string(name))
            except ValueError as exc:
                raise inner.error(name, f"error parsing {lowered}: {exc}") from exc
        elif lowered == "limit":
            fields["limit"] = inner.integer(name)
        elif lowered == "hard_delete":
            hard_delete = inner.boolean(name)
        else:
            inner.unknown(name)
    kind = fields.get("type")
    if kind == CACHE:
        for given, refused in (
            ("interval" in fields, "CACHE does not accept sync"),
            (fields.get("allow_delete"), "CACHE does not accept allow_delete"),
            (hard_delete is not None, "CACHE does not accept hard_delete"),
        ):
            if given:
                raise section.error(key, refused)
        if fields.get("limit", 0) <= 0:
            fields["limit"] = 1000
    elif kind == FULL:
        if fields.get("ttl"):
            raise section.error(key, "FULL does not accept ttl")
        if hard_delete is not None and not fields.get("allow_delete"):
            raise section.error(key, "hard_delete has no effect without delete")
        fields["hard_delete"] = bool(hard_delete)
        fields["limit"] = max(fields.get("limit", 0), 0)  # 0: as many accounts as pushed
    else:
        raise section.error(key, _RESOLVER_ERROR)
    if not fields.get("dir"):
        raise section.error(key, "mkdir : no such file or directory")
    out["resolver"] = ResolverConfig(**fields)


def _named_resolver(section: Section, key: str, value: str) -> ResolverConfig:
    """`MEM`/`MEMORY`, or `URL("http://host/jwt/v1/accounts/")` (the URL ends with `/`)."""
    if value.strip().upper() in ("MEM", "MEMORY"):
        return ResolverConfig(type=MEMORY)
    found = _URL_RESOLVER.fullmatch(value.strip())
    if found is None:
        raise section.error(key, _RESOLVER_ERROR)
    return ResolverConfig(type=URL, url=account_server(found.group(1)))


def account_server(url: str) -> str:
    """The base URL an account's public key is appended to."""
    url = url.strip()
    try:
        urllib.parse.urlsplit(url)
    except ValueError as exc:
        raise ConfigError(f'error parsing account resolver url ["{url}"]') from exc
    return url if url.endswith("/") else url + "/"


def resolver_preload(section: Section, key: str, out: dict[str, Any]) -> None:
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
    if opts.accounts or opts.mappings:  # top-level mappings are the global account's
        raise ConfigError("operators do not allow Accounts to be configured directly")
    if opts.resolver is None:
        raise ConfigError("operators require an account resolver to be configured")
    named = {
        c.nats.get("system_account") for c in (jwt.decode(t, "operator") for t in opts.operators)
    } - {None, ""}
    if opts.system_account and named and opts.system_account not in named:
        raise ConfigError("system_account in config and operator JWT must be identical")
