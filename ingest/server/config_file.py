"""Config-file keys of nats-server and what each one sets.

Each top-level key has one handler that reads it with the reference's types,
aliases and warnings and writes plain fields; `options` freezes the result.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from consensus.durability import DEFAULT_SYNC_INTERVAL_NS
from ingest.parser.conf import ConfigError, Table
from ingest.parser.subjects import is_valid_subject
from ingest.server.accounts.config_section import read_accounts
from ingest.server.auth import config as auth_config
from ingest.server.cluster.config_section import read_cluster, single_user_authorization
from ingest.server.config_reader import Section, describe, read_size
from ingest.server.gofmt import go_value
from ingest.server.lake_config import read_lake
from ingest.server.leafnode.config_section import read_leafnodes
from ingest.server.mappings import read_mappings
from ingest.server.pinning import pinned_certs
from ingest.server.settings import (
    CONNECTION_TYPES,
    DEFAULT_PORT,
    HANDSHAKE_FIRST_FALLBACK,
    MAX_INT32,
    MQTTConfig,
    Permissions,
    SubjectPermission,
    TLSConfig,
    User,
    parse_duration,
)
from ingest.server.websocket.config_section import read_websocket

# -- config file keys ----------------------------------------------------------


def bind_port(raw: int) -> int:
    return DEFAULT_PORT if raw == 0 else 0 if raw == -1 else raw


def monitor_port(raw: int) -> int | None:
    return None if raw == 0 else 0 if raw == -1 else raw


def _subject_permission(section: Section, key: str, *, queue: bool) -> SubjectPermission:
    if not isinstance(section.table[key], Table):
        return SubjectPermission(allow=section.subjects(key, queue=queue))
    inner = section.section(key)
    lists: dict[str, tuple[str, ...]] = {}
    for name in inner.table:
        if name.lower() in ("allow", "deny"):
            lists[name.lower()] = inner.subjects(name, queue=queue)
        elif name not in inner.table.variables:
            raise inner.error(
                name,
                f'Unknown field name "{name}" parsing subject permissions, '
                "only 'allow' or 'deny' are permitted",
            )
    return SubjectPermission(**lists)


def _permissions(parent: Section, key: str) -> Permissions:
    section = parent.section(key)
    found: dict[str, SubjectPermission] = {}
    for name in section.table:
        lowered = name.lower()
        if lowered in ("pub", "publish", "import"):
            found["publish"] = _subject_permission(section, name, queue=False)
        elif lowered in ("sub", "subscribe", "export"):
            found["subscribe"] = _subject_permission(section, name, queue=True)
        elif lowered == "allow_responses":
            responses = _allow_responses(section, name)
            if responses is not None:
                found["responses"] = responses
        elif name not in section.table.variables:
            raise section.error(name, f'Unknown field "{name}" parsing permissions')
    return Permissions(**found)


def _allow_responses(parent: Section, key: str) -> tuple[int, float] | None:
    """`allow_responses: true`, or `{max: N, expires: "5s"}` (`ttl` too), as the reference
    reads it; see `ingest.server.responses`."""
    value = parent.table[key]
    if isinstance(value, bool):
        return (0, 0.0) if value else None
    if not isinstance(value, Table):
        raise parent.error(key, "error parsing response permissions, expected a boolean or a map")
    most, ttl = 0, 0.0
    for name, item in value.items():
        lowered = name.lower()
        if lowered in ("max", "max_msgs", "max_messages", "max_responses"):
            most = item if isinstance(item, int) and not isinstance(item, bool) else 0
        elif lowered in ("expires", "expiration", "ttl"):
            if not isinstance(item, str):
                raise ConfigError(
                    f"error parsing {name}, not a duration string", value.position(name)
                )
            try:
                ttl = parse_duration(item)
            except ValueError as exc:
                raise ConfigError(f"error parsing {name}: {exc}", value.position(name)) from exc
        elif name not in value.variables:
            raise ConfigError(f'Unknown field "{name}" parsing permissions', value.position(name))
    return most, ttl


def _connection_types(section: Section, key: str) -> frozenset[str]:
    """One name or a list of them, in any case; all must be known, as the reference checks."""
    value = section.table[key]
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, str):
            kind = "int64" if isinstance(item, int) else type(item).__name__
            reason = f"error parsing allowed connection types: unsupported type {kind}"
            raise section.error(key, reason)
    names = [item.upper() for item in items]
    unknown = [name for name in names if name not in CONNECTION_TYPES]
    if unknown:
        quoted = " ".join(f'"{name}"' for name in unknown)
        raise section.error(key, f"invalid connection types [{quoted}]")
    return frozenset(names)


def _users(parent: Section, key: str, defaults: Permissions | None) -> list[User]:
    users: list[User] = []
    for section in parent.maps(key, "users", "user", go_value):
        entry = section.table
        fields: dict[str, Any] = {}
        for name in entry:
            lowered = name.lower()
            if lowered in ("user", "username"):
                fields["user"] = section.string(name)
            elif lowered in ("pass", "password"):
                fields["password"] = section.string(name)
            elif lowered in ("permission", "permissions", "authorization"):
                fields["permissions"] = _permissions(section, name)
            elif lowered in ("allowed_connection_types", "connection_types", "clients"):
                fields["allowed_connection_types"] = _connection_types(section, name)
            elif lowered == "nkey":
                fields["nkey"] = fields["user"] = auth_config.nkey_user(section, name, entry)
            else:
                section.unknown(name)
        if "user" not in fields:
            raise parent.error(key, "User entry requires a user")
        fields.setdefault("permissions", defaults)
        users.append(User(**fields))
    return users


def _authorization(top: Section, key: str, out: dict[str, Any]) -> None:
    section = top.section(key)
    users: list[User] | None = None
    defaults: Permissions | None = None
    users_key = ""
    for name in section.table:
        lowered = name.lower()
        if lowered in ("user", "username"):
            out["username"] = section.string(name)
        elif lowered in ("pass", "password"):
            out["password"] = section.string(name)
        elif lowered == "token":
            out["auth_token"] = section.string(name)
        elif lowered == "timeout":
            out["auth_timeout"] = seconds = section.timeout(name, "authorization config")
            if seconds > 60:
                section.warn(name, f"timeout of {seconds:g} seconds is high, keep it under 60")
        elif lowered == "users":
            users_key = name
        elif lowered in ("default_permission", "default_permissions", "permissions"):
            defaults = _permissions(section, name)
        else:
            section.unknown(name)
    if users_key:
        users = _users(section, users_key, defaults)
    if (out.get("username") or out.get("password")) and out.get("auth_token"):
        raise top.error(key, "Cannot have a user/pass and token")
    if users is not None:
        if out.get("username"):
            raise top.error(key, "Can not have a single user/pass and a users array")
        if out.get("auth_token"):
            raise top.error(key, "Can not have a token and a users array")
        seen: set[str] = set()
        nkeys = {user.nkey for user in users if user.nkey}
        for user in users:
            if user.user in seen:
                kind = "nkey" if user.user in nkeys else "user"
                raise top.error(key, f'Duplicate {kind} "{user.user}" detected')
            seen.add(user.user)
        out["users"] = tuple(users)


def _tls(top: Section, key: str) -> TLSConfig:
    section = top.section(key)
    fields: dict[str, Any] = {}
    for name in section.table:
        lowered = name.lower()
        if lowered in ("cert_file", "key_file", "ca_file"):
            value = section.table[name]
            if not isinstance(value, str):
                raise section.error(
                    name, f"error parsing tls config, expected '{lowered}' to be filename"
                )
            fields[lowered] = value
        elif lowered in ("verify", "insecure"):
            if not isinstance(section.table[name], bool):
                raise section.error(
                    name, f"error parsing tls config, expected '{lowered}' to be a boolean"
                )
            fields[lowered] = section.table[name]
        elif lowered == "pinned_certs":
            fields["pinned_certs"] = pinned_certs(section, name)
        elif lowered == "timeout":
            fields["timeout"] = section.timeout(name, "tls config")
        elif lowered in ("handshake_first", "first", "immediate"):
            fields.update(_handshake_first(section, name))
        else:
            raise section.error(name, f'error parsing tls config, unknown field "{name}"')
    return TLSConfig(**fields)


def _unpinned_tls(top: Section, key: str) -> TLSConfig:
    """A `tls {}` of a listener whose handshake runs in asyncio (WebSocket, MQTT), where
    no pin is checked: `pinned_certs` is refused rather than ignored."""
    tls = _tls(top, key)
    if tls.pinned_certs is not None:
        raise top.error(key, 'tls "pinned_certs" is not supported by jetlake yet here')
    return tls


def _handshake_first(section: Section, name: str) -> dict[str, Any]:
    value = section.table[name]
    if isinstance(value, bool):
        return {"handshake_first": value}
    if not isinstance(value, str):
        raise section.error(name, f'field "{name}" should be a boolean or a string')
    word = value.lower()
    if word in ("true", "on", "false", "off"):
        return {"handshake_first": word in ("true", "on")}
    if word in ("auto", "auto_fallback"):
        return {"handshake_first": True, "handshake_first_fallback": HANDSHAKE_FIRST_FALLBACK}
    try:
        return {"handshake_first": True, "handshake_first_fallback": parse_duration(value)}
    except ValueError:
        raise section.error(name, f'field "{name}"\'s value "{value}" is invalid') from None


def _jetstream(top: Section, key: str, out: dict[str, Any]) -> None:
    value = top.table[key]
    js = dict(out["jetstream"])
    if isinstance(value, bool):
        js["enabled"] = value
    elif isinstance(value, str):
        if value.lower() not in ("enabled", "enable", "disabled", "disable"):
            raise top.error(
                key, f"Expected 'enabled' or 'disabled' for string value, got '{value}'"
            )
        js["enabled"] = value.lower().startswith("enable")
    elif isinstance(value, Table):
        js["enabled"] = True
        section = top.section(key)
        for name in section.table:
            js.update(_jetstream_key(section, name, out))
    else:
        raise top.error(key, f"Expected map, bool or string to define JetStream, got {value!r}")
    out["jetstream"] = js


# The reference's other `jetstream { limits {} }` keys: refused by name, not as unknown.
_UNSUPPORTED_JS_LIMITS = (
    "max_ha_assets",
    "duplicate_window",
    "batch",
)


def _jetstream_key(section: Section, name: str, out: dict[str, Any]) -> dict[str, Any]:
    lowered = name.lower()
    value = section.table[name]
    if lowered in ("store", "store_dir", "storedir"):
        if out["jetstream"].get("store_dir"):
            raise section.error(name, "Duplicate 'store_dir' configuration")
        return {"store_dir": section.string(name)}
    if lowered in ("sync", "sync_interval"):
        if isinstance(value, str) and value.lower() == "always":
            return {"sync_interval_ns": None}
        interval = round(section.duration(name) * 1e9)  # 0, as on the reference: the default
        return {"sync_interval_ns": interval or DEFAULT_SYNC_INTERVAL_NS}
    if lowered in ("max_memory_store", "max_mem_store", "max_mem", "max_file_store", "max_file"):
        label = "max_file_store" if "file" in lowered else "max_mem_store"
        field_name = "max_file_store" if "file" in lowered else "max_memory_store"
        return {field_name: read_size(section, name, label)}
    if lowered in ("enable", "enabled"):
        return {"enabled": section.boolean(name)}
    if lowered == "domain":
        domain = section.string(name)
        derived = f"$JS.{domain}.API"
        if domain and not is_valid_subject(derived):
            raise section.error(
                name, f'invalid domain name: derived "{derived}" is not a valid subject'
            )
        if any(c in domain for c in ".*>"):
            raise section.error(name, "invalid domain name: may not contain ., * or >")
        return {"domain": domain or None}
    if lowered == "limits" and isinstance(value, Table):
        limits = section.section(name)
        found: dict[str, Any] = {}
        for key in limits.table:
            found.update(_jetstream_limit(limits, key))
        return found
    section.unknown(name)
    return {}


def _jetstream_limit(section: Section, name: str) -> dict[str, Any]:
    """`jetstream { limits { … } }`: the server's defaults over every account."""
    lowered = name.lower()
    if lowered in ("default_max_consumers", "max_ack_pending", "max_request_batch"):
        return {lowered: section.integer(name)}
    if lowered in _UNSUPPORTED_JS_LIMITS:
        raise section.error(name, f'jetstream limit "{name}" is not supported by jetlake')
    section.unknown(name)
    return {}


