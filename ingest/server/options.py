"""Options of `jetlake serve`: nats-server's flags and config file, merged.

Operators switch servers without rewriting their files or scripts, so a key
means here what it means to nats-server: same aliases, same defaults, the same
quirks where a file depends on them (a bare `2m` is two million, an integer
duration counts seconds and earns a warning, `port: 0` is the default port and
`-1` a free one). Keys the reference knows but jetlake does not implement are
refused rather than silently ignored, except the sections later features read
from `Options.extra`.

Pipeline: config file -> field dict -> explicit flags override -> defaults
filled in -> frozen `Options`. Wording of errors follows the reference so that
scripts grepping its messages keep working.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ingest.parser.conf import ConfigError, Loader, Table, parse_file
from ingest.parser.subjects import is_valid_subject

__all__ = [
    "ConfigError",
    "FlagError",
    "JetStreamConfig",
    "Options",
    "Permissions",
    "SubjectPermission",
    "TLSConfig",
    "User",
    "load_config",
    "parse_duration",
    "parse_serve_args",
    "validate_options",
]

DEFAULT_PORT = 4222
DEFAULT_AUTH_TIMEOUT = 2.0
DEFAULT_TLS_TIMEOUT = 2.0
HANDSHAKE_FIRST_FALLBACK = 0.05
DEFAULT_SYNC_INTERVAL_NS = 120 * 10**9
MAX_INT32 = 2**31 - 1
# Sections the reference does not know but jetlake features read themselves.
EXTRA_SECTIONS = frozenset({"lake", "mqtt"})


@dataclass(frozen=True, slots=True, kw_only=True)
class SubjectPermission:
    """Empty `allow` means no allow-list: everything not denied is permitted."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Permissions:
    publish: SubjectPermission | None = None
    subscribe: SubjectPermission | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class User:
    user: str
    password: str | None = None
    permissions: Permissions | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TLSConfig:
    cert_file: str | None = None
    key_file: str | None = None
    ca_file: str | None = None
    verify: bool = False
    handshake_first: bool = False
    # Seconds to wait for a client's TLS hello before falling back to INFO first.
    handshake_first_fallback: float | None = None
    timeout: float = DEFAULT_TLS_TIMEOUT


@dataclass(frozen=True, slots=True, kw_only=True)
class JetStreamConfig:
    enabled: bool = False
    store_dir: str | None = None
    max_memory_store: int = -1  # -1: sized from the machine, as the reference does
    max_file_store: int = -1
    sync_interval_ns: int | None = DEFAULT_SYNC_INTERVAL_NS  # None: fsync always


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """Everything `serve` needs; durations are float seconds, ports are bind ports."""

    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT  # 0: let the OS pick (the user asked for -1)
    http_host: str | None = None  # None: same as host
    http_port: int | None = None  # None: monitoring off; 0: a free port
    server_name: str | None = None  # None: the server ID will name it
    max_payload: int = 1024 * 1024
    max_connections: int = 64 * 1024  # negative: every client is refused
    max_control_line: int = 4096
    max_pending: int = 64 * 1024 * 1024
    ping_interval: float = 120.0
    ping_max: int = 2
    write_deadline: float = 10.0
    lame_duck_duration: float = 120.0
    lame_duck_grace_period: float = 10.0
    auth_token: str | None = None
    username: str | None = None
    password: str | None = None
    users: tuple[User, ...] = ()
    no_auth_user: str | None = None
    auth_timeout: float = DEFAULT_AUTH_TIMEOUT
    tls: TLSConfig | None = None
    jetstream: JetStreamConfig = field(default_factory=JetStreamConfig)
    debug: bool = False
    trace: bool = False
    logtime: bool = True
    logtime_utc: bool = False
    logfile: str | None = None
    pid_file: str | None = None
    config_file: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Config warnings, already formatted; the reference prints them and goes on.
    warnings: tuple[str, ...] = ()
    check_config: bool = False
    show_help: bool = False
    show_version: bool = False


# -- durations and sizes -----------------------------------------------------

_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Go's duration syntax (`1h30m`, `100ms`, `-2s`, `0`) in seconds."""
    body = text.lstrip("+-")
    sign = -1.0 if text.startswith("-") else 1.0
    if body == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(body) and (match := _DURATION_PART.match(body, pos)):
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if not body or pos != len(body) or len(text) - len(body) > 1:
        raise ValueError(f'time: invalid duration "{text}"')
    return sign * total


