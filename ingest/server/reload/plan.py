"""What a config reload would change, and whether it may: old settings against new ones.

Pure: two frozen `Options` in, a `Plan` out or `ReloadRefused` with the reference's
message (`config reload not supported for …`). Fields are visited in the order of
the reference's own Options struct, so when several unreloadable keys changed the
same one is named first. A key missing from every table below is refused, so a
setting added later is safe until someone decides it can change at run time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ingest.server.gofmt import friendly_bytes, go_duration
from ingest.server.gofmt import go_value as _go
from ingest.server.leafnode.reload import LeafReloadRefused, remote_changes
from ingest.server.settings import Options


class ReloadRefused(Exception):
    """A change the running server cannot take; the old configuration stays in force."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What the apply step redoes; `notices` are the reference's `Reloaded: …` lines."""

    notices: tuple[str, ...] = ()
    logging: bool = False  # debug, trace, log file, timestamps
    auth: bool = False  # users, permissions, accounts, tokens: re-check every client
    cluster: bool = False  # route credentials or route TLS
    routes: bool = False  # the explicit routes: dial the added, close the removed
    preloads: bool = False  # `resolver_preload`: take the new and changed account JWTs
    jetstream_limits: bool = False  # raised `max_memory_store` / `max_file_store`
    mqtt: bool = False  # the MQTT consumers' settings, for consumers made from now on
    leafnode_remotes: bool = False  # remotes removed, added or changed; TLS, compression
    pid_file: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.notices)


# Our field -> the reference's Options field, in the reference's order.
_GO_NAMES: dict[str, str] = {
    "server_name": "ServerName",
    "host": "Host",
    "port": "Port",
    "trace": "Trace",
    "debug": "Debug",
    "logtime": "Logtime",
    "logtime_utc": "LogtimeUTC",
    "max_connections": "MaxConn",
    "users": "Users",
    "accounts": "Accounts",
    "no_auth_user": "NoAuthUser",
    "system_account": "SystemAccount",
    "username": "Username",
    "password": "Password",
    "auth_token": "Authorization",
    "ping_interval": "PingInterval",
    "ping_max": "MaxPingsOut",
    "http_host": "HTTPHost",
    "http_port": "HTTPPort",
    "auth_timeout": "AuthTimeout",
    "max_control_line": "MaxControlLine",
    "max_payload": "MaxPayload",
    "max_pending": "MaxPending",
    "cluster": "Cluster",
    "leafnodes": "LeafNode",
    "jetstream": "JetStream",
    "mqtt": "MQTT",
    "pid_file": "PidFile",
    "logfile": "LogFile",
    "tls": "TLSConfig",
    "write_deadline": "WriteDeadline",
    "lame_duck_duration": "LameDuckDuration",
    "lame_duck_grace_period": "LameDuckGracePeriod",
    "operators": "TrustedOperators",
    "resolver": "AccountResolver",
    "resolver_preload": "AccountResolver",
    "server_tags": "Tags",
    # jetlake's own settings, after the reference's
    "mappings": "Mappings",
    "busy_poll": "BusyPoll",
    "lake": "Lake",
}
# Not settings of the running server: how it was started, or what parsing found.
_IGNORED = frozenset(
    (
        "warnings",
        "config_file",
        "config_digest",
        "check_config",
        "show_help",
        "show_version",
        "signal",
    )
)
_LOGGING = {
    "trace": "trace",
    "debug": "debug",
    "logtime": "logtime",
    "logtime_utc": "logtime_utc",
    "logfile": "log_file",
}
# Read from the options whenever used: new connections and timers take the new value.
_PLAIN = {
    "max_connections": "max_connections",
    "max_control_line": "max_control_line",
    "max_payload": "max_payload",
    "ping_max": "ping_max",
}
_DURATIONS = {"ping_interval": "ping_interval", "write_deadline": "write_deadline"}
_AUTH = {
    "users": "authorization users",
    "username": "authorization username",
    "password": "authorization password",
    "auth_token": "authorization token",
    "accounts": "accounts",
    "mappings": "accounts",
}
_CLUSTER_RELOADABLE = frozenset(("username", "password", "auth_timeout", "tls", "routes"))
_OTHERS = (
    "auth_timeout",
    "no_auth_user",
    "server_tags",
    "pid_file",
    "tls",
    "cluster",
    "resolver_preload",
)
_FIELDS = (*_LOGGING, *_PLAIN, *_DURATIONS, *_AUTH, *_OTHERS)
_MQTT = (
    "ack_wait",
    "max_ack_pending",
    "stream_replicas",
    "consumer_memory_storage",
    "consumer_inactive_threshold",
)
_JS_LIMITS = {"max_memory_store": "max_mem_store", "max_file_store": "max_file_store"}
_JS_LIVE = ("default_max_consumers",)  # read at each consumer create: any change reloads
_IN_AUTHORIZATION = frozenset(("users", "username", "password", "auth_token", "auth_timeout"))

