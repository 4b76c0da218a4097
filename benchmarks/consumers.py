"""Consumer workloads: pull fetch + ack, and an ordered push consumer.

The stream is filled before timing (pipelined publishes, as in ``js-pub-async``), so
each figure is the consume path alone: how fast stored messages reach a client.
"""

from __future__ import annotations

from time import perf_counter

from nats.aio.msg import Msg
from nats.js.client import JetStreamContext

from benchmarks.client import Counter
from benchmarks.jetstream import SUBJECT, bench_stream, publish_all
from benchmarks.model import Incomplete, Params

FETCH_BATCH = 100
"""Messages per pull request, the default of ``nats bench`` consumers."""


async def pull_fetch_ack(url: str, p: Params) -> dict[str, float]:
    """A durable pull consumer drains ``count`` messages in fetches, acking each one."""
    async with bench_stream(url, p) as js:
        await publish_all(js, p, p.count)
        return await drain_acking(js, p)


async def drain_acking(js: JetStreamContext, p: Params) -> dict[str, float]:
    """Fetch and ack the ``count`` stored messages through a durable pull consumer.

    Timed until the server confirms the last ack; consumer info must then show
    nothing left to ack.
    """
    sub = await js.pull_subscribe(SUBJECT, durable="bench-pull")
    received = 0
    start = perf_counter()
    while received < p.count:
        msgs = await sub.fetch(min(FETCH_BATCH, p.count - received), timeout=p.timeout)
        received += len(msgs)
        for msg in msgs[:-1]:
            await msg.ack()
        if received < p.count:
            await msgs[-1].ack()
        else:  # acks apply in order; the last one confirmed means all were
            await msgs[-1].ack_sync(timeout=p.timeout)
    info = await sub.consumer_info()
    elapsed = perf_counter() - start
    floor = info.ack_floor.stream_seq if info.ack_floor else 0
    if info.num_ack_pending or floor != p.count:
        raise Incomplete(f"acks not applied: {info.num_ack_pending} pending, floor {floor}")
    return {"msgs_per_s": p.count / elapsed}


async def push_ordered(url: str, p: Params) -> dict[str, float]:
    """An ordered push consumer (flow control, heartbeats: what KV watch and object get use)."""
    async with bench_stream(url, p) as js:
        await publish_all(js, p, p.count)
        counter = Counter(p.count)

        async def on_msg(_: Msg) -> None:
            counter.hit()

        start = perf_counter()
        sub = await js.subscribe(SUBJECT, cb=on_msg, ordered_consumer=True)
        await counter.wait()
        elapsed = perf_counter() - start
        await sub.unsubscribe()
    return {"msgs_per_s": p.count / elapsed}