def _go_duration(seconds: float) -> str:
    return f"{seconds:g}s"


_STORAGE_SHIFT = {"K": 10, "M": 20, "G": 30, "T": 40}


def _storage_size(value: str) -> int:
    """JetStream limits as strings: digits and one of K M G T, binary multiples."""
    if not value:
        return 0
    digits, suffix = value[:-1], value[-1]
    if suffix not in _STORAGE_SHIFT:
        raise ValueError("sizes defined as strings must end in K, M, G, T")
    if not re.fullmatch(r"[-+]?\d{1,18}", digits):
        raise ValueError(f"can not parse {value!r} as a size")
    return int(digits) << _STORAGE_SHIFT[suffix]


# -- typed access to a table ------------------------------------------------

_TYPE_NAMES = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array"}


def _describe(value: Any) -> str:
    if isinstance(value, Table):
        return "map"
    if isinstance(value, datetime):
        return "date"
    return f"{_TYPE_NAMES.get(type(value), type(value).__name__)} {value!r}"


class _Section:
    """One table being interpreted, reporting problems at the key's position."""

    def __init__(self, table: Table, warnings: list[str]) -> None:
        self.table = table
        self.warnings = warnings

    def error(self, key: str, reason: str) -> ConfigError:
        return ConfigError(reason, self.table.position(key))

    def warn(self, key: str, reason: str) -> None:
        self.warnings.append(f'{self.table.position(key)}: invalid use of field "{key}": {reason}')

    def unknown(self, key: str) -> None:
        if key not in self.table.variables:
            raise self.error(key, f'unknown field "{key}"')

    def typed(self, key: str, kind: type | tuple[type, ...], name: str) -> Any:
        value = self.table[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise self.error(key, f'expected {name} for "{key}", got {_describe(value)}')
        return value

    def integer(self, key: str) -> int:
        return self.typed(key, int, "an integer")

    def string(self, key: str) -> str:
        return self.typed(key, str, "a string")

    def boolean(self, key: str) -> bool:
        return self.typed(key, bool, "a boolean")

    def section(self, key: str) -> _Section:
        table = self.typed(key, Table, "a map")
        return _Section(table, self.warnings)

    def duration(self, key: str) -> float:
        """A duration string, or (warned) a number of seconds."""
        value = self.typed(key, (str, int), "a duration")
        if isinstance(value, int):
            self.warn(key, f"{key} should be converted to a duration")
            return float(value)
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise self.error(key, f"error parsing {key}: {exc}") from exc

    def timeout(self, key: str, context: str) -> float:
        """Seconds as an int, a float, or a duration string."""
        value = self.typed(key, (int, float, str), "a number of seconds or a duration")
        if not isinstance(value, str):
            return float(value)
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise self.error(key, f"error parsing {context}, 'timeout' {exc}") from exc

    def subjects(self, key: str, *, queue: bool) -> tuple[str, ...]:
        value = self.table[key]
        items = value if isinstance(value, list) else [value]
        for subject in items:
            if not isinstance(subject, str):
                raise self.error(key, "Subject in permissions array cannot be cast to string")
            literal, _, group = subject.partition(" ") if queue else (subject, "", "")
            if not is_valid_subject(literal) or (group and not is_valid_subject(group)):
                raise self.error(key, f'subject "{subject}" is not a valid subject')
        return tuple(items)


# -- config file keys ----------------------------------------------------------


def _hostport(section: _Section, key: str) -> tuple[str | None, int]:
    value = section.typed(key, (int, str), "a port or host:port")
    if isinstance(value, int):
        return None, value
    host, sep, port = value.rpartition(":")
    if not sep or not port.lstrip("-").isdigit() or (":" in host and not host.startswith("[")):
        raise section.error(key, f'could not parse address string "{value}"')
    return host.strip("[]"), int(port)


def _bind_port(raw: int) -> int:
    return DEFAULT_PORT if raw == 0 else 0 if raw == -1 else raw


def _monitor_port(raw: int) -> int | None:
    return None if raw == 0 else 0 if raw == -1 else raw


def _subject_permission(section: _Section, key: str, *, queue: bool) -> SubjectPermission:
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


def _permissions(parent: _Section, key: str) -> Permissions:
    section = parent.section(key)
    found: dict[str, SubjectPermission] = {}
    for name in section.table:
        lowered = name.lower()
        if lowered in ("pub", "publish", "import"):
            found["publish"] = _subject_permission(section, name, queue=False)
        elif lowered in ("sub", "subscribe", "export"):
            found["subscribe"] = _subject_permission(section, name, queue=True)
        elif name not in section.table.variables:
            raise section.error(name, f'Unknown field "{name}" parsing permissions')
    return Permissions(**found)


def _users(parent: _Section, key: str, defaults: Permissions | None) -> list[User]:
    entries = parent.typed(key, list, "an array of users")
    users: list[User] = []
    for entry in entries:
        if not isinstance(entry, Table):
            raise parent.error(key, f"Expected user entry to be a map/struct, got {entry!r}")
        section = _Section(entry, parent.warnings)
        fields: dict[str, Any] = {}
        for name in entry:
            lowered = name.lower()
            if lowered in ("user", "username"):
                fields["user"] = section.string(name)
            elif lowered in ("pass", "password"):
                fields["password"] = section.string(name)
            elif lowered in ("permission", "permissions", "authorization"):
                fields["permissions"] = _permissions(section, name)
            elif lowered == "nkey":
                raise section.error(name, "nkey users are not supported by jetlake")
            else:
                section.unknown(name)
        if "user" not in fields:
            raise parent.error(key, "User entry requires a user")
        fields.setdefault("permissions", defaults)
        users.append(User(**fields))
    return users


def _authorization(top: _Section, key: str, out: dict[str, Any]) -> None:
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
        for user in users:
            if user.user in seen:
                raise top.error(key, f'Duplicate user "{user.user}" detected')
            seen.add(user.user)
        out["users"] = tuple(users)


def _tls(top: _Section, key: str) -> TLSConfig:
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
        elif lowered == "verify":
            if not isinstance(section.table[name], bool):
                raise section.error(
                    name, "error parsing tls config, expected 'verify' to be a boolean"
                )
            fields["verify"] = section.table[name]
        elif lowered == "timeout":
            fields["timeout"] = section.timeout(name, "tls config")
        elif lowered in ("handshake_first", "first", "immediate"):
            fields.update(_handshake_first(section, name))
        else:
            raise section.error(name, f'error parsing tls config, unknown field "{name}"')
    return TLSConfig(**fields)


def _handshake_first(section: _Section, name: str) -> dict[str, Any]:
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


def _jetstream(top: _Section, key: str, out: dict[str, Any]) -> None:
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


def _jetstream_key(section: _Section, name: str, out: dict[str, Any]) -> dict[str, Any]:
    lowered = name.lower()
    value = section.table[name]
    if lowered in ("store", "store_dir", "storedir"):
        if out["jetstream"].get("store_dir"):
            raise section.error(name, "Duplicate 'store_dir' configuration")
        return {"store_dir": section.string(name)}
    if lowered in ("sync", "sync_interval"):
        if isinstance(value, str) and value.lower() == "always":
            return {"sync_interval_ns": None}
        return {"sync_interval_ns": round(section.duration(name) * 1e9)}
    if lowered in ("max_memory_store", "max_mem_store", "max_mem", "max_file_store", "max_file"):
        label = "max_file_store" if "file" in lowered else "max_mem_store"
        field_name = "max_file_store" if "file" in lowered else "max_memory_store"
        if isinstance(value, int) and not isinstance(value, bool):
            return {field_name: value}
        if not isinstance(value, str):
            raise section.error(name, f"{label} must be int64 or string")
        try:
            return {field_name: _storage_size(value)}
        except ValueError as exc:
            raise section.error(name, f"{label} {exc}") from exc
    if lowered in ("enable", "enabled"):
        return {"enabled": section.boolean(name)}
    section.unknown(name)
    return {}


def _int32(section: _Section, key: str) -> int:
    value = section.integer(key)
    if value > MAX_INT32:
        raise section.error(key, f"{key} value is too big")
    return value


def _server_name(section: _Section, key: str) -> str:
    name = section.string(key)
    if " " in name:
        raise section.error(key, "server name cannot contain spaces")
    return name


_Handler = Callable[[_Section, str, dict[str, Any]], None]


def _setter(target: str, read: Callable[[_Section, str], Any]) -> _Handler:
    def handle(section: _Section, key: str, out: dict[str, Any]) -> None:
        out[target] = read(section, key)

    return handle


def _listen(section: _Section, key: str, out: dict[str, Any]) -> None:
    host, port = _hostport(section, key)
    if host is not None:
        out["host"] = host
    out["port"] = _bind_port(port)


def _http(section: _Section, key: str, out: dict[str, Any]) -> None:
    host, port = _hostport(section, key)
    if host is not None:
        out["http_host"] = host
    out["http_port"] = _monitor_port(port)


def _store_dir(section: _Section, key: str, out: dict[str, Any]) -> None:
    if out["jetstream"].get("store_dir"):
        raise section.error(key, "Duplicate 'store_dir' configuration")
    out["jetstream"] = {**out["jetstream"], "store_dir": section.string(key)}


def _max_connections(section: _Section, key: str, out: dict[str, Any]) -> None:
    # The reference reads 0 as "no client may connect", stored as -1.
    out["max_connections"] = section.integer(key) or -1


def _extra(section: _Section, key: str, out: dict[str, Any]) -> None:
    out["extra"] = {**out["extra"], key.lower(): section.table[key]}


def _lame_duck(minimum: float | None) -> _Handler:
    def handle(section: _Section, key: str, out: dict[str, Any]) -> None:
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
    "host": _setter("host", _Section.string),
    "net": _setter("host", _Section.string),
    "port": lambda s, k, out: out.update(port=_bind_port(s.integer(k))),
    "http": _http,
    "http_port": lambda s, k, out: out.update(http_port=_monitor_port(s.integer(k))),
    "monitor_port": lambda s, k, out: out.update(http_port=_monitor_port(s.integer(k))),
    "server_name": _setter("server_name", _server_name),
    "max_payload": _setter("max_payload", _int32),
    "max_control_line": _setter("max_control_line", _int32),
    "max_pending": _setter("max_pending", _Section.integer),
    "max_connections": _max_connections,
    "max_conn": _max_connections,
    "ping_interval": _setter("ping_interval", _Section.duration),
    "ping_max": _setter("ping_max", _Section.integer),
    "write_deadline": _setter("write_deadline", _Section.duration),
    "lame_duck_duration": _lame_duck(30.0),
    "lame_duck_grace_period": _lame_duck(None),
    "authorization": _authorization,
    "no_auth_user": _setter("no_auth_user", _Section.string),
    "tls": lambda s, k, out: out.update(tls=_tls(s, k)),
    "jetstream": _jetstream,
    "store_dir": _store_dir,
    "storedir": _store_dir,
    "debug": _setter("debug", _Section.boolean),
    "trace": _setter("trace", _Section.boolean),
    "logtime": _setter("logtime", _Section.boolean),
    "logtime_utc": _setter("logtime_utc", _Section.boolean),
    "logfile": _setter("logfile", _Section.string),
    "log_file": _setter("logfile", _Section.string),
    "pidfile": _setter("pid_file", _Section.string),
    "pid_file": _setter("pid_file", _Section.string),
    **dict.fromkeys(EXTRA_SECTIONS, _extra),
}