# The keys of the configuration reference whose change a running server takes, by
# section (`ingest/server/reference/render.py` writes its `reloads` column from this).
# Top-level keys come from the tables above; `cluster` reloads its credentials, TLS and
# routes only, and a key of a section below reloads with it.
RELOADS: dict[str, frozenset[str]] = {
    "top-level": frozenset(
        "authorization" if name in _IN_AUTHORIZATION else name
        for name in _FIELDS
        if name != "cluster"
    ),
    "authorization": frozenset(("user", "password", "token", "timeout", "users")),
    "authorization.users": frozenset(("user", "password", "permissions", "nkey")),
    "permissions": frozenset(("publish", "subscribe", "allow", "deny", "allow_responses")),
    "tls": frozenset(("cert_file", "key_file", "ca_file", "verify", "timeout")),
    "cluster": frozenset(("authorization", "tls", "routes")),
    "cluster.authorization": frozenset(("user", "password", "timeout")),
    "jetstream": frozenset(_JS_LIMITS),  # raised only
    "jetstream.limits": frozenset(_JS_LIVE),
    "mqtt": frozenset((*_MQTT, "tls")),
    "leafnodes": frozenset(("remotes", "tls", "compression")),
    "leafnodes.remotes": frozenset(("tls", "compression")),
    "leafnodes.compression": frozenset(("mode", "rtt_thresholds")),
    "accounts.NAME": frozenset(("users", "exports", "imports", "limits", "jetstream")),
    "accounts.NAME.exports": frozenset(
        ("stream", "service", "accounts", "response_type", "response_threshold", "latency")
    ),
    "accounts.NAME.imports": frozenset(("stream", "service", "prefix", "to")),
    "accounts.NAME.jetstream": frozenset(
        [
            "max_memory",
            "max_file",
            "max_streams",
            "max_consumers",
            "max_ack_pending",
            "max_bytes_required",
            "mem_max_stream_bytes",
            "disk_max_stream_bytes",
        ]
    ),
    "accounts.NAME.limits": frozenset(
        ("max_connections", "max_subscriptions", "max_payload", "max_leafnodes")
    ),
}


def plan(old: Options, new: Options) -> Plan:
    """The changes from `old` to `new`; raises `ReloadRefused` on the first one that
    cannot be made while running."""
    notices: list[str] = []
    flags: dict[str, bool] = {}
    unknown = [f.name for f in dataclasses.fields(Options)]
    names = list(_GO_NAMES) + [n for n in unknown if n not in _GO_NAMES and n not in _IGNORED]
    for name in names:
        before, after = getattr(old, name), getattr(new, name)
        if before == after:
            continue
        if name in _LOGGING:
            notices.append(f"Reloaded: {_LOGGING[name]} = {_go(after)}")
            flags["logging"] = True
        elif name in _PLAIN:
            notices.append(f"Reloaded: {_PLAIN[name]} = {_go(after)}")
        elif name in _DURATIONS:
            notices.append(f"Reloaded: {_DURATIONS[name]} = {go_duration(round(after * 1e9))}")
        elif name in _AUTH:
            notices.append(f"Reloaded: {_AUTH[name]}")
            flags["auth"] = True
        elif name == "auth_timeout":
            notices.append(f"Reloaded: authorization timeout = {_go(after)}")
        elif name == "no_auth_user":
            _no_auth_user(before, after, new)
            flags["auth"] = True
        elif name == "server_tags":
            notices.append("Reloaded: tags")
        elif name == "pid_file":
            notices.append(f"Reloaded: pid_file = {_go(after)}")
            flags["pid_file"] = True
        elif name == "tls":
            notices.append(f"Reloaded: tls = {'enabled' if after else 'disabled'}")
        elif name == "cluster":
            _cluster(before, after)
            if dataclasses.replace(before, routes=()) != dataclasses.replace(after, routes=()):
                notices.append("Reloaded: cluster")
                flags["cluster"] = True
            if before.routes != after.routes:  # the reference's own option, after Cluster
                notices.append("Reloaded: cluster routes")
                flags["routes"] = True
        elif name == "resolver_preload":
            notices.append("Reloaded: accounts")
            flags["preloads"] = True
        elif name == "mqtt":
            notices += _mqtt(before, after)
            flags["mqtt"] = True
        elif name == "leafnodes":
            notices += _leafnodes(before, after)
            flags["leafnode_remotes"] = True
        elif name == "jetstream":
            notices += _jetstream(before, after)
            flags["jetstream_limits"] = True
        elif name == "accounts":
            pass  # listed in _AUTH
        else:
            go = _GO_NAMES.get(name, name)
            raise ReloadRefused(
                f"config reload not supported for {go}: old={_go(before)}, new={_go(after)}"
            )
    return Plan(notices=tuple(dict.fromkeys(notices)), **flags)


