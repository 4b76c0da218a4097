"""KV and Object Store workloads, through nats-py's own KV and Object Store APIs.

Buckets are created as nats-py creates them by default (a KV bucket without direct
get, so reads go through STREAM.MSG.GET), since that is what users run.
"""

from __future__ import annotations

import asyncio
import io
import random
from collections.abc import Awaitable, Callable, Iterator
from time import perf_counter

from benchmarks.jetstream import js_context
from benchmarks.model import Incomplete, Params

BUCKET = "bench"
KEYS = 1_000
"""Distinct keys the puts cycle over: each put also retires the key's previous revision."""
OBJECT_BYTES = 32 * 1024 * 1024
MB = 1_000_000


async def kv_put_get(url: str, p: Params) -> dict[str, float]:
    """``requests`` puts over ``KEYS`` keys from ``concurrency`` tasks, then as many gets."""
    async with js_context(url, p, "bench-kv") as js:
        kv = await js.create_key_value(bucket=BUCKET)
        value = p.payload
        keys = [f"k{i % KEYS}" for i in range(p.requests)]

        async def put(todo: Iterator[str]) -> None:
            for key in todo:
                await kv.put(key, value)

        async def get(todo: Iterator[str]) -> None:
            for key in todo:
                if (await kv.get(key)).value != value:
                    raise Incomplete(f"get of {key} returned another value")

        put_s = await _timed(put, keys, p.concurrency)
        stored = (await kv.status()).values
        if stored != min(KEYS, p.requests):
            raise Incomplete(f"bucket holds {stored} values, expected {min(KEYS, p.requests)}")
        get_s = await _timed(get, keys, p.concurrency)
    return {"put_ops_per_s": p.requests / put_s, "get_ops_per_s": p.requests / get_s}


async def _timed(
    work: Callable[[Iterator[str]], Awaitable[None]], keys: list[str], concurrency: int
) -> float:
    """Seconds for ``concurrency`` tasks sharing one iterator to work through ``keys``."""
    shared = iter(keys)
    start = perf_counter()
    await asyncio.gather(*(work(shared) for _ in range(concurrency)))
    return perf_counter() - start


async def object_put_get(url: str, p: Params) -> dict[str, float]:
    """One ``OBJECT_BYTES`` object put (128 KiB chunks) and read back byte-identical."""
    async with js_context(url, p, "bench-obj") as js:
        obs = await js.create_object_store(BUCKET)
        data = random.Random(0).randbytes(OBJECT_BYTES)
        start = perf_counter()
        await obs.put("blob", data)
        put_s = perf_counter() - start
        sink = io.BytesIO()  # nats-py's default concatenates bytes: quadratic, client-bound
        start = perf_counter()
        await obs.get("blob", writeinto=sink)
        get_s = perf_counter() - start
        if sink.getvalue() != data:
            raise Incomplete("the object read back differs from the one put")
    return {"put_mb_per_s": OBJECT_BYTES / MB / put_s, "get_mb_per_s": OBJECT_BYTES / MB / get_s}
