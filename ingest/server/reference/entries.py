"""What each flag and config key means, with the type and default the page shows.

Defaults are read from the settings dataclasses (`Field`), not copied, so the page shows
what a server starts with; a default that is not one field's value (derived at start, or
a zero the code reads as something else) is written out as text, with the reason.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ingest.server.cluster.settings import ClusterConfig
from ingest.server.gofmt import go_duration
from ingest.server.jwt.settings import ResolverConfig
from ingest.server.leafnode.settings import LeafnodeConfig, RemoteLeaf
from ingest.server.settings import (
    JetStreamConfig,
    LakeConfig,
    MQTTConfig,
    Options,
    SqlConfig,
    TLSConfig,
)
from ingest.server.websocket.settings import WebSocketConfig


@dataclass(frozen=True, slots=True)
class Field:
    """A default taken from a settings dataclass; `none` says what an unset value means."""

    cls: type
    name: str
    none: str = "unset"

    def value(self) -> Any:
        for item in dataclasses.fields(self.cls):
            if item.name == self.name:
                if item.default is not dataclasses.MISSING:
                    return item.default
                return item.default_factory()  # type: ignore[misc]
        raise KeyError(f"{self.cls.__name__} has no field {self.name}")


@dataclass(frozen=True, slots=True)
class Key:
    """One key (or flag) and its spellings; the first name is the one the page leads with."""

    names: tuple[str, ...]
    kind: str
    meaning: str
    default: Field | str = ""


def K(names: str, kind: str, meaning: str, default: Field | str = "") -> Key:
    """A row, with its spellings given as one space-separated string."""
    return Key(tuple(names.split()), kind, meaning, default)


def render_default(key: Key) -> str:
    """The default as an operator would write it in a config file."""
    if not isinstance(key.default, Field):
        return key.default
    value = key.default.value()
    if value is None:
        return key.default.none
    if isinstance(value, bool):
        return "true" if value else "false"
    if "duration" in key.kind and isinstance(value, float):
        return f"`{go_duration(round(value * 1e9))}`"
    if key.kind == "size" and value >= 1024:
        return f"{value} ({_binary(value)})"
    if isinstance(value, tuple):
        return "none" if not value else ", ".join(map(str, value))
    return f"`{value}`"


def _binary(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


OPT, JS, LK, MQ, CL, TL = Options, JetStreamConfig, LakeConfig, MQTTConfig, ClusterConfig, TLSConfig
SQ = SqlConfig
RS = ResolverConfig
LN, RL = LeafnodeConfig, RemoteLeaf
WS = WebSocketConfig

# Flags, by the setting they share (flags.py's `_FLAG_SPECS`).
FLAGS: tuple[Key, ...] = (
    K("a addr net", "host", "Address the client port binds, IPv4 or IPv6.", Field(OPT, "host")),
    K("p port", "integer", "Client port; `-1` picks a free port.", Field(OPT, "port")),
    K("n name server_name", "string", "Server name.", Field(OPT, "server_name", "the server ID")),
    K(
        "m http_port",
        "integer",
        "Monitoring port; `-1` a free one.",
        Field(OPT, "http_port", "off"),
    ),
    K("c config", "path", "Config file; flags given too override it.", "none"),
    K("t", "boolean", "Check the config file (with `-c`) and exit; warnings fail it.", "false"),
    K("D debug", "boolean", "Debug logging.", Field(OPT, "debug")),
    K("V trace", "boolean", "Protocol trace logging.", Field(OPT, "trace")),
    K("DV", "boolean", "Debug and trace together.", "false"),
    K("l log", "path", "Log file instead of standard error.", Field(OPT, "logfile", "stderr")),
    K("P pid", "path", "File the process id is written to.", Field(OPT, "pid_file", "none")),
    K(
        "sl signal",
        "command[=pid]",
        "Signal a running server and exit: `reload`, `ldm`, `term`, `quit`, `stop`,"
        " `reopen`; the pid is a number or a pid file (see"
        " [Operations](../operations.md#start-and-stop)).",
        "none",
    ),
    K("user", "string", "The single user's name.", "none"),
    K("pass", "string", "The single user's password.", "none"),
    K("auth", "string", "Token clients must present.", "none"),
    K("js jetstream", "boolean", "Turn JetStream on.", Field(JS, "enabled")),
    K("sd store_dir", "path", "JetStream's store directory.", "`$TMPDIR/nats`"),
    K("lake", "boolean", "Turn the lake on (jetlake's own).", Field(LK, "enabled")),
    K("lake_dir", "path", "Where the Delta tables go; implies `--lake`.", "`<store_dir>/lake`"),
    K(
        "spark_master",
        "URL",
        "Spark master for the compactor and `jetlake sql`; implies `--lake`.",
        "`$JETLAKE_SPARK_MASTER`, else `local[*]`",
    ),
    K(
        "busy_poll",
        "duration",
        "Longest the event loop polls before it sleeps (jetlake's own); `0` turns it off.",
        Field(OPT, "busy_poll"),
    ),
    K("tls", "boolean", "TLS on the client port; `-tls=false` turns off the file's.", "false"),
    K("tlscert", "path", "Server certificate (PEM).", "none"),
    K("tlskey", "path", "Server private key (PEM).", "none"),
    K("tlscacert", "path", "CA bundle client certificates are checked against.", "none"),
    K("tlsverify", "boolean", "Demand a client certificate.", Field(TL, "verify")),
    K(
        "cluster cluster_listen",
        "URL",
        "Route listener, `nats://host:port` (credentials in the URL, if any).",
        "none",
    ),
    K("routes", "URLs", "Routes to dial, separated by commas.", "none"),
    K("cluster_name", "string", "Cluster name.", Field(CL, "name", "generated at start")),
    K(
        "no_advertise",
        "boolean",
        "Do not gossip this server's client URLs.",
        Field(CL, "no_advertise"),
    ),
    K(
        "connect_retries",
        "integer",
        "Dial attempts for an implicit route.",
        Field(CL, "connect_retries"),
    ),
    K("h help", "boolean", "Print the usage and exit.", "false"),
    K("v version", "boolean", "Print the version and exit.", "false"),
)

TOP_LEVEL: tuple[Key, ...] = (
    K("listen", "host:port", "Client address and port in one value.", "`0.0.0.0:4222`"),
    K("host net", "string", "Address the client port binds.", Field(OPT, "host")),
    K("port", "integer", "Client port; `-1` a free port, `0` the default.", Field(OPT, "port")),
    K("http", "host:port", "Monitoring address and port in one value.", "off"),
    K("http_port monitor_port", "integer", "Monitoring port.", Field(OPT, "http_port", "off")),
    K(
        "server_name",
        "string",
        "Server name (no spaces).",
        Field(OPT, "server_name", "the server ID"),
    ),
    K("server_tags", "array", "Tags for stream placement, lower-cased.", Field(OPT, "server_tags")),
    K("max_payload", "size", "Largest message payload.", Field(OPT, "max_payload")),
    K(
        "max_connections max_conn",
        "integer",
        "Most client connections; `0` refuses every client.",
        Field(OPT, "max_connections"),
    ),
    K("max_control_line", "size", "Longest protocol line.", Field(OPT, "max_control_line")),
    K(
        "max_pending",
        "size",
        "Unsent bytes after which a subscriber is a slow consumer.",
        Field(OPT, "max_pending"),
    ),
    K("ping_interval", "duration", "Keepalive PING interval.", Field(OPT, "ping_interval")),
    K("ping_max", "integer", "Unanswered PINGs before `Stale Connection`.", Field(OPT, "ping_max")),
    K(
        "connect_error_reports",
        "integer",
        "A leafnode remote never reached: one failed dial in this many is logged as an error.",
        Field(OPT, "connect_error_reports"),
    ),
    K(
        "reconnect_error_reports",
        "integer",
        "A leafnode link that was up: one failed redial in this many is logged as an error.",
        Field(OPT, "reconnect_error_reports"),
    ),
    K(
        "write_deadline",
        "duration",
        "A client that takes no bytes for this long is a slow consumer.",
        Field(OPT, "write_deadline"),
    ),
    K(
        "busy_poll",
        "duration",
        "Longest the loop polls before it sleeps (jetlake's own); `0` off.",
        Field(OPT, "busy_poll"),
    ),
    K(
        "lame_duck_duration",
        "duration",
        "Time over which lame duck closes clients (at least 30s).",
        Field(OPT, "lame_duck_duration"),
    ),
    K(
        "lame_duck_grace_period",
        "duration",
        "Wait before lame duck starts closing clients.",
        Field(OPT, "lame_duck_grace_period"),
    ),
    K(
        "authorization",
        "map",
        "Client authentication: see [authorization](#authorization).",
        "none",
    ),
    K("no_auth_user", "string", "User a client without credentials is logged in as.", "none"),
    K("tls", "map", "TLS on the client port: see [tls](#tls).", "none"),
    K("jetstream", "map, boolean or string", "JetStream: see [jetstream](#jetstream).", "off"),
    K("store_dir storedir", "path", "Same as `jetstream { store_dir }`.", "none"),
    K("lake", "map or boolean", "The lake (jetlake's own): see [lake](#lake).", "off"),
    K("cluster", "map", "Routes: see [cluster](#cluster).", "none"),
    K("mqtt", "map", "MQTT listener: see [mqtt](#mqtt).", "none"),
    K("websocket ws", "map", "WebSocket listener: see [websocket](#websocket).", "none"),
    K("leafnodes leaf", "map", "Leafnode links: see [leafnodes](#leafnodes).", "none"),
    K("accounts", "map or array", "Accounts: see [accounts](#accounts).", "none"),
    K(
        "system_account system",
        "string",
        "The system account.",
        Field(OPT, "system_account", "`$SYS`"),
    ),
    K(
        "operator operators",
        "string or array",
        "Operator JWT (inline or a file, as `nsc` writes it): turns on operator mode, see "
        "[Security](../security.md#operator-mode).",
        "none",
    ),
    K(
        "resolver",
        '`MEMORY`, `URL("…")` or map',
        "Where operator mode finds account JWTs: `MEMORY` (the preloads only), "
        '`URL("http://host:port/jwt/v1/accounts/")` (an account server, asked for '
        "`<url><account>` at a user's first login; also what an operator's "
        "`account_server_url` gives when no resolver is set), or a map: see "
        "[resolver](#resolver).",
        "none",
    ),
    K(
        "resolver_preload",
        "map",
        "Account JWTs the resolver starts with (account public key: JWT).",
        "none",
    ),
    K(
        "resolver_tls",
        "map",
        "TLS of the URL resolver towards an `https` account server: `cert_file` and "
        "`key_file` shown to it, `ca_file` it is checked against (else the system's), as "
        "in [tls](#tls).",
        "none",
    ),
    K("mappings", "map", "Subject mappings of the global account (subject: destination).", "none"),
    K("debug", "boolean", "Debug logging.", Field(OPT, "debug")),
    K("trace", "boolean", "Protocol trace logging.", Field(OPT, "trace")),
    K("logtime", "boolean", "Timestamps on log lines.", Field(OPT, "logtime")),
    K("logtime_utc", "boolean", "Log timestamps in UTC.", Field(OPT, "logtime_utc")),
    K("logfile log_file", "path", "Log file.", Field(OPT, "logfile", "stderr")),
    K(
        "pid_file pidfile",
        "path",
        "File the process id is written to.",
        Field(OPT, "pid_file", "none"),
    ),
)
