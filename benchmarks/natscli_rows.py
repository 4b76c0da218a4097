"""The `nats bench` rows on one server of each kind: what a Go, Rust or Java client sees."""

from __future__ import annotations

from benchmarks import leafnode, natscli, websocket
from benchmarks.model import Measure, Profile, Workload, rate


def _natscli_row(
    name: str, profile: Profile, measure: Measure, label: str, target: float, text: str
) -> Workload:
    """A `nats bench` (Go client) row: what a Go, Rust or Java client would see."""
    return Workload(
        f"natscli-{name}",
        profile,
        measure,
        (rate(f"{label} (nats bench)", target, f"≥ {target:.0%} of ref"),),
        text,
    )


NATSCLI: tuple[Workload, ...] = (
    _natscli_row(
        "pub", Profile.CORE, natscli.publish, "core publish", 0.5, "nats bench pub, --count"
    ),
    _natscli_row(
        "pub-sub",
        Profile.CORE,
        natscli.pub_sub,
        "publish→subscribe",
        0.8,
        "nats bench sub receiving nats bench pub, --count; the subscriber's rate",
    ),
    _natscli_row(
        "service",
        Profile.CORE,
        natscli.service,
        "request/reply",
        0.9,
        "nats bench service request to service serve, --requests in turn",
    ),
    _natscli_row(
        "js-pub-async",
        Profile.JS,
        natscli.js_pub_async,
        "js publish async, default sync",
        0.8,
        "nats bench js pub async, --count, 500 in flight; each server's default sync",
    ),
    _natscli_row(
        "js-pub-sync",
        Profile.JS,
        natscli.js_pub_sync,
        "js publish sync, default sync",
        0.7,
        "nats bench js pub sync, --sync-count one at a time",
    ),
    _natscli_row(
        "js-fetch",
        Profile.JS,
        natscli.js_fetch,
        "pull fetch + ack",
        0.8,
        "nats bench js fetch drains --count messages stored by nats bench js pub async",
    ),
    _natscli_row(
        "js-ordered",
        Profile.JS,
        natscli.js_ordered,
        "ordered consumer",
        0.8,
        "nats bench js ordered reads --count messages stored by nats bench js pub async",
    ),
    _natscli_row(
        "kv-put", Profile.JS, natscli.kv_put, "KV put", 0.8, "nats bench kv put, --sync-count"
    ),
    Workload(
        "natscli-leafnode",
        Profile.OFFLINE,  # each side starts its own hub and leaf (benchmarks/leafnode)
        leafnode.measure("jetlake"),
        (rate("leaf → hub pub → sub (nats bench)"),),
        "a hub and a leaf of each kind: nats bench pub on the leaf, sub on the hub, --count",
        ref_measure=leafnode.measure("ref"),
        timeout=300.0,
    ),
    Workload(
        "natscli-leafnode-s2",
        Profile.OFFLINE,  # as natscli-leafnode, the link compressed (benchmarks/leafnode)
        leafnode.measure("jetlake", "s2_fast"),
        (rate("leaf → hub pub → sub, link in s2_fast (nats bench)"),),
        "natscli-leafnode with compression: s2_fast on the hub and the remote, --count",
        ref_measure=leafnode.measure("ref", "s2_fast"),
        timeout=300.0,
    ),
    Workload(
        "natscli-websocket",
        Profile.OFFLINE,  # each side starts its own server with a websocket {} block
        websocket.measure("jetlake"),
        (rate("publish→subscribe over WebSocket (nats bench)"),),
        "nats bench sub receiving nats bench pub, both on ws://, --count; the subscriber's rate",
        ref_measure=websocket.measure("ref"),
        timeout=300.0,
    ),
)
