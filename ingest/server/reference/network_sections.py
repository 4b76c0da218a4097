"""The rows of the sections that open listeners or name accounts: cluster, MQTT,
leafnodes, WebSocket and accounts."""

from __future__ import annotations

from ingest.server.reference.entries import CL, LN, MQ, RL, WS, Field, K, Key

NETWORK_SECTIONS: dict[str, tuple[Key, ...]] = {
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
