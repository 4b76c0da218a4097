"""JetStream workloads: async and sync publish to a file stream, direct get.

Each workload creates its own stream on a fresh server with an empty store dir, so
neither server is measured on top of another workload's leftovers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from time import perf_counter

from nats.errors import NoRespondersError
from nats.js.api import StorageType
from nats.js.client import JetStreamContext
from nats.js.errors import ServiceUnavailableError

from benchmarks.client import connect, latency_metrics
from benchmarks.model import Incomplete, Params, Skipped

STREAM = "BENCH"
SUBJECT = "bench.js"
WARMUP_PUBLISHES = 20
"""Sync publishes before timing: the first ones pay for file creation on both servers."""


@asynccontextmanager
async def js_context(
    url: str, p: Params, name: str = "bench-js"
) -> AsyncIterator[JetStreamContext]:
    """A JetStream context on a fresh connection, or ``Skipped`` without JetStream.

    A server without JetStream answers ``$JS.API.INFO`` with a 503 ("JetStream not
    enabled") or not at all (no responders); either way the workload is skipped.
    """
    nc = await connect(url, name)
    try:
        js = nc.jetstream(timeout=p.timeout, publish_async_max_pending=p.window)
        try:
            await js.account_info()
        except (ServiceUnavailableError, NoRespondersError) as exc:
            raise Skipped(f"JetStream not enabled ({exc!r})") from exc
        yield js
    finally:
        await nc.close()


@asynccontextmanager
async def bench_stream(
    url: str, p: Params, *, allow_direct: bool = False
) -> AsyncIterator[JetStreamContext]:
    """A JetStream context with a fresh file-storage stream on ``SUBJECT``."""
    async with js_context(url, p) as js:
        await js.add_stream(
            name=STREAM,
            subjects=[SUBJECT],
            storage=StorageType.FILE,
            allow_direct=allow_direct,
        )
        yield js


async def publish_all(
    js: JetStreamContext, p: Params, count: int, subjects: Sequence[str] = (SUBJECT,)
) -> None:
    """Publish ``count`` messages round-robin over ``subjects``, at most ``window`` acks
    in flight; all must succeed.

    ``publish_async`` blocks on nats-py's semaphore when the window is full, like
    ``nats bench --js`` with a fixed number of outstanding acks.
    """
    payload = p.payload
    n = len(subjects)
    futures = [await js.publish_async(subjects[i % n], payload) for i in range(count)]
    await js.publish_async_completed()
    failed = [f for f in futures if f.cancelled() or f.exception() is not None]
    if failed:
        first = "cancelled" if failed[0].cancelled() else repr(failed[0].exception())
        raise Incomplete(f"{len(failed)}/{count} publishes not acknowledged, first: {first}")


async def check_stored(js: JetStreamContext, count: int) -> None:
    """Acks alone do not prove storage; the stream must hold every message."""
    stored = (await js.stream_info(STREAM)).state.messages
    if stored != count:
        raise Incomplete(f"stream holds {stored} messages, expected {count}")


async def publish_async(url: str, p: Params) -> dict[str, float]:
    """``count`` pipelined publishes, timed until the last ack: the stream's ingest rate."""
    async with bench_stream(url, p) as js:
        start = perf_counter()
        await publish_all(js, p, p.count)
        elapsed = perf_counter() - start
        await check_stored(js, p.count)
    return {"msgs_per_s": p.count / elapsed}


async def publish_sync(url: str, p: Params) -> dict[str, float]:
    """``sync_count`` publishes one at a time: the latency of one store-and-ack."""
    async with bench_stream(url, p) as js:
        payload = p.payload
        for _ in range(WARMUP_PUBLISHES):
            await js.publish(SUBJECT, payload)
        samples: list[float] = []
        for _ in range(p.sync_count):
            start = perf_counter()
            await js.publish(SUBJECT, payload)
            samples.append(perf_counter() - start)
        await check_stored(js, WARMUP_PUBLISHES + p.sync_count)
    return latency_metrics(samples)


async def direct_get(url: str, p: Params) -> dict[str, float]:
    """Fill ``requests`` messages (untimed), then read each back by sequence twice.

    Once sequentially (latency-bound) and once from ``concurrency`` tasks sharing one
    connection (server-throughput-bound); every reply must carry the asked sequence.
    """
    async with bench_stream(url, p, allow_direct=True) as js:
        await publish_all(js, p, p.requests)

        async def read(seqs: Iterator[int]) -> None:
            for seq in seqs:
                msg = await js.get_msg(STREAM, seq, direct=True)
                if msg.seq != seq:
                    raise Incomplete(f"direct get of seq {seq} returned seq {msg.seq}")

        start = perf_counter()
        await read(iter(range(1, p.requests + 1)))
        sequential = perf_counter() - start

        shared = iter(range(1, p.requests + 1))
        start = perf_counter()
        await asyncio.gather(*(read(shared) for _ in range(p.concurrency)))
        concurrent = perf_counter() - start
    return {
        "seq_msgs_per_s": p.requests / sequential,
        "conc_msgs_per_s": p.requests / concurrent,
    }