def _int32(section: Section, key: str) -> int:
    value = section.integer(key)
    if value > MAX_INT32:
        raise section.error(key, f"{key} value is too big")
    return value


def _server_tags(section: Section, key: str) -> tuple[str, ...]:
    """A list of strings, or one string (one tag, as the reference takes it); lower-cased."""
    value = section.table[key]
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(t, str) for t in items):
        raise section.error(key, f'expected strings for "{key}", got {describe(value)}')
    return tuple(t.lower() for t in items if t)


def _server_name(section: Section, key: str) -> str:
    name = section.string(key)
    if " " in name:
        raise section.error(key, "server name cannot contain spaces")
    return name


def _mqtt(top: Section, key: str, out: dict[str, Any]) -> None:
    """`mqtt { … }`: without a port there is no MQTT listener, as on the reference."""
    section = top.section(key)
    fields: dict[str, Any] = {}
    port = 0
    for name in section.table:
        lowered = name.lower()
        if lowered == "listen":
            host, port = section.address(name)
            if host is not None:
                fields["host"] = host
        elif lowered == "port":
            port = section.integer(name)
        elif lowered in ("host", "net"):
            fields["host"] = section.string(name)
        elif lowered == "tls":
            fields["tls"] = _unpinned_tls(section, name)
        elif lowered in ("authorization", "authentication"):
            fields.update(single_user_authorization(section, name, token=True))
        elif lowered == "no_auth_user":
            fields["no_auth_user"] = section.string(name)
        elif lowered in _MQTT_DURATIONS:
            fields[_MQTT_DURATIONS[lowered]] = section.duration(name)
        elif lowered in ("max_ack_pending", "max_pending", "max_inflight"):
            value = section.integer(name)
            if not 0 <= value <= 0xFFFF:
                raise section.error(name, f"invalid value {value}, should in [0..65535] range")
            fields["max_ack_pending"] = value
        elif lowered == "stream_replicas":
            fields["stream_replicas"] = section.integer(name)
        elif lowered in (
            "consumer_memory_storage",
            "reject_qos2_publish",
            "downgrade_qos2_subscribe",
        ):
            fields[lowered] = section.boolean(name)
        elif lowered == "consumer_replicas":
            section.warn(name, "consumer replicas setting ignored in this server version")
        else:
            section.unknown(name)
    out["mqtt"] = MQTTConfig(port=0 if port == -1 else port, **fields) if port else None


