"""JetStream domains across a leafnode link: a hub stream sources an edge stream through
`$JS.edge.API`, and a link cut under publish load loses and doubles nothing.

The link runs through a relay in the test that can be cut (every connection aborted,
new ones refused) and restored; the edge keeps acknowledging its own publishes while
cut off, and redials once the relay takes connections again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
from nats.js.api import ExternalStream, StreamConfig, StreamSource

from tests.leafnode.conftest import LINK_TIMEOUT, linked
from tests.leafnode.relay import Relay
from tests.support.cluster import free_port
from tests.support.poll import poll, poll_async
from tests.support.servers import ServerProcess, start_server

TIMEOUT = 10.0


@dataclass
class Domains:
    hub: ServerProcess
    edge: ServerProcess
    relay: Relay


@pytest.fixture(
    params=[
        pytest.param(("jetlake", "jetlake"), id="jl-hub/jl-edge"),
        pytest.param(("nats-server", "jetlake"), id="ref-hub/jl-edge", marks=pytest.mark.soak),
        pytest.param(("jetlake", "nats-server"), id="jl-hub/ref-edge", marks=pytest.mark.soak),
    ]
)
async def domains(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Domains]:
    """A hub and an edge (each kind given), the edge's link through a relay. The
    reference pairings run under soak: the default run keeps to jetlake's own."""
    hub_kind, edge_kind = request.param
    hub_port, relay_port = free_port(), free_port()
    relay = Relay(relay_port, hub_port)
    await relay.start()
    hub_config = (
        f"server_name: hub\njetstream {{ store_dir: {tmp_path / 'hub'}, domain: hub }}\n"
        f"leafnodes {{ listen: 127.0.0.1:{hub_port} }}\n"
    )
    edge_config = (
        f"server_name: edge\njetstream {{ store_dir: {tmp_path / 'edge'}, domain: edge }}\n"
        f'leafnodes {{ reconnect: "250ms"\n'
        f'  remotes [ {{ url: "nats://127.0.0.1:{relay_port}" }} ] }}\n'
    )
    hub, edge = await asyncio.gather(  # the edge redials until the hub is up
        asyncio.to_thread(
            start_server, hub_kind, "-m", "-1", config=hub_config, tmp_path=tmp_path, name="hub"
        ),
        asyncio.to_thread(
            start_server, edge_kind, "-m", "-1", config=edge_config, tmp_path=tmp_path, name="edge"
        ),
    )
    await asyncio.to_thread(poll, lambda: linked(hub) and linked(edge), "the link", LINK_TIMEOUT)
    yield Domains(hub, edge, relay)
    with contextlib.suppress(AssertionError):
        await relay.cut()
    edge.stop(expect_code=None)
    hub.stop(expect_code=None)


async def sourced_after_cut(domains: Domains, cut_for: float) -> None:
    """Publish to the edge before, during and after a cut of `cut_for` seconds; the hub's
    stream ends with every message once, in the edge's order."""
    hub = await nats.connect(domains.hub.url)
    edge = await nats.connect(domains.edge.url)
    edge_js, hub_js = edge.jetstream(), hub.jetstream()
    await edge_js.add_stream(name="ORDERS", subjects=["orders.>"])
    await api_reached_over_the_link(hub)
    source = StreamSource(name="ORDERS", external=ExternalStream(api="$JS.edge.API"))
    await hub_js.add_stream(StreamConfig(name="HUB", sources=[source]))
    sent = 0

    async def publish(count: int) -> None:
        nonlocal sent
        for _ in range(count):
            ack = await edge_js.publish(f"orders.{sent % 7}", str(sent).encode(), timeout=TIMEOUT)
            sent += 1
            assert ack.seq == sent

    async def hub_has(count: int) -> None:
        async def holding() -> bool:
            return (await hub_js.stream_info("HUB")).state.messages >= count

        await poll_async(holding, f"the hub stream at {count}", TIMEOUT + cut_for)

    await publish(200)
    await hub_has(200)
    await domains.relay.cut()
    await asyncio.to_thread(poll, lambda: not linked(domains.edge), "the edge cut off", TIMEOUT)
    cut_until = time.monotonic() + cut_for
    while time.monotonic() < cut_until:  # the edge acknowledges alone meanwhile
        await publish(50)
    await domains.relay.start()
    await publish(200)
    await hub_has(sent)
    state = (await hub_js.stream_info("HUB")).state
    assert state.messages == sent
    copies = await hub_js.subscribe("orders.>", stream="HUB", ordered_consumer=True)
    seen = [int((await copies.next_msg(TIMEOUT)).data) for _ in range(sent)]
    assert seen == list(range(sent))  # each once, in order
    await hub.close()
    await edge.close()


async def api_reached_over_the_link(hub: nats.NATS) -> None:
    """The edge's domain API answers the hub; the plain API stays on each side."""
    info = await hub.request("$JS.edge.API.STREAM.INFO.ORDERS", b"", timeout=TIMEOUT)
    assert json.loads(info.data)["config"]["name"] == "ORDERS"
    local = await hub.request("$JS.hub.API.INFO", b"", timeout=TIMEOUT)
    assert json.loads(local.data)["type"] == "io.nats.jetstream.api.v1.account_info_response"
    plain = await hub.request("$JS.API.STREAM.INFO.ORDERS", b"", timeout=TIMEOUT)
    assert json.loads(plain.data)["error"]["err_code"] == 10059  # the hub has no ORDERS


async def test_a_cut_link_loses_and_doubles_nothing(domains: Domains) -> None:
    await sourced_after_cut(domains, cut_for=2.0)


@pytest.mark.soak
async def test_a_30_second_cut_loses_and_doubles_nothing(domains: Domains) -> None:
    await sourced_after_cut(domains, cut_for=30.0)