def _blank_fields() -> dict[str, Any]:
    return {"jetstream": {}, "extra": {}, "warnings": []}


def _apply_table(table: Table, file: str | None, out: dict[str, Any]) -> None:
    section = _Section(table, out["warnings"])
    if not table:
        out["warnings"].append(f"{file}: config has no values or is empty")
    for key in table:
        handler = _TOP_LEVEL.get(key.lower())
        if handler is None:
            section.unknown(key)
        else:
            handler(section, key, out)
    out["config_file"] = file


def _finish(out: dict[str, Any]) -> Options:
    """Fill the defaults that depend on other settings, then freeze."""
    fields = dict(out)
    fields["jetstream"] = JetStreamConfig(**fields["jetstream"])
    fields["warnings"] = tuple(fields["warnings"])
    tls: TLSConfig | None = fields.get("tls")
    if "auth_timeout" not in fields and tls is not None:
        fields["auth_timeout"] = tls.timeout + 1.0
    return Options(**fields)


def load_config(path: str, *, loader: Loader | None = None) -> Options:
    """Options from a config file alone, as `nats-server -c path -t` judges it."""
    out = _blank_fields()
    _apply_table(parse_file(path, loader=loader), path, out)
    return _finish(out)


# -- command line ---------------------------------------------------------------


