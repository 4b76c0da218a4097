"""Routes over TLS (`cluster { tls {} }`) with route authorization: jetlake among
itself, jetlake with the reference, and a certificate from another CA refused.

Each server presents one certificate whichever side of a route it is on (it is a
TLS server when accepting, a TLS client when dialling), so the test PKI's route
certificate carries both usages, as a production one must.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from tests.conftest import MakeServer
from tests.jscluster.support import eventually
from tests.support.clients import crossed
from tests.support.cluster import free_port, peers, routez, stop_all, wait_mesh
from tests.support.poll import poll, poll_async
from tests.support.servers import ServerProcess, start_server
from tests.support.tls import Pki

pytestmark = pytest.mark.timeout(90)


def cluster_config(
    name: str,
    port: int,
    seeds: list[int],
    pki: Pki,
    *,
    ca: Path | None = None,
    password: str = "rp",
    jetstream: str = "",
) -> str:
    """A server of cluster C: TLS routes verified both ways, route credentials in the
    seed URLs."""
    routes = ", ".join(f'"nats://ru:{password}@127.0.0.1:{seed}"' for seed in seeds)
    return (
        f"server_name: {name}\n{jetstream}"
        f"cluster {{\n  name: C\n  listen: 127.0.0.1:{port}\n  pool_size: -1\n"
        f"  routes: [{routes}]\n"
        "  authorization { user: ru, password: rp }\n"
        f'  tls {{ cert_file: "{pki.route_cert}", key_file: "{pki.route_key}",\n'
        f'        ca_file: "{ca or pki.ca_cert}", verify: true, timeout: 2 }}\n}}\n'
    )


@pytest.fixture
def three_over_tls(pki: Pki, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """Three jetlake servers with JetStream, routed over TLS with route credentials."""
    ports = [free_port() for _ in range(3)]
    configs = [
        cluster_config(
            f"S{i}",
            port,
            [p for p in ports if p != port],
            pki,
            jetstream=f'jetstream {{ store_dir: "{tmp_path / f"js{i}"}" }}\n',
        )
        for i, port in enumerate(ports)
    ]

    servers: list[ServerProcess] = []
    try:
        for i, config in enumerate(configs):  # one by one: a start is CPU-bound
            servers.append(
                start_server("jetlake", "-m", "-1", config=config, tmp_path=tmp_path, name=f"S{i}")
            )
        yield servers
    finally:
        stop_all(servers)


async def test_three_jetlake_servers_replicate_an_r3_stream_over_tls_routes(
    three_over_tls: list[ServerProcess],
) -> None:
    servers = three_over_tls
    wait_mesh(servers, ["S0", "S1", "S2"])
    for server in servers:
        for route in routez(server)["routes"]:
            assert route["remote_name"] in {"S0", "S1", "S2"}
    nc = await nats.connect(servers[0].url, max_reconnect_attempts=0)
    try:
        js = nc.jetstream()
        await eventually(
            lambda: js.add_stream(name="TLSR3", subjects=["tls.>"], num_replicas=3),
            "an R3 stream over TLS routes",
        )
        for i in range(50):
            await js.publish(f"tls.{i}", str(i).encode())

        async def replicas_current() -> bool:
            found = await js.stream_info("TLSR3")
            replicas = (found.cluster.replicas or []) if found.cluster else []
            return (
                found.state.messages == 50
                and len(replicas) == 2
                and all(r.current for r in replicas)
            )

        await eventually(replicas_current, "both replicas current")
    finally:
        await nc.close()
    # A follower answers a read from its own copy.
    nc = await nats.connect(servers[2].url, max_reconnect_attempts=0)
    try:
        msg = await nc.jetstream().get_msg("TLSR3", 50)
        assert msg.data == b"49"
    finally:
        await nc.close()


async def test_jetlake_and_the_reference_route_over_tls(
    make_server: MakeServer, pki: Pki, server_kind: str
) -> None:
    """The test's kind accepts the other kind's TLS route; messages cross both ways."""
    other_kind = "jetlake" if server_kind == "nats-server" else "nats-server"
    pa, pb = free_port(), free_port()
    a = make_server(config=cluster_config("A", pa, [], pki))
    b = make_server(config=cluster_config("B", pb, [pa], pki), kind=other_kind)
    for server in (a, b):
        poll(lambda s=server: s.find_log(re.escape("Route connection created")), "the route")
    ca = await nats.connect(a.url, max_reconnect_attempts=0)
    cb = await nats.connect(b.url, max_reconnect_attempts=0)
    try:
        for sub_side, pub_side in ((ca, cb), (cb, ca)):
            sub = await sub_side.subscribe("over.tls")
            await sub_side.flush()
            await poll_async(
                lambda s=sub, p=pub_side: crossed(p, "over.tls", s, b"hello"),
                "the subscription's interest across the route",
                10,
            )
            await sub.unsubscribe()
    finally:
        await ca.close()
        await cb.close()


def test_a_certificate_from_another_ca_is_refused_and_logged(
    make_server: MakeServer, pki: Pki, other_pki: Pki
) -> None:
    pa = free_port()
    a = make_server("-m", "-1", config=cluster_config("A", pa, [], pki))
    stranger = cluster_config("X", free_port(), [pa], other_pki, ca=pki.ca_cert)
    x = make_server("-m", "-1", config=stranger)
    # The accepting side names the peer's address and the certificate check's verdict
    # (under TLS 1.3 the dialler only sees the connection closed).
    a.wait_for_log(r"127\.0\.0\.1:\d+ - rid:\d+ - TLS route handshake error: .*certif")
    a.wait_for_log("Router connection closed: TLS Handshake Failure")
    assert routez(a)["num_routes"] == 0
    assert peers(x) == set()
