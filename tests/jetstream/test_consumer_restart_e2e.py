"""A durable consumer survives kill -9 exactly: acked stays acked, nothing unacked is lost.

jetlake only: this is jetlake's promise (a confirmed ack is on disk before the
client hears of it), stronger than the reference's, whose consumer state is
flushed in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import random

import nats.errors
from nats.js import api as jsapi

from tests.conftest import Connect
from tests.support.servers import ServerProcess

TOTAL = 300


async def test_consumer_resumes_exactly_after_sigkill(
    jetlake_js: ServerProcess, connect: Connect
) -> None:
    nc = await connect(jetlake_js)
    js = nc.jetstream()
    await js.add_stream(name="R", subjects=["r"])
    for i in range(TOTAL):
        await js.publish("r", str(i + 1).encode())
    cfg = jsapi.ConsumerConfig(ack_wait=1.0, max_ack_pending=50)
    sub = await js.pull_subscribe("r", durable="d", config=cfg)
    acked: set[int] = set()  # confirmed: must never come back
    uncertain: set[int] = set()  # ack sent, confirmation lost in the kill: either outcome is right
    kill_after = random.Random(7).randrange(40, 200)
    killer = None
    with contextlib.suppress(Exception):
        while len(acked) < TOTAL:
            for msg in await sub.fetch(10, timeout=2):
                seq = msg.metadata.sequence.stream
                uncertain.add(seq)
                await msg.ack_sync(timeout=2)
                uncertain.discard(seq)
                acked.add(seq)
                if len(acked) == kill_after and killer is None:
                    killer = asyncio.create_task(asyncio.to_thread(jetlake_js.kill))
    assert killer is not None, "the consumer finished before the kill"
    await killer
    with contextlib.suppress(Exception):
        await nc.close()
    assert 0 < len(acked) < TOTAL

    await asyncio.to_thread(jetlake_js.start, port=jetlake_js.port)
    nc = await connect(jetlake_js)
    js = nc.jetstream()
    info = await js.consumer_info("R", "d")
    unacked = set(range(1, TOTAL + 1)) - acked - uncertain
    assert info.ack_floor.stream_seq <= min(unacked)
    sub = await js.pull_subscribe_bind("d", stream="R")
    after: list[int] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:  # until every unacked message came back and the consumer has nothing left
        assert loop.time() < deadline, f"never redelivered: {sorted(unacked - set(after))}"
        with contextlib.suppress(nats.errors.TimeoutError):
            for msg in await sub.fetch(50, timeout=2):  # unacked ones return after ack_wait
                after.append(msg.metadata.sequence.stream)
                await msg.ack_sync()
        if unacked <= set(after):
            info = await js.consumer_info("R", "d")
            if info.num_pending == 0 and info.num_ack_pending == 0:
                break
    assert not acked & set(after), "an acknowledged message was delivered again"
    assert len(after) == len(set(after))
    assert set(after) <= unacked | uncertain
    assert info.ack_floor.stream_seq == TOTAL
