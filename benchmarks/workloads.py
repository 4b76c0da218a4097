"""The table of workloads `jetlake bench` runs, and the targets it judges them by.

Targets are minimum scores (score > 1 = jetlake better, see ``Metric``), taken from
the project's goals: core publish ≥ 60 % of the reference, publish→subscribe ≥ 80 %,
request/reply p50 ≤ 1.5x the reference, durable JetStream publish ≥ 80 % of the
reference's default (fsync every 2 minutes); consumers, KV and Object Store ≥ 80 %;
the lake: PubAck to Delta p50 ≤ 1 s and p99 ≤ 2 s, counting by subject
over the history ≥ 20x faster than replaying it from the reference. Lake freshness and
compaction have no reference counterpart: jetlake-only rows, judged against an absolute
bound or not at all; so are Raft's (a 3-node group beside a group of one, figures
without a target). The cluster rows (three processes per side, an R3 stream; five for
the R5 row) have no target yet.
"""

from __future__ import annotations

from benchmarks import (
    consumers,
    core,
    jetstream,
    kv,
    lake,
    lake_sql,
    mqtt,
    natscli,
    raft,
    websocket,
)
from benchmarks.cluster import rows
from benchmarks.model import RATE, Metric, Profile, Workload, rate
from benchmarks.natscli_rows import NATSCLI

OPS = "ops/s"
MBPS = "MB/s"
MICROS = "µs"
SECONDS = "s"
MILLIS = "ms"
LAKE_ARGS = ("--lake",)  # jetlake's lake with its default settings


def _latencies(label: str, p50_target: float | None = None, text: str = "") -> tuple[Metric, ...]:
    return (
        Metric("p50_us", f"{label} p50", MICROS, False, p50_target, text),
        Metric("p99_us", f"{label} p99", MICROS, False),
    )


def _cluster_row(name: str, phase: rows.Phase, metrics: tuple[Metric, ...], text: str) -> Workload:
    """Three servers a side on loopback, an R3 file stream, then ``phase`` (benchmarks/cluster)."""
    return Workload(
        name,
        Profile.OFFLINE,
        rows.measure(phase, "jetlake"),
        metrics,
        f"3 servers, R3 file stream: {text}",
        ref_measure=rows.measure(phase, "ref"),
        timeout=300.0,
    )


def _cluster_natscli_row(
    name: str, workload: natscli.Replicated, label: str, text: str, nodes: int = rows.NODES
) -> Workload:
    """``nodes`` servers a side on loopback, a `nats bench` workload with R``nodes`` storage."""
    return Workload(
        f"cluster-natscli-{name}",
        Profile.OFFLINE,
        rows.natscli_measure(workload, "jetlake", nodes),
        (rate(f"R{nodes} {label} (nats bench)"),),
        f"{nodes} servers, R{nodes} file storage: {text}",
        ref_measure=rows.natscli_measure(workload, "ref", nodes),
        timeout=300.0,
    )


def _raft_metrics(sync: str) -> tuple[Metric, ...]:
    """Group of one and group of three side by side, for one sync setting."""
    return tuple(
        Metric(f"{group}_{key}", f"{label}, {size}, sync {sync}", unit, key == "eps")
        for key, label, unit in (
            ("eps", "commits, window in flight", "entries/s"),
            ("p50_us", "commit one at a time p50", MICROS),
            ("p99_us", "commit one at a time p99", MICROS),
        )
        for group, size in (("one", "1 node"), ("three", "3 nodes"))
    )