class FlagError(Exception):
    """A command line the reference answers with this message, its usage text and
    exit status 0 (its usage printer exits successfully, even after a bad flag)."""


@dataclass(slots=True)
class _Flags:
    values: dict[str, Any] = field(default_factory=dict)  # explicit settings, in order
    config_file: str | None = None
    check_config: bool = False
    show_help: bool = False
    show_version: bool = False


# flag name -> (setting, kind); several spellings share a setting as in the reference.
_FLAG_SPECS: dict[str, tuple[str, type]] = {
    **dict.fromkeys(("p", "port"), ("port", int)),
    **dict.fromkeys(("a", "addr", "net"), ("host", str)),
    **dict.fromkeys(("n", "name", "server_name"), ("server_name", str)),
    **dict.fromkeys(("m", "http_port"), ("http_port", int)),
    **dict.fromkeys(("c", "config"), ("config", str)),
    **dict.fromkeys(("D", "debug"), ("debug", bool)),
    **dict.fromkeys(("V", "trace"), ("trace", bool)),
    **dict.fromkeys(("l", "log"), ("log", str)),
    **dict.fromkeys(("P", "pid"), ("pid_file", str)),
    **dict.fromkeys(("js", "jetstream"), ("jetstream", bool)),
    **dict.fromkeys(("sd", "store_dir"), ("store_dir", str)),
    **dict.fromkeys(("h", "help"), ("help", bool)),
    **dict.fromkeys(("v", "version"), ("version", bool)),
    "t": ("check", bool),
    "DV": ("DV", bool),
    "user": ("user", str),
    "pass": ("pass", str),
    "auth": ("auth", str),
    "tls": ("tls", bool),
    "tlsverify": ("tlsverify", bool),
    "tlscert": ("tlscert", str),
    "tlskey": ("tlskey", str),
    "tlscacert": ("tlscacert", str),
}
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def _go_int(text: str, flag: str) -> int:
    """Go's base-0 integer syntax: 42, -1, 0x2a, 0o52, 052, 0b101010."""
    try:
        number = int(text, 8) if re.fullmatch(r"[-+]?0[0-7]+", text) else int(text, 0)
    except ValueError:
        raise FlagError(f'invalid value "{text}" for flag -{flag}: parse error') from None
    if not -(2**63) <= number < 2**63:
        raise FlagError(f'invalid value "{text}" for flag -{flag}: value out of range')
    return number


