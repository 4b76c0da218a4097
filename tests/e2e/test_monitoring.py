"""Monitoring HTTP endpoints (``-m``): what dashboards and health checks read.

Values differ between servers (ids, times, the reference's internal system
subscriptions), so shapes are compared with a live reference -- every field
jetlake reports that the reference also reports must have the same JSON type
-- and values are checked as deltas caused by the test's own traffic.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Connect, MakeServer, ServerPool
from tests.support.clients import barrier
from tests.support.http import get_json, http_get, shape
from tests.support.servers import ServerProcess, start_server

VARZ_REQUIRED = {
    "in_msgs": "int",
    "in_bytes": "int",
    "out_msgs": "int",
    "out_bytes": "int",
    "connections": "int",
    "server_id": "str",
    "server_name": "str",
    "version": "str",
    "port": "int",
    "max_payload": "int",
}
CONN_REQUIRED = {
    "cid": "int",
    "ip": "str",
    "port": "int",
    "in_msgs": "int",
    "out_msgs": "int",
    "in_bytes": "int",
    "out_bytes": "int",
    "subscriptions": "int",
    "name": "str",
    "lang": "str",
    "version": "str",
}


@pytest.fixture
def monitored(make_server: MakeServer) -> ServerProcess:
    """A server with the monitoring port on a random free port."""
    server = make_server("-m", "-1")
    assert server.http_port, "no 'Starting http monitor on' line in the log"
    return server


def assert_same_types(mine: dict[str, Any], ref: dict[str, Any], where: str) -> None:
    """Fields present in both must agree on JSON type (number vs str vs dict...).

    int and float are one JSON type: Go prints a whole float64 (the
    reference's ``cpu: 0``) without a decimal point.
    """
    common = mine.keys() & ref.keys()
    number = {"int": "number", "float": "number"}
    mine_t = {k: number.get(t, t) for k, t in shape(mine).items()}
    ref_t = {k: number.get(t, t) for k, t in shape(ref).items()}
    diff = {k: (mine_t[k], ref_t[k]) for k in common if mine_t[k] != ref_t[k]}
    assert not diff, f"{where}: field types differ from the reference (jetlake, ref): {diff}"


async def test_healthz(monitored: ServerProcess) -> None:
    """Load balancers and orchestrators probe /healthz."""
    assert await get_json(monitored.http_url + "/healthz") == {"status": "ok"}


async def test_varz(monitored: ServerProcess, connect: Connect) -> None:
    """/varz carries identity, limits and traffic counters that move with traffic."""
    pub, sub_nc = await connect(monitored), await connect(monitored)
    sub = await sub_nc.subscribe("v")
    await barrier(sub_nc)
    before = await get_json(monitored.http_url + "/varz")
    for _ in range(10):
        await pub.publish("v", b"12345")
    await barrier(pub, sub_nc)
    assert sub.pending_msgs == 10
    after = await get_json(monitored.http_url + "/varz")

    assert {k: shape(after).get(k) for k in VARZ_REQUIRED} == VARZ_REQUIRED
    assert after["port"] == monitored.port
    assert after["max_payload"] == 1024 * 1024
    assert after["connections"] == 2
    assert after["in_msgs"] - before["in_msgs"] == 10
    assert after["in_bytes"] - before["in_bytes"] == 50
    assert after["out_msgs"] - before["out_msgs"] == 10
    assert after["out_bytes"] - before["out_bytes"] == 50


async def test_connz(monitored: ServerProcess, connect: Connect) -> None:
    """/connz lists connections with their counters; ?subs=1 adds subscriptions_list."""
    nc = await connect(monitored, name="watched")
    await nc.subscribe("a.b")
    await nc.subscribe("c", queue="q")
    await nc.publish("a.b", b"hello")
    await barrier(nc)

    connz = await get_json(monitored.http_url + "/connz")
    assert connz["num_connections"] == 1
    (conn,) = connz["connections"]
    assert {k: shape(conn).get(k) for k in CONN_REQUIRED} == CONN_REQUIRED
    assert conn["name"] == "watched"
    assert conn["lang"] == "python3"
    assert conn["subscriptions"] == 2
    assert (conn["in_msgs"], conn["in_bytes"], conn["out_msgs"], conn["out_bytes"]) == (1, 5, 1, 5)
    assert "subscriptions_list" not in conn
    # Estimated from INFO to CONNECT before any keepalive PING measures it: never "0s".
    assert re.fullmatch(r"\d+(\.\d+)?(ns|µs|ms|s)", conn["rtt"]) and conn["rtt"] != "0s"

    detailed = await get_json(monitored.http_url + "/connz?subs=1")
    (conn,) = detailed["connections"]
    assert sorted(conn["subscriptions_list"]) == ["a.b", "c"]


async def test_subsz(monitored: ServerProcess, connect: Connect) -> None:
    """/subsz counts subscriptions (the reference includes its internal ones), inserts,
    removes and matches, and samples fanout from its match cache."""
    before = await get_json(monitored.http_url + "/subsz")
    nc = await connect(monitored)
    for subject in ("s.1", "s.2", "s.*"):
        await nc.subscribe(subject)
    gone = await nc.subscribe("s.3")
    await gone.unsubscribe()
    for _ in range(2):
        await nc.publish("s.1", b"x")
    await barrier(nc)
    subsz = await get_json(monitored.http_url + "/subsz")
    assert isinstance(subsz["num_subscriptions"], int)
    assert subsz["num_subscriptions"] - before["num_subscriptions"] == 3
    assert subsz["num_inserts"] - before["num_inserts"] >= 4
    assert subsz["num_removes"] - before["num_removes"] >= 1
    assert subsz["num_matches"] - before["num_matches"] >= 2
    assert 0 < subsz["cache_hit_rate"] <= 1  # the second publish hit the cache
    assert subsz["max_fanout"] >= 2  # s.1 reaches s.1 and s.*
    assert 0 < subsz["avg_fanout"] <= subsz["max_fanout"]


async def test_unknown_path_is_404(monitored: ServerProcess) -> None:
    """Typos in dashboards show as 404, not as an empty 200."""
    assert (await http_get(monitored.http_url + "/nope")).status == 404


@pytest.mark.parametrize("path", ["/varz", "/connz?subs=1", "/subsz", "/healthz"])
async def test_json_shapes_match_reference(
    server_kind: str, server_pool: ServerPool, connect: Connect, path: str
) -> None:
    """Field names jetlake shares with the reference have the reference's JSON types."""
    mine = server_pool.get(server_kind, "-m", "-1")
    ref = server_pool.get("nats-server", "-m", "-1")
    docs = []
    for server in (mine, ref):
        nc = await connect(server, name="shape")
        await nc.subscribe("shape.x")
        await barrier(nc)
        docs.append(await get_json(server.http_url + path))
        await nc.close()
    assert_same_types(docs[0], docs[1], path)
    conns = [d.get("connections") for d in docs]
    if all(isinstance(c, list) and c for c in conns):
        assert_same_types(docs[0]["connections"][0], docs[1]["connections"][0], path + " conn")


@pytest.fixture
def jetlake_monitored(tmp_path: Path) -> Iterator[ServerProcess]:
    """jetlake alone: the reference has no /metrics, so there is nothing to compare."""
    server = start_server("jetlake", "-m", "-1", tmp_path=tmp_path, name="jl-metrics")
    yield server
    server.stop()


async def test_metrics_prometheus(jetlake_monitored: ServerProcess, connect: Connect) -> None:
    """Prometheus text with counters that move with traffic."""
    monitored = jetlake_monitored
    nc = await connect(monitored)
    await nc.publish("m", b"x")
    await barrier(nc)
    resp = await http_get(monitored.http_url + "/metrics")
    assert resp.status == 200
    assert resp.content_type.startswith("text/plain"), resp.content_type
    text = resp.body.decode()
    samples = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    names = {ln.split("{")[0].split()[0] for ln in samples}
    assert any(n.startswith(("jetlake_", "nats_")) for n in names), names
    assert "# TYPE" in text
    for ln in samples:
        float(ln.rsplit(" ", 1)[-1])  # every sample ends in a number


TWO_MINUTES_NS = 120_000_000_000


@pytest.mark.parametrize(
    ("sync", "expected"),
    [
        ("sync_interval: always", {"sync_interval": TWO_MINUTES_NS, "sync_always": True}),
        ('sync_interval: "10s"', {"sync_interval": 10_000_000_000}),
        ("", None),  # the defaults differ: the reference's 2m, jetlake's 10ms
    ],
    ids=["always", "10s", "default"],
)
async def test_jsz_reports_sync_as_the_reference(
    make_server: MakeServer,
    server_kind: str,
    tmp_path: Path,
    sync: str,
    expected: dict[str, Any] | None,
) -> None:
    if expected is None:
        ours = server_kind != "nats-server"
        expected = {"sync_interval": 10_000_000 if ours else TWO_MINUTES_NS}
    store = tmp_path / "js"
    server = make_server("-m", "-1", config=f'jetstream {{ store_dir: "{store}"\n{sync}\n}}\n')
    config = (await get_json(server.http_url + "/jsz"))["config"]
    assert {k: v for k, v in config.items() if k.startswith("sync")} == expected