WORKLOADS: tuple[Workload, ...] = (
    Workload(
        "core-pub",
        Profile.CORE,
        core.publish,
        (rate("core publish", 0.60, "≥ 60% of ref"),),
        "one client publishes --count messages, timed to the flush PONG",
    ),
    Workload(
        "pub-sub",
        Profile.CORE,
        core.pub_sub,
        (rate("publish→subscribe", 0.80, "≥ 80% of ref"),),
        "one publisher, one subscriber, timed until all --count arrived",
    ),
    Workload(
        "req-reply",
        Profile.CORE,
        core.request_reply,
        _latencies("request/reply", 1 / 1.5, "p50 ≤ 1.5x ref"),
        "--requests sequential requests to an echo responder",
    ),
    Workload(
        "js-pub-async",
        Profile.JS,
        jetstream.publish_async,
        (rate("js publish_async, default sync", 0.80, "≥ 80% of ref default"),),
        "--count publish_async with --window acks in flight; each server's default sync",
    ),
    Workload(
        "js-pub-async-always",
        Profile.JS_SYNC_ALWAYS,
        jetstream.publish_async,
        (rate("js publish_async, sync always"),),
        "as js-pub-async, both servers with jetstream { sync_interval: always }",
    ),
    Workload(
        "js-pub-sync",
        Profile.JS,
        jetstream.publish_sync,
        _latencies("js publish sync, default sync"),
        "--sync-count publishes one at a time; each server's default sync",
    ),
    Workload(
        "js-pub-sync-always",
        Profile.JS_SYNC_ALWAYS,
        jetstream.publish_sync,
        _latencies("js publish sync, sync always"),
        "as js-pub-sync, both servers with jetstream { sync_interval: always }",
    ),
    Workload(
        "direct-get",
        Profile.JS,
        jetstream.direct_get,
        (
            Metric("seq_msgs_per_s", "direct get, sequential", RATE, True),
            Metric("conc_msgs_per_s", "direct get, concurrent", RATE, True),
        ),
        "--requests DIRECT.GET by sequence, then again from --concurrency tasks",
    ),
    Workload(
        "js-pull",
        Profile.JS,
        consumers.pull_fetch_ack,
        (rate("pull fetch + ack", 0.80, "≥ 80% of ref"),),
        "a durable pull consumer fetches and acks --count stored messages",
    ),
    Workload(
        "js-push",
        Profile.JS,
        consumers.push_ordered,
        (rate("ordered push consumer", 0.80, "≥ 80% of ref"),),
        "an ordered push consumer (flow control) receives --count stored messages",
    ),
    Workload(
        "kv",
        Profile.JS,
        kv.kv_put_get,
        (
            Metric("put_ops_per_s", "KV put", OPS, True, 0.80, "≥ 80% of ref"),
            Metric("get_ops_per_s", "KV get", OPS, True, 0.80, "≥ 80% of ref"),
        ),
        "--requests puts over 1000 keys from --concurrency tasks, then as many gets",
    ),
    Workload(
        "object-store",
        Profile.JS,
        kv.object_put_get,
        (
            Metric("put_mb_per_s", "Object Store put", MBPS, True, 0.80, "≥ 80% of ref"),
            Metric("get_mb_per_s", "Object Store get", MBPS, True, 0.80, "≥ 80% of ref"),
        ),
        "one 32 MiB object put in 128 KiB chunks, then read back and compared",
    ),
    Workload(
        "kv-always",
        Profile.JS_SYNC_ALWAYS,
        kv.kv_put_get,
        (Metric("put_ops_per_s", "KV put, sync always", OPS, True),),
        "as kv, both servers with jetstream { sync_interval: always }: equal durability",
    ),
    Workload(
        "object-store-always",
        Profile.JS_SYNC_ALWAYS,
        kv.object_put_get,
        (Metric("put_mb_per_s", "Object Store put, sync always", MBPS, True),),
        "as object-store, both servers with jetstream { sync_interval: always }",
    ),
    Workload(
        "mqtt",
        Profile.MQTT,
        mqtt.pub_sub,
        tuple(
            Metric(key, label, RATE, True, 0.80, "≥ 80% of ref")
            for key, label in (
                ("qos0_msgs_per_s", "MQTT QoS 0 publish→subscribe"),
                ("qos1_msgs_per_s", "MQTT QoS 1 publish→subscribe"),
                ("nats_msgs_per_s", "MQTT → NATS subscriber"),
            )
        ),
        "aiomqtt: --count messages QoS 0 then QoS 1 (1000 in flight) publisher → subscriber, "
        "then QoS 0 to a nats-py subscriber; both servers with the same mqtt {} block",
        timeout=600.0,  # aiomqtt moves a few thousand messages a second: 3 phases of --count
    ),
    Workload(
        "mqtt-websocket",
        Profile.OFFLINE,  # each side starts its own server with mqtt {} and websocket {}
        websocket.mqtt_measure("jetlake"),
        tuple(
            Metric(key, label, RATE, True)
            for key, label in (
                ("qos0_msgs_per_s", "MQTT QoS 0 publish→subscribe over WebSocket"),
                ("qos1_msgs_per_s", "MQTT QoS 1 publish→subscribe over WebSocket"),
            )
        ),
        "aiomqtt (ws transport, /mqtt) --count at QoS 0 then QoS 1 (1000 in flight) to an "
        "aiomqtt subscriber, both on the server's websocket listener",
        ref_measure=websocket.mqtt_measure("ref"),
        timeout=300.0,
    ),
    Workload(
        "lake-freshness",
        Profile.JS,
        lake.freshness,
        (
            Metric("delta_s_p50", "PubAck → row in Delta p50", SECONDS, False, bound=1.0),
            Metric("delta_s_p99", "PubAck → row in Delta p99", SECONDS, False, bound=2.0),
            Metric("union_ms_p50", "PubAck → row in union view p50", MILLIS, False),
            Metric("union_ms_p99", "PubAck → row in union view p99", MILLIS, False),
            Metric("union_first_pct", "in the view at the first query", "%", True, bound=100.0),
        ),
        "jetlake -js --lake, defaults: 100 publishes 0.25 s apart timed to Delta "
        "(deltalake), then 20 to a warm session's refreshed view",
        sides=("jetlake",),
        jetlake_args=LAKE_ARGS,
        timeout=300.0,
    ),
    Workload(
        "lake-freshness-s3",
        Profile.OFFLINE,  # the measure starts the S3 server, then jetlake on it
        lake.freshness_s3,
        (
            Metric("delta_s_p50", "PubAck → row in Delta (S3) p50", SECONDS, False),
            Metric("delta_s_p99", "PubAck → row in Delta (S3) p99", SECONDS, False, bound=5.0),
        ),
        "jetlake -js --lake_dir s3://… on SeaweedFS's S3 server on this machine, defaults "
        "otherwise: 100 publishes 0.25 s apart timed to Delta (deltalake)",
        sides=("jetlake",),
        timeout=400.0,
    ),
    Workload(
        "lake-history",
        Profile.JS,
        lake.history_sql,
        (
            Metric(
                "seconds",
                "count by subject: Spark over lake vs replay",
                SECONDS,
                False,
                20.0,
                "≥ 20x faster than replay",
            ),
            Metric(
                "duckdb_ms",
                "count by subject: DuckDB (jetlake inspect) over lake vs replay",
                MILLIS,
                False,
                100.0,
                "≥ 100x faster than replay",
            ),
            Metric(
                "duckdb_cli_ms",
                "the same, as a `jetlake inspect` command (new process)",
                MILLIS,
                False,
            ),
        ),
        "--count (default 1M) messages on 16 subjects; jetlake: Spark SQL, warm session, "
        "once compacted, then DuckDB over the same lake + tail, in process and as the "
        "command; ref: an ordered nats-py consumer reads them back",
        ref_measure=lake.history_replay,
        jetlake_args=LAKE_ARGS,
        timeout=600.0,
    ),
    Workload(
        "lake-sql",
        Profile.JS,  # the reference replays; the measure starts jetlake with its SQL service
        lake_sql.doors,
        (
            Metric(
                "cli_s",
                "count by subject: `jetlake sql` (new process, warm service)",
                SECONDS,
                False,
                bound=1.5,
            ),
            Metric(
                "connect_s",
                "count by subject: Spark Connect client session",
                SECONDS,
                False,
                bound=0.5,
            ),
            Metric(
                "nats_s", "count by subject: SQL over NATS (nats-py)", SECONDS, False, bound=0.5
            ),
            Metric(
                "duck_s",
                "count by subject: SQL over NATS on DuckDB (Jl-Sql-Engine: duckdb)",
                SECONDS,
                False,
                bound=0.08,  # 100x faster than the replay of 1M messages (~8 s)
            ),
            Metric(
                "probe_pct",
                "acked before the query, in its result (1,000 probes)",
                "%",
                True,
                bound=100.0,
            ),
            Metric(
                "duck_probe_pct",
                "acked before the query, in its result (1,000 probes, DuckDB)",
                "%",
                True,
                bound=100.0,
            ),
        ),
        "--count (default 1M) messages on 16 subjects through a jetlake server with its SQL "
        "service, once compacted: the count through each door of the warm service, then "
        "1,000 publish-then-query probes over NATS; ref: the same nats-py replay",
        ref_measure=lake_sql.replay,
        timeout=1800.0,
    ),
    Workload(
        "lake-history-s3",
        Profile.JS,  # the reference replays; the measure starts the S3 server, then jetlake on it
        lake.history_s3,
        tuple(
            Metric(key, f"{label} (lake on S3)", unit, False)
            for key, label, unit in (
                ("seconds", "count by subject: Spark over lake vs replay", SECONDS),
                ("duckdb_ms", "count by subject: DuckDB (jetlake inspect) vs replay", MILLIS),
                ("duckdb_cli_ms", "the same, as a `jetlake inspect --lake s3://…` command", MILLIS),
            )
        ),
        "lake-history with jetlake's lake in a bucket of SeaweedFS's S3 server on this machine "
        "(--lake_dir s3://…); ref: the same nats-py replay",
        ref_measure=lake.history_replay,
        timeout=900.0,
    ),
    Workload(
        "lake-compaction",
        Profile.OFFLINE,
        lake.compaction,
        (
            Metric("mb_per_s", "compaction (segments → Delta)", MBPS, True),
            Metric("mb_per_s_core", "compaction per core", MBPS, True),
            Metric("rows_per_s", "compaction rows", RATE, True),
        ),
        "--count (default 1M) messages built as sealed segments, one warm compact pass",
        sides=("jetlake",),
        timeout=600.0,
    ),
    Workload(
        "lake-compaction-s3",
        Profile.OFFLINE,
        lake.compaction_s3,
        (
            Metric("mb_per_s", "compaction to S3 (segments → Delta)", MBPS, True),
            Metric("mb_per_s_core", "compaction to S3 per core", MBPS, True),
            Metric("rows_per_s", "compaction rows to S3", RATE, True),
        ),
        "lake-compaction with the lake in a bucket of SeaweedFS's S3 server on this machine",
        sides=("jetlake",),
        timeout=900.0,
    ),
    Workload(
        "lake-typed",
        Profile.OFFLINE,
        lake.typed_compaction,
        (
            *(
                Metric(f"{name}_{key}", f"compaction, {what}", unit, True)
                for name, what in (
                    ("raw", "raw"),
                    ("jsoni", "JSON inferred"),
                    ("jsons", "JSON + JSON Schema"),
                    ("avro", "Avro"),
                )
                for key, unit in (("rows_per_s", RATE), ("mb_per_s", MBPS))
            ),
            Metric("from_json_query_s", "filter via from_json on raw", SECONDS, False),
            Metric("typed_query_s", "filter on a typed column", SECONDS, False),
        ),
        "--count (default 1M) ~100-byte orders per format as sealed segments, one warm "
        "compact pass each; then count by customer.id over the raw and the typed table",
        sides=("jetlake",),
        timeout=1800.0,
    ),
    Workload(
        "raft",
        Profile.OFFLINE,
        raft.window,
        _raft_metrics("window"),
        "--count --size-byte entries, --window in flight, then --sync-count one at a time: a "
        "3-node Raft group (3 processes, loopback TCP) vs SingleNodeGroup; default sync window",
        sides=("jetlake",),
        timeout=300.0,
    ),
    Workload(
        "raft-always",
        Profile.OFFLINE,
        raft.always,
        _raft_metrics("always"),
        "as raft, every node with sync_interval: always",
        sides=("jetlake",),
        timeout=300.0,
    ),
    _cluster_row(
        "cluster-pub-async",
        rows.publish_async,
        (rate("R3 js publish_async"),),
        "--count publish_async with --window acks in flight",
    ),
    _cluster_row(
        "cluster-pub-sync",
        rows.publish_sync,
        _latencies("R3 js publish sync"),
        "--sync-count publishes one at a time",
    ),
    _cluster_row(
        "cluster-pull",
        rows.pull_fetch_ack,
        (rate("R3 pull fetch + ack"),),
        "a durable R3 pull consumer fetches and acks --count stored messages",
    ),
    _cluster_row(
        "cluster-failover",
        rows.failover,
        (Metric("failover_ms", "R3 leader failover (SIGKILL → next ack)", MILLIS, False),),
        "SIGKILL of the stream leader, timed to the next publish acked via a survivor",
    ),
    Workload(
        "cluster-mqtt",
        Profile.OFFLINE,  # three servers a side with the same mqtt {} block (benchmarks/mqtt)
        mqtt.cluster_measure("jetlake"),
        (rate("R3 MQTT QoS 1 publish→subscribe, across servers"),),
        "3 servers with mqtt {}: aiomqtt --count QoS 1 (1000 in flight) from a publisher on "
        "one server to a subscriber on another",
        ref_measure=mqtt.cluster_measure("ref"),
        timeout=600.0,
    ),
    _cluster_natscli_row(
        "js-pub-async", natscli.js_pub_async, "js publish async", "nats bench js pub async, --count"
    ),
    _cluster_natscli_row(
        "js-pub-sync",
        natscli.js_pub_sync,
        "js publish sync",
        "nats bench js pub sync, --sync-count one at a time",
    ),
    _cluster_natscli_row(
        "js-fetch",
        natscli.js_fetch,
        "pull fetch + ack",
        "nats bench js fetch drains --count messages stored by nats bench js pub async",
    ),
    _cluster_natscli_row(
        "kv-put", natscli.kv_put, "KV put", "nats bench kv put --replicas, --sync-count"
    ),
    _cluster_natscli_row(
        "r5-js-pub-async",
        natscli.js_pub_async,
        "js publish async",
        "nats bench js pub async, --count",
        nodes=5,
    ),
    *NATSCLI,
)


