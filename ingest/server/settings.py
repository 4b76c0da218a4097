"""The settings `jetlake serve` runs with, and the units the reference writes them in.

Frozen dataclasses so a running server can share them without copies; durations
are float seconds, sizes bytes, and Go's duration syntax is parsed here only.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from consensus.durability import DEFAULT_SYNC_INTERVAL_NS
from ingest.server.accounts.settings import AccountConfig
from ingest.server.cluster.settings import ClusterConfig
from ingest.server.jwt.settings import ResolverConfig
from ingest.server.leafnode.settings import LeafnodeConfig
from ingest.server.mappings import SubjectMapping
from ingest.server.tls_settings import TLSConfig
from ingest.server.websocket.settings import WebSocketConfig
from log.compactor.location import S3Options

DEFAULT_PORT = 4222
DEFAULT_AUTH_TIMEOUT = 2.0
HANDSHAKE_FIRST_FALLBACK = 0.05
# What a user's `allowed_connection_types` may name (upper-cased), as the reference.
CONNECTION_TYPES = frozenset(
    ("STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS", "IN_PROCESS")
)
MAX_INT32 = 2**31 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class SubjectPermission:
    """Empty `allow` means no allow-list: everything not denied is permitted."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Permissions:
    publish: SubjectPermission | None = None
    subscribe: SubjectPermission | None = None
    # `allow_responses`: (max, ttl seconds); 0 takes the default, negative is no bound
    responses: tuple[int, float] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class User:
    user: str  # an nkey user's is its public key, so names and nkeys share one namespace
    password: str | None = None
    nkey: str | None = None  # set: the client proves this key by signing the INFO's nonce
    permissions: Permissions | None = None
    allowed_connection_types: frozenset[str] = frozenset()  # empty: any kind of connection


def store_base(store_dir: str | None) -> Path:
    """`store_dir`, or the reference's default: `nats` in the temporary folder."""
    return Path(store_dir or Path(tempfile.gettempdir()) / "nats")


@dataclass(frozen=True, slots=True, kw_only=True)
class JetStreamConfig:
    enabled: bool = False
    store_dir: str | None = None
    max_memory_store: int = -1  # -1: sized from the machine, as the reference does
    max_file_store: int = -1
    # None: `always`, fsync before every PubAck; else writes are fsynced within this
    # interval, 10 ms unless set (the reference: 2 minutes); see consensus.durability.
    sync_interval_ns: int | None = DEFAULT_SYNC_INTERVAL_NS
    domain: str | None = None  # `$JS.<domain>.API` answers too (leafnodes reach it)
    # `limits { default_max_consumers }`: the consumers a stream may have when neither it
    # (`max_consumers`) nor its account limits them; the reference's default since 2.15,
    # against apps that create consumers without end. -1: none.
    default_max_consumers: int = 1000
    # `limits { max_ack_pending, max_request_batch }`: ceilings on every consumer's (0: none);
    # a consumer that names none gets the ceiling (below the default 1000 for ack pending).
    max_ack_pending: int = 0
    max_request_batch: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SqlConfig:
    """`lake { sql { … } }`: the SQL service beside the lake (`sql: off` leaves it out).

    Addresses are host:port; `jdbc` and `nats` None: that door stays shut;
    `nats` "": this server's own client port.
    """

    listen: str = "127.0.0.1:15002"  # Spark Connect
    jdbc: str | None = "127.0.0.1:10000"  # the Spark Thrift server
    nats: str | None = ""
    max_rows: int = 1_000_000  # a result's rows at most, at every door (past it: an error)
    max_result_size: int = 256 << 20  # a result's bytes in the service (Spark's maxResultSize)
    catalog: str | None = None  # a Hive metastore (thrift://host:port) to register tables in
    # The service's own NATS login for `nats` (a server with accounts or users needs one).
    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds: str | None = None  # a .creds file (operator mode)


@dataclass(frozen=True, slots=True, kw_only=True)
class LakeConfig:
    """`lake { … }` and `--lake`/`--lake_dir`/`--spark_master`; seconds for intervals.

    Off unless asked for: a drop-in for nats-server must not start JVMs or write
    tables nobody configured. `seal_interval` bounds how long a message waits
    before its segment is sealed and can reach the lake (freshness);
    `compact_interval` 0 keeps the server from starting a compactor (cron runs
    `jetlake job compact` instead) while the lake still holds back reclaim.
    """

    enabled: bool = False
    dir: str | None = None  # None: <store_dir>/lake; a folder or s3://bucket/prefix
    s3: S3Options | None = None  # `lake { s3 { … } }`; None: the AWS environment decides
    spark_master: str | None = None  # None: JETLAKE_SPARK_MASTER, else local[*]
    seal_interval: float = 0.5
    compact_interval: float = 1.0
    optimize_interval: float = 3600.0  # 0: never
    sql: SqlConfig | None = SqlConfig()  # None: no SQL service (`sql: off`)