def _parse_flags(argv: list[str]) -> _Flags:
    """Go `flag` package rules: `-f`, `--f`, `-f=v`, `-f v`; stop at `--` or a word."""
    parsed = _Flags()
    args = list(argv)
    while args and args[0].startswith("-") and args[0] != "-":
        arg = args.pop(0)
        if arg == "--":
            break
        body = arg[2:] if arg.startswith("--") else arg[1:]
        if not body or body[0] in "-=":
            raise FlagError(f"bad flag syntax: {arg}")
        name, has_value, value = body.partition("=")
        if name not in _FLAG_SPECS:
            raise FlagError(f"flag provided but not defined: -{name}")
        setting, kind = _FLAG_SPECS[name]
        result: Any
        if kind is bool:
            if has_value and value not in _GO_TRUE | _GO_FALSE:
                raise FlagError(f'invalid boolean value "{value}" for -{name}: parse error')
            result = not has_value or value in _GO_TRUE
        else:
            if not has_value:
                if not args:
                    raise FlagError(f"flag needs an argument: -{name}")
                value = args.pop(0)
            result = _go_int(value, name) if kind is int else value
        _record_flag(parsed, setting, result)
    if args:
        command = args[0].lower()
        if command not in ("version", "help"):
            raise ConfigError(f'unrecognized command: "{args[0]}"')
        parsed.show_version |= command == "version"
        parsed.show_help |= command == "help"
    return parsed


def _record_flag(parsed: _Flags, setting: str, value: Any) -> None:
    if setting == "config":
        parsed.config_file = value
    elif setting == "check":
        parsed.check_config = value
    elif setting == "help":
        parsed.show_help = value
    elif setting == "version":
        parsed.show_version = value
    elif setting == "DV":
        parsed.values.update(debug=value, trace=value)
    else:
        parsed.values[setting] = value


