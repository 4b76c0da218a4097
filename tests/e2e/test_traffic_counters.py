"""Traffic counters (/varz, /connz) count what clients send and receive, as the reference's.

The server's own messages (system events at connect and close, JetStream's internal
publishes, API answers on their way in) are not client input, and what goes to the
server's own subscriptions (the JetStream API, acks, a stream's intake) is not output.
One scenario runs against a fresh server of each kind and the counters must agree;
`out_bytes` after JetStream traffic is left out, as the API's JSON answers differ in
size (ids, times).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.support.clients import barrier
from tests.support.http import get_json
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess, start_server

COUNTERS = ("in_msgs", "in_bytes", "out_msgs", "out_bytes")


@pytest.fixture
def fresh_pair(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """A fresh jetlake and a fresh reference, JetStream on: no traffic but the test's."""
    servers = [
        start_server(kind, "-m", "-1", "-js", "-sd", str(tmp_path / kind), tmp_path=tmp_path)
        for kind in ("jetlake", "nats-server")
    ]
    yield servers[0], servers[1]
    for server in servers:
        server.stop(expect_code=None)


async def counters(server: ServerProcess, path: str = "/varz") -> dict[str, int]:
    varz = await get_json(server.http_url + path)
    return {key: varz[key] for key in COUNTERS}


async def closed(server: ServerProcess, count: int) -> dict[str, dict[str, int]]:
    """Per-connection counters of the closed connections, by name, once all `count` are."""

    async def closed_conns() -> list[dict[str, Any]]:
        return list((await get_json(server.http_url + "/connz?state=closed"))["connections"])

    conns = await poll_async(
        closed_conns,
        f"{count} closed connections",
        5,
        until=lambda conns: len(conns) >= count,
        interval=0.01,
    )
    return {c["name"]: {key: c[key] for key in COUNTERS} for c in conns}


async def scenario(server: ServerProcess) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    app = await nats.connect(server.url, name="app", allow_reconnect=False)
    listener = await nats.connect(server.url, name="listener", allow_reconnect=False)
    got = await listener.subscribe("core.x")
    await barrier(listener)
    for i in range(100):
        await app.publish(f"hello.{i}", b"A")  # nobody listens
    for _ in range(5):
        await app.publish("core.x", b"hello")
    await barrier(app, listener)
    assert got.pending_msgs == 5
    seen["core"] = await counters(server)

    js = app.jetstream()
    await js.add_stream(name="S", subjects=["js.>"])
    for i in range(10):
        await js.publish(f"js.{i}", b"stored")
    sub = await js.pull_subscribe("js.>", durable="d")
    msgs = await sub.fetch(10, timeout=2)
    for msg in msgs[:5]:
        await msg.ack()
    for msg in msgs[5:]:
        await msg.ack_sync()
    info = await sub.consumer_info()
    assert (info.num_ack_pending, info.num_pending) == (0, 0)
    await barrier(app)
    js_counts = await counters(server)
    del js_counts["out_bytes"]
    seen["jetstream"] = js_counts
    await app.close()
    await listener.close()
    conns = await closed(server, 2)
    conns["app"].pop("out_bytes")
    seen["connections"] = conns
    final = await counters(server)  # the system's events at close are not client input
    del final["out_bytes"]
    seen["closed"] = final
    return seen


async def test_counters_match_the_reference(
    fresh_pair: tuple[ServerProcess, ServerProcess],
) -> None:
    ours, ref = fresh_pair
    theirs = await scenario(ref)
    assert theirs["core"] == {"in_msgs": 105, "in_bytes": 125, "out_msgs": 5, "out_bytes": 25}
    assert await scenario(ours) == theirs
