"""Core NATS workloads: publish, publish→subscribe, request/reply.

All clients of a workload share one process and one event loop: on a 2-core machine
the server gets the other core, and a third process would only add contention.
"""

from __future__ import annotations

from time import perf_counter

from nats.aio.msg import Msg

from benchmarks.client import Counter, connect, latency_metrics
from benchmarks.model import Params

WARMUP_REQUESTS = 100
"""Requests sent before timing, so connection set-up and first-time paths are excluded."""


async def publish(url: str, p: Params) -> dict[str, float]:
    """One client publishes ``count`` messages with no subscriber, timed to flush's PONG.

    The flush round trip proves the server has read every message, so this is the
    server's ingest rate, bounded by how fast nats-py can write.
    """
    nc = await connect(url, "bench-pub")
    try:
        payload = p.payload
        start = perf_counter()
        for _ in range(p.count):
            await nc.publish("bench.core.pub", payload)
        await nc.flush(timeout=p.timeout)
        elapsed = perf_counter() - start
    finally:
        await nc.close()
    return {"msgs_per_s": p.count / elapsed}


async def pub_sub(url: str, p: Params) -> dict[str, float]:
    """One publisher and one subscriber connection; timed until the subscriber has all.

    This adds the server's fan-out and write path to the ingest rate above.
    """
    sub_nc = await connect(url, "bench-sub")
    pub_nc = await connect(url, "bench-pub")
    try:
        counter = Counter(p.count)

        async def on_msg(_: Msg) -> None:
            counter.hit()

        await sub_nc.subscribe("bench.core.ps", cb=on_msg)
        await sub_nc.flush(timeout=p.timeout)
        payload = p.payload
        start = perf_counter()
        for _ in range(p.count):
            await pub_nc.publish("bench.core.ps", payload)
        await pub_nc.flush(timeout=p.timeout)
        await counter.wait()
        elapsed = perf_counter() - start
    finally:
        await pub_nc.close()
        await sub_nc.close()
    return {"msgs_per_s": p.count / elapsed}


async def request_reply(url: str, p: Params) -> dict[str, float]:
    """``requests`` sequential requests to an echo responder on another connection.

    Sequential, so each sample is one full round trip through the server twice
    (request in, reply out) with nothing queued behind it: pure latency.
    """
    responder = await connect(url, "bench-responder")
    requester = await connect(url, "bench-requester")
    try:

        async def echo(msg: Msg) -> None:
            await msg.respond(msg.data)

        await responder.subscribe("bench.core.rr", cb=echo)
        await responder.flush(timeout=p.timeout)
        payload = p.payload
        for _ in range(WARMUP_REQUESTS):
            await requester.request("bench.core.rr", payload, timeout=p.timeout)
        samples: list[float] = []
        for _ in range(p.requests):
            start = perf_counter()
            await requester.request("bench.core.rr", payload, timeout=p.timeout)
            samples.append(perf_counter() - start)
    finally:
        await requester.close()
        await responder.close()
    return latency_metrics(samples)