@dataclass(frozen=True, slots=True, kw_only=True)
class MQTTConfig:
    """`mqtt { … }` as the reference reads it; present only when it names a port.

    Authorization here replaces the server's for MQTT clients when it sets a
    username, token or no_auth_user (the reference's override rule).
    """

    host: str | None = None  # None: the server's host
    port: int = 1883  # 0: a free port (the user wrote -1)
    tls: TLSConfig | None = None
    username: str | None = None
    password: str | None = None
    token: str | None = None
    auth_timeout: float | None = None
    no_auth_user: str | None = None
    ack_wait: float = 0.0  # 0: 30 s (/varz shows only what was set, as the reference)
    max_ack_pending: int = 0  # 0: 1024
    stream_replicas: int = 0
    consumer_memory_storage: bool = False
    consumer_inactive_threshold: float = 0.0
    js_api_timeout: float = 5.0
    reject_qos2_publish: bool = False  # a QoS 2 PUBLISH or Will closes the client
    downgrade_qos2_subscribe: bool = False  # a QoS 2 subscription is granted QoS 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """Everything `serve` needs; durations are float seconds, ports are bind ports."""

    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT  # 0: let the OS pick (the user asked for -1)
    http_host: str | None = None  # None: same as host
    http_port: int | None = None  # None: monitoring off; 0: a free port
    server_name: str | None = None  # None: the server ID will name it
    server_tags: tuple[str, ...] = ()  # lower-cased, as the reference matches them
    max_payload: int = 1024 * 1024
    max_connections: int = 64 * 1024  # negative: every client is refused
    max_control_line: int = 4096
    max_pending: int = 64 * 1024 * 1024
    ping_interval: float = 120.0
    ping_max: int = 2
    # Failed dials of a leafnode remote logged as errors: one in this many before the
    # link was ever up, once it was (the reference's defaults; the rest at debug level).
    connect_error_reports: int = 3600
    reconnect_error_reports: int = 1
    write_deadline: float = 10.0
    busy_poll: float = 200e-6  # jetlake's own: see ingest/server/busypoll.py
    lame_duck_duration: float = 120.0
    lame_duck_grace_period: float = 10.0
    auth_token: str | None = None
    username: str | None = None
    password: str | None = None
    users: tuple[User, ...] = ()
    no_auth_user: str | None = None
    accounts: tuple[AccountConfig, ...] = ()
    system_account: str | None = None  # None: $SYS, created when not configured
    operators: tuple[str, ...] = ()  # operator JWTs: set, accounts and users come from JWTs
    resolver: ResolverConfig | None = None
    resolver_preload: tuple[tuple[str, str], ...] = ()  # (account public key, account JWT)
    resolver_tls: TLSConfig | None = None  # the URL resolver's client TLS
    auth_timeout: float = DEFAULT_AUTH_TIMEOUT
    tls: TLSConfig | None = None
    jetstream: JetStreamConfig = field(default_factory=JetStreamConfig)
    lake: LakeConfig = field(default_factory=LakeConfig)
    mqtt: MQTTConfig | None = None
    websocket: WebSocketConfig | None = None
    cluster: ClusterConfig | None = None  # None: no route listener, no routes
    leafnodes: LeafnodeConfig | None = None  # None: no leafnode listener, no remotes
    debug: bool = False
    trace: bool = False
    logtime: bool = True
    logtime_utc: bool = False
    logfile: str | None = None
    pid_file: str | None = None
    config_file: str | None = None
    config_digest: str = ""  # `sha256:…` of the file's values (`config_file.digest`)
    mappings: tuple[SubjectMapping, ...] = ()  # the global account's `mappings {}`
    # Config warnings, already formatted; the reference prints them and goes on.
    warnings: tuple[str, ...] = ()
    check_config: bool = False
    show_help: bool = False
    show_version: bool = False
    signal: str | None = None  # `--signal`: a command for a running server


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


_STORAGE_SHIFT = {"K": 10, "M": 20, "G": 30, "T": 40}


def storage_size(value: str) -> int:
    """JetStream limits as strings: digits and one of K M G T, binary multiples."""
    if not value:
        return 0
    digits, suffix = value[:-1], value[-1]
    if suffix not in _STORAGE_SHIFT:
        raise ValueError("sizes defined as strings must end in K, M, G, T")
    if not re.fullmatch(r"[-+]?\d{1,18}", digits):
        raise ValueError(f"can not parse {value!r} as a size")
    return int(digits) << _STORAGE_SHIFT[suffix]
