"""What each flag and config key means, with the type and default the page shows.

Defaults are read from the settings dataclasses (`Field`), not copied, so the page shows
what a server starts with; a default that is not one field's value (derived at start, or
a zero the code reads as something else) is written out as text, with the reason.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from consensus.durability import DEFAULT_SYNC_INTERVAL_NS
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
from log.compactor.location import S3Options


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

_AUTH_TIMEOUT = "`2s`; with `tls`, its timeout + 1s"
S3 = S3Options


def _aws(variable: str) -> str:
    """An S3 option left out comes from the standard AWS environment."""
    return f"`${variable}` (AWS environment)"


SECTIONS: dict[str, tuple[Key, ...]] = {
    "authorization": (
        K("user username", "string", "The single user's name.", "none"),
        K("password pass", "string", "The single user's password.", "none"),
        K("token", "string", "Token clients must present (not with users).", "none"),
        K("timeout", "seconds or duration", "Time a client has to authenticate.", _AUTH_TIMEOUT),
        K("users", "array", "Users: see [users](#authorization-users).", "none"),
        K(
            "default_permissions default_permission permissions",
            "map",
            "Permissions of users that set none: see [permissions](#permissions).",
            "none",
        ),
    ),
    "authorization.users": (
        K("user username", "string", "The user's name (required).", "none"),
        K("password pass", "string", "The user's password.", "none"),
        K(
            "permissions permission authorization",
            "map",
            "What the user may publish and subscribe to.",
            "all",
        ),
        K(
            "allowed_connection_types connection_types clients",
            "string or array",
            "Kinds of connection the user may make (`STANDARD`, `MQTT`, …).",
            "any",
        ),
        K(
            "nkey",
            "string",
            "A user's public nkey (`U…`) instead of user and password: the client signs "
            "the server's nonce with its seed.",
            "none",
        ),
    ),
    "resolver": (
        K(
            "type",
            "string",
            "`full`: every JWT kept in `dir`, updated by `nsc push`, answered to the cluster. "
            "`cache`: the JWTs fetched from the cluster at logins, kept in `dir`.",
            "none",
        ),
        K("dir", "path", "Folder of the account JWTs (`<account>.jwt`).", Field(RS, "dir", "none")),
        K(
            "allow_delete",
            "boolean",
            "Let `nsc push --prune` delete accounts (their files renamed `.jwt.deleted`).",
            Field(RS, "allow_delete"),
        ),
        K(
            "interval",
            "duration",
            "How often a server asks its cluster for JWTs it missed.",
            Field(RS, "interval"),
        ),
        K(
            "timeout",
            "duration",
            "How long a login of an account not held waits for the cluster to answer its "
            "lookup; then it is refused.",
            Field(RS, "timeout"),
        ),
        K(
            "limit",
            "integer",
            "`cache`: how many JWTs `dir` keeps (the newest). Accepted by `full`.",
            Field(RS, "limit"),
        ),
        K(
            "ttl",
            "duration",
            "`cache`: how long a JWT stays in `dir` (`0`: no end); `full` refuses it.",
            Field(RS, "ttl"),
        ),
        K(
            "hard_delete",
            "boolean",
            "`full` with `allow_delete`: a deleted account's file is removed instead of "
            "renamed `.jwt.deleted`.",
            Field(RS, "hard_delete"),
        ),
    ),
    "permissions": (
        K("publish pub import", "array or map", "Subjects the user may publish to.", "all"),
        K("subscribe sub export", "array or map", "Subjects (and queues) to subscribe to.", "all"),
        K("allow", "array", "Inside publish/subscribe: the allow-list.", "everything"),
        K("deny", "array", "Inside publish/subscribe: the deny-list.", "nothing"),
        K(
            "allow_responses",
            "boolean or map",
            "Publish to the reply subject of a message received: `true` (once, within 2 "
            'minutes) or `{max: N, expires: "5s"}` (negative: no bound). Without a '
            "publish allow-list, nothing else may be published.",
            "false",
        ),
    ),
    "tls": (
        K("cert_file", "path", "Server certificate (PEM).", Field(TL, "cert_file", "none")),
        K("key_file", "path", "Server private key (PEM).", Field(TL, "key_file", "none")),
        K("ca_file", "path", "CA bundle for client certificates.", Field(TL, "ca_file", "none")),
        K("verify", "boolean", "Demand a client certificate.", Field(TL, "verify")),
        K("timeout", "seconds or duration", "TLS handshake timeout.", Field(TL, "timeout")),
        K(
            "handshake_first first immediate",
            "boolean, `auto` or duration",
            "TLS before INFO; `auto` or a duration falls back to INFO first after it.",
            Field(TL, "handshake_first"),
        ),
        K(
            "pinned_certs",
            "array",
            "Hex SHA-256s of the peer public keys (DER SubjectPublicKeyInfo) accepted.",
            "any peer",
        ),
        K(
            "insecure",
            "boolean",
            "Dialling side: check neither the peer's chain nor its host name.",
            Field(TL, "insecure"),
        ),
    ),
    "jetstream": (
        K("enabled enable", "boolean", "JetStream on or off.", "true inside a block"),
        K("store_dir store storedir", "path", "Store directory.", "`$TMPDIR/nats`"),
        K(
            "sync_interval sync",
            "duration or `always`",
            "fsync window; `always` fsyncs before each PubAck. See durability.",
            f"`{go_duration(DEFAULT_SYNC_INTERVAL_NS)}`",
        ),
        K(
            "max_memory_store max_mem_store max_mem",
            "size",
            "Memory streams' limit on this server (used in placement).",
            "three quarters of the memory",
        ),
        K(
            "max_file_store max_file",
            "size",
            "File streams' limit on this server (used in placement).",
            "three quarters of the disk's free space",
        ),
        K(
            "domain",
            "string",
            "JetStream domain: `$JS.<domain>.API` answers too; see [Leafnodes](../leafnodes.md).",
            "none",
        ),
    ),
    "lake": (
        K("enabled enable", "boolean", "The lake on or off.", "true inside a block"),
        K(
            "dir",
            "path or URL",
            "Where the Delta tables go: a folder, or `s3://bucket/prefix`.",
            Field(LK, "dir", "`<store_dir>/lake`"),
        ),
        K(
            "s3",
            "map",
            "The bucket's endpoint and credentials: see [lake.s3](#lake-s3).",
            "the AWS environment",
        ),
        K(
            "spark_master",
            "URL",
            "Spark master of the compactor.",
            Field(LK, "spark_master", "`$JETLAKE_SPARK_MASTER`, else `local[*]`"),
        ),
        K(
            "seal_interval",
            "seconds or duration",
            "Age of a segment's first message at which it is sealed for the lake.",
            Field(LK, "seal_interval"),
        ),
        K(
            "compact_interval",
            "seconds or duration",
            "Compactor cadence; `0`: no compactor beside the server (cron).",
            Field(LK, "compact_interval"),
        ),
        K(
            "optimize_interval",
            "seconds or duration",
            "Optimize (bin-pack, Z-order) cadence; `0` never.",
            Field(LK, "optimize_interval"),
        ),
        K(
            "sql",
            "map or boolean",
            "The SQL service beside the lake: see [lake.sql](#lake-sql); `off` leaves it out.",
            "on",
        ),
    ),
    "lake.sql": (
        K("listen", "host:port", "Spark Connect's address (`sc://`).", Field(SQ, "listen")),
        K(
            "jdbc",
            "host:port or boolean",
            "The Spark Thrift server's address (JDBC/ODBC, `jdbc:hive2://`); `off` shuts it.",
            Field(SQ, "jdbc"),
        ),
        K(
            "nats",
            "URL or boolean",
            "The NATS server the `$JL.SQL` service answers on; `off` shuts it.",
            "this server's client port",
        ),
        K(
            "max_rows",
            "integer",
            "Rows a result may have (SQL over NATS, Spark Connect, JDBC); past them the query "
            "stops with an error naming this key, and the service goes on.",
            Field(SQ, "max_rows"),
        ),
        K(
            "max_result_size",
            "size",
            "Bytes a query's result may take in the service (Spark's "
            "`spark.driver.maxResultSize`), e.g. `64MB`; past them its job fails with an "
            "error naming that setting, and the service goes on.",
            Field(SQ, "max_result_size"),
        ),
        K(
            "user",
            "string",
            "The service's own NATS user for `nats` (with `password`), on a server with "
            "accounts or users; handed to it in its environment, never its command line.",
            "none",
        ),
        K("password", "string", "The password of `user`.", "none"),
        K("token", "string", "The service's own NATS token for `nats`, instead of a user.", "none"),
        K(
            "creds",
            "path",
            "The service's own NATS credentials file (user JWT and nkey seed, operator mode).",
            "none",
        ),
        K(
            "catalog",
            "URI",
            "A Hive metastore (`thrift://host:port`) where the service registers every "
            "stream's lake table, for engines outside jetlake.",
            Field(SQ, "catalog", "none: no catalog"),
        ),
    ),
    "lake.s3": (
        K("endpoint", "URL", "S3 endpoint.", Field(S3, "endpoint", _aws("AWS_ENDPOINT_URL_S3"))),
        K("region", "string", "Bucket region.", Field(S3, "region", _aws("AWS_REGION"))),
        K(
            "access_key",
            "string",
            "Access key id.",
            Field(S3, "access_key", _aws("AWS_ACCESS_KEY_ID")),
        ),
        K(
            "secret_key",
            "string",
            "Secret access key; never logged or shown in `/varz` or `/jsz`.",
            Field(S3, "secret_key", _aws("AWS_SECRET_ACCESS_KEY")),
        ),
        K(
            "path_style",
            "boolean",
            "Path-style requests (most S3-compatible servers).",
            Field(S3, "path_style", "true with an `endpoint`, else false"),
        ),
        K(
            "allow_http",
            "boolean",
            "Allow a plain-HTTP endpoint.",
            Field(S3, "allow_http", "true for an `http://` endpoint"),
        ),
    ),
    "cluster": (
        K("listen", "host:port", "Route listener; without a port no cluster starts.", "none"),
        K("host net", "string", "Route listener's address.", Field(CL, "host")),
        K("port", "integer", "Route listener's port; `-1` a free one.", Field(CL, "port")),
        K("name", "string", "Cluster name (no spaces).", Field(CL, "name", "generated")),
        K("routes", "array of URLs", "Routes to dial, redialled forever.", Field(CL, "routes")),
        K(
            "authorization authentication",
            "map",
            "Route credentials: see [cluster.authorization](#cluster-authorization).",
            "none",
        ),
        K("no_advertise", "boolean", "Do not gossip client URLs.", Field(CL, "no_advertise")),
        K(
            "connect_retries",
            "integer",
            "Attempts for a gossiped route.",
            Field(CL, "connect_retries"),
        ),
        K("pool_size", "integer", "Accepted; one route per peer is kept.", Field(CL, "pool_size")),
        K(
            "tls",
            "map",
            "TLS on every route, both ways (as [tls](#tls); the certificate serves as client"
            " and server one): see [Clustering](../clustering.md#tls-on-routes).",
            "none",
        ),
    ),
    "cluster.authorization": (
        K("user username", "string", "Route user.", "none"),
        K("password pass", "string", "Route password.", "none"),
        K(
            "timeout",
            "seconds or duration",
            "Route authentication timeout.",
            Field(CL, "auth_timeout"),
        ),
        K("token", "—", "Refused: route authorization takes no token.", "—"),
    ),
    "mqtt": (
        K("listen", "host:port", "MQTT address and port in one value.", "none"),
        K("host net", "string", "MQTT listener's address.", Field(MQ, "host", "the server's")),
        K("port", "integer", "MQTT port; without one there is no MQTT.", "none (usually 1883)"),
        K("tls", "map", "TLS on the MQTT port: as [tls](#tls).", "none"),
        K(
            "authorization authentication",
            "map",
            "MQTT's own credentials: see [mqtt.authorization](#mqtt-authorization).",
            "the server's users",
        ),
        K("no_auth_user", "string", "User an MQTT client without credentials gets.", "none"),
        K("ack_wait ackwait", "duration", "Redelivery wait of QoS 1/2 messages.", "`30s`"),
        K(
            "max_ack_pending max_pending max_inflight",
            "integer",
            "Unacknowledged QoS 1/2 messages per subscription (0 to 65535).",
            "`1024`",
        ),
        K(
            "stream_replicas",
            "integer",
            "Replicas of the MQTT streams.",
            "`1`; on a cluster the servers, at most 3",
        ),
        K(
            "consumer_memory_storage",
            "boolean",
            "Keep MQTT consumers in memory.",
            Field(MQ, "consumer_memory_storage"),
        ),
        K(
            "consumer_inactive_threshold consumer_auto_cleanup",
            "duration",
            "Drop a session's consumers after this long unused.",
            "none",
        ),
        K(
            "js_api_timeout api_timeout",
            "duration",
            "Timeout of MQTT's JetStream requests.",
            Field(MQ, "js_api_timeout"),
        ),
        K(
            "reject_qos2_publish",
            "boolean",
            "Close a client that publishes at QoS 2; CONNACK 0x10 for a QoS 2 Will.",
            Field(MQ, "reject_qos2_publish"),
        ),
        K(
            "downgrade_qos2_subscribe",
            "boolean",
            "Grant QoS 1 to a QoS 2 subscription (logged as a warning).",
            Field(MQ, "downgrade_qos2_subscribe"),
        ),
        K(
            "consumer_replicas",
            "integer",
            "Accepted and ignored with a warning, as the reference does.",
            "none",
        ),
    ),
    "leafnodes": (
        K("listen", "host:port", "Leafnode listener (a hub's); without a port none.", "none"),
        K("host net", "string", "Leafnode listener's address.", Field(LN, "host")),
        K("port", "integer", "Leafnode port (usually 7422); `-1` a free one.", "none"),
        K(
            "authorization authentication",
            "map",
            "What leafs present: see [leafnodes.authorization](#leafnodes-authorization).",
            "the server's users",
        ),
        K(
            "remotes",
            "array of maps",
            "Hubs this server dials as a leaf: see [leafnodes.remotes](#leafnodes-remotes).",
            "none",
        ),
        K(
            "reconnect reconnect_delay reconnect_interval",
            "seconds or duration",
            "Pause before a remote is redialled (30 s after a loop was detected).",
            Field(LN, "reconnect"),
        ),
        K("advertise", "host:port", "Leafnode URL told to leafs instead of the listener.", "none"),
        K("no_advertise", "boolean", "Tell leafs no leafnode URLs.", Field(LN, "no_advertise")),
        K(
            "tls",
            "map",
            "TLS on accepted links, after the INFO unless `handshake_first` (as [tls](#tls)):"
            " see [Leafnodes](../leafnodes.md#tls-on-leafnode-links).",
            "none",
        ),
        K(
            "compression",
            "mode, boolean or map",
            "S2 compression accepted links negotiate: `off`, `accept`, `s2_fast`,"
            " `s2_better`, `s2_best`, `s2_auto` (`true` is `s2_auto`), or"
            " [a map](#leafnodes-compression); see"
            " [Leafnodes](../leafnodes.md#compression).",
            "`s2_auto`",
        ),
    ),
    "leafnodes.compression": (
        K("mode", "string", "One of the modes of `compression`.", "`s2_auto`"),
        K(
            "rtt_thresholds thresholds rtts rtt",
            "array of durations",
            "For `s2_auto`: round trips up to which the link writes uncompressed, then"
            " `s2_fast`, `s2_better`, `s2_best` past the last; `0` skips a level.",
            "`10ms`, `50ms`, `100ms`",
        ),
    ),
    "leafnodes.authorization": (
        K("user username", "string", "Leaf user.", "none"),
        K("password pass", "string", "Leaf password.", "none"),
        K("account", "string", "Account accepted leafs are bound to.", "`$G`"),
        K(
            "timeout",
            "seconds or duration",
            "Leaf authentication timeout.",
            Field(LN, "auth_timeout"),
        ),
        K(
            "users",
            "array of maps",
            "Leaf users, each `user`, `password` and the `account` its links are bound to"
            " (`$G` unless set).",
            "none",
        ),
        K("token", "—", "Refused: leafnode authorization takes no token.", "—"),
    ),
    "leafnodes.remotes": (
        K("url urls", "URL or array of URLs", "The hub's leafnode URLs, dialled in turn.", "none"),
        K("account local", "string", "Local account the link is bound to.", Field(RL, "account")),
        K(
            "credentials creds",
            "path",
            "A `.creds` file: its JWT and the hub's nonce signed with its seed.",
            "none",
        ),
        K("hub", "boolean", "This server is the hub of the link although it dials.", "false"),
        K("deny_imports deny_import", "subjects", "Not taken from the hub.", "none"),
        K("deny_exports deny_export", "subjects", "Not sent to the hub.", "none"),
        K(
            "tls",
            "map",
            "TLS to the hub (as [tls](#tls); a `tls://` URL alone uses the system's roots).",
            "none",
        ),
        K(
            "compression",
            "mode, boolean or map",
            "S2 compression this link asks for: as `leafnodes { compression }`.",
            "`s2_auto`",
        ),
    ),
    "websocket": (
        K("listen", "host:port", "WebSocket address and port in one value.", "none"),
        K("host net", "string", "WebSocket listener's address.", Field(WS, "host")),
        K("port", "integer", "WebSocket port; without one there is no listener.", "none"),
        K("advertise", "host:port", "Shown in /varz.", "none"),
        K("tls", "map", "TLS on the WebSocket port (`wss://`): as [tls](#tls).", "none"),
        K("no_tls", "boolean", "Allow plain `ws://`; without it `tls` is required.", "false"),
        K(
            "compression compress",
            "boolean",
            "Offer permessage-deflate; used when the client asks for it.",
            "false",
        ),
        K(
            "same_origin",
            "boolean",
            "Refuse (403) a browser whose `Origin` is not this server's scheme, host and port.",
            "false",
        ),
        K(
            "allowed_origins allowed_origin allow_origins allow_origin origins",
            "array of URLs",
            "Refuse (403) a browser whose `Origin` is not listed.",
            "none (any)",
        ),
        K(
            "handshake_timeout",
            "duration",
            "Time a connection has to complete the HTTP upgrade (and TLS).",
            "the TLS timeout (`2s`)",
        ),
        K(
            "authorization authentication",
            "map",
            "WebSocket clients' own credentials: see"
            " [websocket.authorization](#websocket-authorization).",
            "the server's users",
        ),
        K("no_auth_user", "string", "User a WebSocket client without credentials gets.", "none"),
        K(
            "jwt_cookie",
            "string",
            "Cookie whose value is the user JWT when CONNECT has none (operator mode only).",
            "none",
        ),
    ),
    "websocket.authorization": (
        K("user username", "string", "WebSocket user.", "none"),
        K("password pass", "string", "WebSocket password.", "none"),
        K("token", "string", "WebSocket token.", "none"),
        K("timeout", "seconds or duration", "Authentication timeout.", "the server's"),
    ),
    "mqtt.authorization": (
        K("user username", "string", "MQTT user.", "none"),
        K("password pass", "string", "MQTT password.", "none"),
        K("token", "string", "MQTT token.", "none"),
        K("timeout", "seconds or duration", "Authentication timeout.", "the server's"),
    ),
    "accounts.NAME": (
        K(
            "users",
            "array",
            "The account's users, written as in [users](#authorization-users).",
            "none",
        ),
        K(
            "jetstream",
            "`enabled`, `disabled`, boolean or map",
            "JetStream for the account; a map enables it with the limits in "
            "[accounts.NAME.jetstream](#accounts-NAME-jetstream).",
            "off",
        ),
        K(
            "exports",
            "array of maps",
            "Streams and services other accounts may import: "
            "[accounts.NAME.exports](#accounts-NAME-exports).",
            "none",
        ),
        K(
            "imports",
            "array of maps",
            "Streams and services taken from other accounts: "
            "[accounts.NAME.imports](#accounts-NAME-imports).",
            "none",
        ),
        K(
            "limits",
            "map",
            "Connection limits: [accounts.NAME.limits](#accounts-NAME-limits).",
            "none",
        ),
        K("mappings", "—", "Refused: per-account mappings are not supported.", "—"),
        K("nkey", "—", "Refused: not supported.", "—"),
        K("default_permissions", "—", "Refused: not supported.", "—"),
    ),
    "accounts.NAME.exports": (
        K("stream", "subject", "Export messages published on these subjects.", "none"),
        K("service", "subject", "Export a service answering requests on these subjects.", "none"),
        K(
            "accounts",
            "array of account names",
            "Only these accounts may import it; an import by another stops the server at start.",
            "any account",
        ),
        K(
            "response_type response",
            "`singleton`, `stream` or `chunked`",
            "A service's answers: one, or any number until the threshold passes.",
            "singleton",
        ),
        K(
            "response_threshold threshold",
            "duration",
            "How long a stream or chunked service's reply stays mapped after its last answer.",
            "2m",
        ),
        K(
            "latency",
            "subject, or map of `sampling` (1-100, %, or `headers`) and `subject`",
            "Publish a service latency report for this share of singleton requests "
            "(`headers`: those whose trace headers are sampled).",
            "none",
        ),
        K("allow_trace", "boolean", "Accepted; no effect.", "false"),
        K(
            "account_token_position",
            "integer",
            "Importers may take only the subjects with their own account name at this "
            "token (1-based), which must be a `*` of the export's subject.",
            "none",
        ),
        K("advertise", "boolean", "Accepted; no effect.", "false"),
    ),
    "accounts.NAME.imports": (
        K(
            "stream",
            "map of `account`, `subject`",
            "Copy this account's messages on these subjects into this one.",
            "none",
        ),
        K(
            "service",
            "map of `account`, `subject`",
            "Requests made here on `to` (or the subject) go to that account's service.",
            "none",
        ),
        K("prefix", "subject", "A stream import's messages appear under `prefix.`.", "none"),
        K(
            "to",
            "subject",
            "A stream import's subjects mapped to these, or the subject a service is "
            "requested on here (wildcards map token for token).",
            "the subject",
        ),
        K("share", "boolean", "Accepted; no effect.", "false"),
        K("allow_trace", "boolean", "Accepted; no effect.", "false"),
    ),
    "accounts.NAME.limits": (
        K("max_connections max_conn", "integer", "Connections to this server.", "-1 (none)"),
        K("max_subscriptions max_subs", "integer", "Subscriptions per connection.", "-1 (none)"),
        K(
            "max_payload max_pay",
            "integer",
            "Largest message, when lower than the server's `max_payload`.",
            "-1 (none)",
        ),
        K(
            "max_leafnodes max_leafs",
            "integer",
            "Accepted; leafnode connections are not counted.",
            "-1 (none)",
        ),
    ),
    "accounts.NAME.jetstream": (
        K("max_memory max_mem", "size", "Memory the account's streams may reserve and fill.", "-1"),
        K(
            "max_file max_store",
            "size",
            "Storage the account's streams may reserve and fill.",
            "-1",
        ),
        K("max_streams", "integer", "Streams.", "-1"),
        K("max_consumers", "integer", "Consumers (sourcing readers not counted).", "-1"),
        K(
            "max_ack_pending",
            "integer",
            "Highest `max_ack_pending` of a consumer, and its default.",
            "-1",
        ),
        K(
            "max_bytes_required max_stream_bytes",
            "boolean",
            "Streams must set `max_bytes`.",
            "false",
        ),
        K(
            "mem_max_stream_bytes memory_max_stream_bytes",
            "size",
            "Largest `max_bytes` of a memory stream.",
            "-1",
        ),
        K(
            "disk_max_stream_bytes store_max_stream_bytes",
            "size",
            "Largest `max_bytes` of a file stream.",
            "-1",
        ),
    ),
}