def _raft(workload: Workload) -> bool:
    """Raft's rows start node processes and no server: a group of their own, kept out of "js"."""
    return workload.name.split("-")[0] == "raft"


def _cluster(workload: Workload) -> bool:
    """The cluster rows start three servers a side themselves: a group of their own, not "js"."""
    return workload.name.startswith("cluster-")


def _natscli(workload: Workload) -> bool:
    """The `nats bench` rows: a group of their own, so "core" and "js" stay nats-py's."""
    return workload in NATSCLI


def _lake(workload: Workload) -> bool:
    """The lake's rows take minutes and a JVM: a group of their own, kept out of "js"."""
    return workload.name.startswith("lake-")


def _mqtt(workload: Workload) -> bool:
    """The one-server MQTT rows: over TCP (its own profile) and over WebSocket."""
    return workload.profile is Profile.MQTT or workload.name.startswith("mqtt-")


def select(names: list[str]) -> list[Workload]:
    """Workloads by name or group ("core", "js", "lake", "raft", "cluster", "mqtt",
    "natscli"); all if ``names`` is empty.

    Raises ``KeyError`` naming the unknown entry, so the CLI can list the valid ones.
    """
    if not names:
        return list(WORKLOADS)
    chosen: list[Workload] = []
    for name in names:
        if name == "js":
            matches = [
                w
                for w in WORKLOADS
                if w.profile not in (Profile.CORE, Profile.MQTT)
                and not (_lake(w) or _raft(w) or _cluster(w) or _natscli(w) or _mqtt(w))
            ]
        elif name == "natscli":
            matches = list(NATSCLI)
        elif name == "lake":
            matches = [w for w in WORKLOADS if _lake(w)]
        elif name == "raft":
            matches = [w for w in WORKLOADS if _raft(w)]
        elif name == "cluster":
            matches = [w for w in WORKLOADS if _cluster(w)]
        elif name == "mqtt":
            matches = [w for w in WORKLOADS if _mqtt(w)]
        elif name == "core":
            matches = [w for w in WORKLOADS if w.profile is Profile.CORE and not _natscli(w)]
        else:
            matches = [w for w in WORKLOADS if name in (w.name, w.profile.value)]
        if not matches:
            raise KeyError(name)
        chosen.extend(w for w in matches if w not in chosen)
    return [w for w in WORKLOADS if w in chosen]
