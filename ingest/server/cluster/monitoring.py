"""The cluster's part of the monitoring endpoints: `/routez` and the `/varz` cluster block.

Shapes follow the reference so dashboards and the CLI read them unchanged; a
jetlake cluster keeps one route per peer (no pool, no pinned system-account
route), which `pool_size: -1` states the way the reference does.
"""

from __future__ import annotations

import time
from typing import Any

from ingest.server.cluster.mesh import Cluster
from ingest.server.gofmt import number, rtt, timestamp, uptime


def routez(cluster: Cluster, *, subs: bool) -> dict[str, Any]:
    server = cluster.server
    now = time.time()
    routes = sorted(cluster.routes.values(), key=lambda r: r.rid)
    out: dict[str, Any] = {
        "server_id": server.server_id,
        "server_name": server.server_name,
        "now": timestamp(now),
    }
    out["num_routes"] = len(routes)
    entries = []
    for route in routes:
        entry: dict[str, Any] = {
            "rid": route.rid,
            "remote_id": route.remote_id,
            "remote_name": route.remote_name,
            "did_solicit": route.solicited,
            "is_configured": route.configured,
            "ip": route.host,
            "port": route.port,
            "start": timestamp(route.start),
            "last_activity": timestamp(route.last_activity),
            "rtt": rtt(route.rtt),
            "uptime": uptime(now - route.start),
            "idle": uptime(now - route.last_activity),
            "pending_size": route.pending(),
            "in_msgs": route.in_msgs,
            "out_msgs": route.out_msgs,
            "in_bytes": route.in_bytes,
            "out_bytes": route.out_bytes,
            "subscriptions": cluster.remote.count(route),
        }
        if subs:
            entry["subscriptions_list"] = cluster.remote.subjects(route)
        entry["compression"] = "off"
        entries.append(entry)
    out["routes"] = entries
    return out


def varz_cluster(cluster: Cluster) -> dict[str, Any]:
    """The `cluster` object of /varz."""
    config = cluster.config
    out: dict[str, Any] = {
        "name": cluster.name,
        "addr": config.host,
        "cluster_port": cluster.port,
        "auth_timeout": number(config.auth_timeout),
    }
    if config.routes:
        out["urls"] = [url.hostport for url in config.routes]
    out["tls_timeout"] = 2
    out["pool_size"] = -1
    return out