_MQTT_DURATIONS = {
    "ack_wait": "ack_wait",
    "ackwait": "ack_wait",
    "js_api_timeout": "js_api_timeout",
    "api_timeout": "js_api_timeout",
    "consumer_inactive_threshold": "consumer_inactive_threshold",
    "consumer_auto_cleanup": "consumer_inactive_threshold",
}


_Handler = Callable[[Section, str, dict[str, Any]], None]


def _accounts(section: Section, key: str, out: dict[str, Any]) -> None:
    taken = {user.user for user in out.get("users", ())}
    out["accounts"] = read_accounts(section, key, _users, taken)


def _setter(target: str, read: Callable[[Section, str], Any]) -> _Handler:
    def handle(section: Section, key: str, out: dict[str, Any]) -> None:
        out[target] = read(section, key)

    return handle


def _error_reports(default: int) -> _Handler:
    """One failed dial in N logged as an error; 0 means the default, as the reference."""

    def handle(section: Section, key: str, out: dict[str, Any]) -> None:
        out[key] = abs(section.integer(key)) or default

    return handle


def _listen(section: Section, key: str, out: dict[str, Any]) -> None:
    host, port = section.address(key)
    if host is not None:
        out["host"] = host
    out["port"] = bind_port(port)


def _http(section: Section, key: str, out: dict[str, Any]) -> None:
    host, port = section.address(key)
    if host is not None:
        out["http_host"] = host
    out["http_port"] = monitor_port(port)


