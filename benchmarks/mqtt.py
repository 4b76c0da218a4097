"""MQTT workloads: aiomqtt publish→subscribe at QoS 0 and 1, MQTT → NATS; QoS 1 on a cluster.

One workload, three figures, on one server started with the same `mqtt {}` block
for both sides, so the session and stream set-up is paid once. Each phase uses
its own topic and fresh clients; the clients share this process's event loop,
as the core workloads do. ``cluster_measure`` runs QoS 1 across three servers
(benchmarks/cluster/rows.py starts them), publisher and subscriber on different ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from functools import partial
from time import perf_counter

import aiomqtt
from nats.aio.msg import Msg

from benchmarks.client import Counter, connect
from benchmarks.cluster import rows
from benchmarks.model import Measure, Params, Skipped

WINDOW = 1_000
"""Publishes awaited together. aiomqtt completes a publish one loop turn after paho
writes it (QoS 0) or at its PUBACK (QoS 1): awaited one by one, either would measure
the client's latency rather than the server's throughput."""

CONFIG = "mqtt { host: 127.0.0.1, port: -1 }\n"
QUIET = logging.getLogger("benchmarks.mqtt.client")
QUIET.setLevel(logging.ERROR)  # aiomqtt warns on every publish beyond 10 in flight


@contextlib.asynccontextmanager
async def _client(
    port: int, name: str, p: Params, *, websocket: bool = False
) -> AsyncIterator[aiomqtt.Client]:
    """A clean-session client whose QoS 1 window matches what the publisher keeps in
    flight; over WebSocket (paho's ``websockets`` transport, path ``/mqtt``) when asked."""
    client = aiomqtt.Client(
        "127.0.0.1",
        port,
        identifier=name,
        clean_session=True,
        max_inflight_messages=WINDOW,
        timeout=p.timeout,
        logger=QUIET,
        transport="websockets" if websocket else "tcp",
        websocket_path="/mqtt" if websocket else None,
    )
    async with client:
        yield client


async def _count(client: aiomqtt.Client, counter: Counter) -> None:
    async for _ in client.messages:
        counter.hit()


async def _publish(client: aiomqtt.Client, topic: str, qos: int, p: Params) -> None:
    """In windows of ``WINDOW`` publishes (QoS 1: ``WINDOW`` PUBACKs awaited)."""
    payload = p.payload
    for start in range(0, p.count, WINDOW):
        batch = min(WINDOW, p.count - start)
        await asyncio.gather(*(client.publish(topic, payload, qos=qos) for _ in range(batch)))


async def _pub_sub(
    port: int, qos: int, p: Params, sub_port: int = 0, *, websocket: bool = False
) -> float:
    """Messages per second from one aiomqtt publisher to one subscriber at ``qos``; the
    subscriber on ``sub_port`` when given (another server of a cluster), both on the
    server's WebSocket listener with ``websocket``."""
    topic = f"bench/mqtt/qos{qos}"
    async with (
        _client(sub_port or port, f"bench-sub-{qos}", p, websocket=websocket) as sub,
        _client(port, f"bench-pub-{qos}", p, websocket=websocket) as pub,
    ):
        await sub.subscribe(topic, qos=qos)  # SUBACK: the subscription is in place
        counter = Counter(p.count)
        reader = asyncio.create_task(_count(sub, counter))
        try:
            start = perf_counter()
            await _publish(pub, topic, qos, p)
            await counter.wait()
            elapsed = perf_counter() - start
        finally:
            reader.cancel()
    return p.count / elapsed


async def ws_pub_sub(port: int, qos: int, p: Params) -> float:
    """`_pub_sub` with both clients on the WebSocket listener at ``port``."""
    return await _pub_sub(port, qos, p, websocket=True)


async def _mqtt_to_nats(url: str, port: int, p: Params) -> float:
    """Messages per second from an aiomqtt QoS 0 publisher to a nats-py subscriber."""
    nc = await connect(url, "bench-nats-sub")
    try:
        counter = Counter(p.count)

        async def on_msg(_: Msg) -> None:
            counter.hit()

        await nc.subscribe("bench.mqtt.nats", cb=on_msg)
        await nc.flush(timeout=p.timeout)
        async with _client(port, "bench-pub-nats", p) as pub:
            start = perf_counter()
            await _publish(pub, "bench/mqtt/nats", 0, p)
            await counter.wait()
            elapsed = perf_counter() - start
    finally:
        await nc.close()
    return p.count / elapsed


async def pub_sub(url: str, p: Params) -> dict[str, float]:
    """QoS 0 and QoS 1 MQTT → MQTT, then MQTT → NATS, on one server."""
    if not p.mqtt_port:
        raise Skipped("the server logged no MQTT port")
    return {
        "qos0_msgs_per_s": await _pub_sub(p.mqtt_port, 0, p),
        "qos1_msgs_per_s": await _pub_sub(p.mqtt_port, 1, p),
        "nats_msgs_per_s": await _mqtt_to_nats(url, p.mqtt_port, p),
    }


def cluster_measure(side: str) -> Measure:
    """The harness's measure of the cluster row on one side: three fresh servers of that kind."""
    return partial(_cluster_qos1, command=rows.COMMANDS[side])


async def _cluster_qos1(_url: str, p: Params, *, command: list[str]) -> dict[str, float]:
    """QoS 1 from a publisher on the first server to a subscriber on the second.

    Both servers keep QoS 1 messages in the account's replicated MQTT streams, so each
    one is stored on three servers and delivered across a route. The streams appear
    once the meta group can place them: a probe stream waits for that first.
    """
    assert p.store is not None, "the harness sets the store of every run"
    async with rows._cluster(command, p.store, rows.NODES, CONFIG) as nodes:
        if not all(node.mqtt_port for node in nodes):
            raise Skipped("a server logged no MQTT port")
        await rows.placeable(nodes[0].url, rows.NODES)
        rate = await _pub_sub(nodes[0].mqtt_port, 1, p, sub_port=nodes[1].mqtt_port)
        return {"msgs_per_s": rate}