def _no_auth_user(before: str | None, after: str | None, new: Options) -> None:
    """Only dropping it is allowed, and only with the user it named gone too."""
    users = new.users + tuple(u for account in new.accounts for u in account.users)
    if before and not after and all(user.user != before for user in users):
        return
    raise ReloadRefused(
        f"config reload not supported for NoAuthUser: old={_go(before)}, new={_go(after)}"
    )


def _cluster(before: Any, after: Any) -> None:
    if before is None or after is None:
        raise ReloadRefused(
            f"config reload not supported for Cluster: old={_go(before)}, new={_go(after)}"
        )
    if before.host != after.host:
        raise ReloadRefused(
            f"config reload not supported for cluster host: old={before.host}, new={after.host}"
        )
    if before.port != after.port:
        raise ReloadRefused(
            f"config reload not supported for cluster port: old={before.port}, new={after.port}"
        )
    for field in dataclasses.fields(before):
        name = field.name
        if name not in _CLUSTER_RELOADABLE and getattr(before, name) != getattr(after, name):
            old, new = _go(getattr(before, name)), _go(getattr(after, name))
            raise ReloadRefused(f"config reload not supported for cluster {name}: "
                                f"old={old}, new={new}")  # fmt: skip


def _mqtt(before: Any, after: Any) -> list[str]:
    """The settings of the consumers MQTT subscriptions make reload, and the TLS of new
    connections (switched on or off too); the reference then logs each consumer
    setting, changed or not."""
    reloadable = (*_MQTT, "tls")
    if (
        before is None
        or after is None
        or dataclasses.replace(before, **{name: getattr(after, name) for name in reloadable})
        != after
    ):
        raise ReloadRefused(
            f"config reload not supported for MQTT: old={_go(before)}, new={_go(after)}"
        )
    return [
        f"Reloaded: MQTT ack_wait = {go_duration(round(after.ack_wait * 1e9))}",
        f"Reloaded: MQTT max_ack_pending = {after.max_ack_pending}",
        f"Reloaded: MQTT stream_replicas = {after.stream_replicas}",
        "Reloaded: MQTT consumer_replicas = 0",  # not a setting of jetlake's
        f"Reloaded: MQTT consumer_memory_storage = {_go(after.consumer_memory_storage)}",
        "Reloaded: MQTT consumer_inactive_threshold = "
        + go_duration(round(after.consumer_inactive_threshold * 1e9)),
    ]


def _leafnodes(before: Any, after: Any) -> list[str]:
    """The remotes, and the TLS and compression of the listener and of kept remotes,
    change; the reference's notices name the removed remotes and new compressions."""
    if before is None or after is None:  # the block added or taken away: a restart
        raise ReloadRefused(
            f"config reload not supported for LeafNode: old={_go(before)}, new={_go(after)}"
        )
    try:
        return list(remote_changes(before, after).notices)
    except LeafReloadRefused as exc:
        raise ReloadRefused(f"config reload not supported for LeafNode: {exc}") from None


def _jetstream(before: Any, after: Any) -> list[str]:
    """Raised store limits and `_JS_LIVE` reload, as on the reference; its
    messages for the store dir and for limits made dynamic or lowered. Any other JetStream
    change (switching it on or off, the domain, sync) needs a restart of jetlake."""
    if before.store_dir != after.store_dir:
        raise ReloadRefused("config reload not supported for jetstream storage directory")
    notices = []
    for field, label in _JS_LIMITS.items():
        old, new = getattr(before, field), getattr(after, field)
        if old != new:
            if old == -1:
                raise ReloadRefused(
                    "config reload not supported for jetstream dynamic max memory and store"
                )
            if new < old or new == -1:
                raise ReloadRefused(
                    "config reload not supported for decreasing jetstream max memory and store"
                )
            notices.append(f"Reloaded: JetStream {label} = {friendly_bytes(new)}")
    for name in _JS_LIVE:
        if getattr(before, name) != getattr(after, name):
            notices.append(f"Reloaded: JetStream {name} = {getattr(after, name)}")
    for field in dataclasses.fields(before):
        if field.name in _JS_LIMITS or field.name in _JS_LIVE:
            continue
        old, new = getattr(before, field.name), getattr(after, field.name)
        if old != new:
            raise ReloadRefused(
                f"config reload not supported for jetstream {field.name}: "
                f"old={_go(old)}, new={_go(new)}"
            )
    return notices