def _store_dir(section: Section, key: str, out: dict[str, Any]) -> None:
    if out["jetstream"].get("store_dir"):
        raise section.error(key, "Duplicate 'store_dir' configuration")
    out["jetstream"] = {**out["jetstream"], "store_dir": section.string(key)}


def _max_connections(section: Section, key: str, out: dict[str, Any]) -> None:
    # The reference reads 0 as "no client may connect", stored as -1.
    out["max_connections"] = section.integer(key) or -1


def _lame_duck(minimum: float | None) -> _Handler:
    def handle(section: Section, key: str, out: dict[str, Any]) -> None:
        text = section.string(key)
        try:
            seconds = parse_duration(text)
        except ValueError as exc:
            raise section.error(key, f"error parsing {key}: {exc}") from exc
        if minimum is not None and seconds < minimum:
            raise section.error(key, f"invalid {key} of {text}, minimum is {minimum:g} seconds")
        if minimum is None and seconds < 0:
            raise section.error(key, f"invalid {key}, needs to be positive")
        out[key.lower()] = seconds

    return handle


_TOP_LEVEL: dict[str, _Handler] = {
    "listen": _listen,
    "host": _setter("host", Section.string),
    "net": _setter("host", Section.string),
    "port": lambda s, k, out: out.update(port=bind_port(s.integer(k))),
    "http": _http,
    "http_port": lambda s, k, out: out.update(http_port=monitor_port(s.integer(k))),
    "monitor_port": lambda s, k, out: out.update(http_port=monitor_port(s.integer(k))),
    "server_name": _setter("server_name", _server_name),
    "server_tags": _setter("server_tags", _server_tags),
    "max_payload": _setter("max_payload", _int32),
    "max_control_line": _setter("max_control_line", _int32),
    "max_pending": _setter("max_pending", Section.integer),
    "max_connections": _max_connections,
    "max_conn": _max_connections,
    "ping_interval": _setter("ping_interval", Section.duration),
    "ping_max": _setter("ping_max", Section.integer),
    "connect_error_reports": _error_reports(3600),
    "reconnect_error_reports": _error_reports(1),
    "write_deadline": _setter("write_deadline", Section.duration),
    "busy_poll": _setter("busy_poll", Section.duration),  # jetlake's own
    "lame_duck_duration": _lame_duck(30.0),
    "lame_duck_grace_period": _lame_duck(None),
    "authorization": _authorization,
    "no_auth_user": _setter("no_auth_user", Section.string),
    "tls": lambda s, k, out: out.update(tls=_tls(s, k)),
    "resolver_tls": lambda s, k, out: out.update(resolver_tls=_tls(s, k)),
    "jetstream": _jetstream,
    "lake": read_lake,
    "cluster": lambda s, k, out: out.update(cluster=read_cluster(s, k, tls=_tls)),
    "leafnodes": lambda s, k, out: out.update(leafnodes=read_leafnodes(s, k, tls=_tls)),
    "leaf": lambda s, k, out: out.update(leafnodes=read_leafnodes(s, k, tls=_tls)),
    "mappings": lambda s, k, out: out.update(mappings=read_mappings(s, k)),
    "accounts": _accounts,
    "system_account": _setter("system_account", Section.string),
    "system": _setter("system_account", Section.string),
    "operator": auth_config.operators,
    "operators": auth_config.operators,
    "resolver": auth_config.resolver,
    "resolver_preload": auth_config.resolver_preload,
    "mqtt": _mqtt,
    "websocket": lambda s, k, out: out.update(websocket=read_websocket(s, k, tls=_unpinned_tls)),
    "ws": lambda s, k, out: out.update(websocket=read_websocket(s, k, tls=_unpinned_tls)),
    "store_dir": _store_dir,
    "storedir": _store_dir,
    "debug": _setter("debug", Section.boolean),
    "trace": _setter("trace", Section.boolean),
    "logtime": _setter("logtime", Section.boolean),
    "logtime_utc": _setter("logtime_utc", Section.boolean),
    "logfile": _setter("logfile", Section.string),
    "log_file": _setter("logfile", Section.string),
    "pidfile": _setter("pid_file", Section.string),
    "pid_file": _setter("pid_file", Section.string),
}


def blank_fields() -> dict[str, Any]:
    return {"jetstream": {}, "lake": {}, "warnings": []}


def digest(table: Table) -> str:
    """The reference's `config_digest`: SHA-256 of the values as Go's JSON encoder writes
    them (keys sorted, HTML characters escaped, a newline after), so the same file gives
    the same digest on both kinds and a fleet's config drift shows in /varz."""
    text = json.dumps(table, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in _GO_ESCAPES:
        text = text.replace(char, escaped)
    return "sha256:" + hashlib.sha256(text.encode() + b"\n").hexdigest()


_GO_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)


def apply_table(table: Table, file: str | None, out: dict[str, Any]) -> None:
    section = Section(table, out["warnings"])
    if not table:
        out["warnings"].append(f"{file}: config has no values or is empty")
    for key in table:
        handler = _TOP_LEVEL.get(key.lower())
        if handler is None:
            section.unknown(key)
        else:
            handler(section, key, out)
    out["config_file"] = file
    out["config_digest"] = digest(table) if file else ""
