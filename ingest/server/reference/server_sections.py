"""The rows of the server's own sections: authorization, users, resolver, permissions,
TLS, JetStream and the lake."""

from __future__ import annotations

from consensus.durability import DEFAULT_SYNC_INTERVAL_NS
from ingest.server.gofmt import go_duration
from ingest.server.reference.entries import (
    LK,
    RS,
    SQ,
    TL,
    Field,
    K,
    Key,
)
from log.compactor.location import S3Options

_AUTH_TIMEOUT = "`2s`; with `tls`, its timeout + 1s"
S3 = S3Options


def _aws(variable: str) -> str:
    """An S3 option left out comes from the standard AWS environment."""
    return f"`${variable}` (AWS environment)"


SERVER_SECTIONS: dict[str, tuple[Key, ...]] = {
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
        K("limits", "map", "The server's limits over every account: `jetstream.limits`.", "—"),
    ),
    "jetstream.limits": (
        K(
            "default_max_consumers",
            "integer",
            "Consumers a stream may have when neither it (`max_consumers`) nor its account "
            "limits them; `-1`: no default. Reloads.",
            "`1000`",
        ),
        K(
            "max_ack_pending",
            "integer",
            "Ceiling on every consumer's `max_ack_pending`; one naming none gets it (below "
            "the default 1000).",
            "none",
        ),
        K(
            "max_request_batch",
            "integer",
            "Ceiling on every pull consumer's `max_batch`; one naming none gets it.",
            "none",
        ),
        K("max_ha_assets duplicate_window batch", "—", "Refused: not supported.", "—"),
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
}