def _apply_flags(flags: dict[str, Any], out: dict[str, Any]) -> None:
    """Explicit flags win over the file, as the reference re-reads them after it."""
    renames = {"user": "username", "pass": "password", "auth": "auth_token", "log": "logfile"}
    for name, value in flags.items():
        if name == "port":
            out["port"] = _bind_port(value)
        elif name == "http_port":
            out["http_port"] = _monitor_port(value)
        elif name in ("host", "server_name", "debug", "trace", "pid_file"):
            out[name] = value
        elif name in renames:
            out[renames[name]] = value
        elif name == "jetstream":
            out["jetstream"] = {**out["jetstream"], "enabled": value}
        elif name == "store_dir":
            out["jetstream"] = {**out["jetstream"], "store_dir": value}
    _apply_tls_flags(flags, out)


def _apply_tls_flags(flags: dict[str, Any], out: dict[str, Any]) -> None:
    if flags.get("tls") is False:
        out["tls"] = None  # `-tls=false` switches off TLS from the file
        return
    if not any(name.startswith("tls") for name in flags):
        return
    if not flags.get("tlscert"):
        raise ConfigError("TLS Server certificate must be present and valid")
    if not flags.get("tlskey"):
        raise ConfigError("TLS Server private key must be present and valid")
    out["tls"] = TLSConfig(
        cert_file=flags["tlscert"],
        key_file=flags["tlskey"],
        ca_file=flags.get("tlscacert"),
        verify=bool(flags.get("tlsverify")),
    )


def parse_serve_args(argv: list[str], *, loader: Loader | None = None) -> Options:
    """Flags and config file merged and validated, ready to start a server.

    Raises `FlagError` for what the reference answers with its usage text and
    `ConfigError` for a config or a combination it refuses to start with.
    """
    parsed = _parse_flags(argv)
    if parsed.show_help or parsed.show_version:
        return Options(show_help=parsed.show_help, show_version=parsed.show_version)
    out = _blank_fields()
    if parsed.config_file:
        _apply_table(parse_file(parsed.config_file, loader=loader), parsed.config_file, out)
    elif parsed.check_config:
        raise ConfigError("must specify [-c, --config] option to check configuration file syntax")
    if parsed.check_config:
        if out["warnings"]:  # `-t` treats warnings as failures
            raise ConfigError("\n".join(out["warnings"]))
        return dataclasses.replace(_finish(out), check_config=True)
    _apply_flags(parsed.values, out)
    options = _finish(out)
    validate_options(options)
    return options


# -- start-time checks ------------------------------------------------------------

_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    labels = host.rstrip(".").split(".")
    if not host or len(host) > 253 or labels[-1].isdigit():
        return False  # an all-numeric top label is a mistyped IPv4 address
    return all(_HOST_LABEL.fullmatch(label) for label in labels)


def validate_options(opts: Options) -> None:
    """What the reference refuses when the server is created or starts listening."""
    for label, host in (("host", opts.host), ("http host", opts.http_host)):
        if host is not None and not _valid_host(host):
            raise ConfigError(f'invalid {label} address "{host}"')
    for label, port in (("port", opts.port), ("http port", opts.http_port)):
        if port is not None and not 0 <= port <= 65535:
            raise ConfigError(f"invalid {label} {port}")
    if opts.lame_duck_grace_period >= opts.lame_duck_duration:
        raise ConfigError(
            f"lame duck grace period ({_go_duration(opts.lame_duck_grace_period)}) should be "
            f"strictly lower than lame duck duration ({_go_duration(opts.lame_duck_duration)})"
        )
    if opts.max_payload > opts.max_pending:
        raise ConfigError(
            f"max_payload ({opts.max_payload}) cannot be higher than "
            f"max_pending ({opts.max_pending})"
        )
    if opts.server_name is not None and " " in opts.server_name:
        raise ConfigError("server name cannot contain spaces")
    if opts.no_auth_user is not None:
        if not opts.users:
            raise ConfigError(
                f'no_auth_user: "{opts.no_auth_user}" present, but users/nkeys are not defined'
            )
        if all(user.user != opts.no_auth_user for user in opts.users):
            raise ConfigError(
                f'no_auth_user: "{opts.no_auth_user}" not present as user or nkey in '
                "authorization block or account configuration"
            )
