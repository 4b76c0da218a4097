"""Acknowledged means durable: SIGKILL at random points, restart, every acked message is there.

Also the retention state a restart must reproduce (limits, deletes) and the
reference's treatment of memory streams (gone after a restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import random

from tests.conftest import Connect
from tests.support.servers import ServerProcess


async def test_acked_messages_survive_sigkill(js_server: ServerProcess, connect: Connect) -> None:
    rng = random.Random(20240601)
    acked: dict[int, bytes] = {}
    nc = await connect(js_server)
    await nc.jetstream().add_stream(name="k", subjects=["k"])
    await nc.close()
    for round_no in range(3):
        nc = await connect(js_server)
        js = nc.jetstream(publish_async_max_pending=256)
        kill_at = rng.randrange(50, 400)
        killer: asyncio.Task[int] | None = None
        sent: list[tuple[bytes, asyncio.Future]] = []
        for i in range(600):
            if i == kill_at:
                killer = asyncio.create_task(asyncio.to_thread(js_server.kill))
            payload = f"{round_no}-{i}-".encode() + bytes(rng.randrange(256) for _ in range(32))
            if killer is not None and killer.done():
                break
            try:  # bounded: with the server gone, the pending-ack window never frees
                sent.append((payload, await asyncio.wait_for(js.publish_async("k", payload), 2)))
            except Exception:
                break
        assert killer is not None
        await killer
        if sent:
            await asyncio.wait([f for _, f in sent], timeout=2)
        for payload, future in sent:
            if future.done() and not future.cancelled() and future.exception() is None:
                acked[future.result().seq] = payload
        with contextlib.suppress(Exception):
            await nc.close()
        await asyncio.to_thread(js_server.start, port=js_server.port)
    assert acked, "the kill came before any ack; the test proved nothing"
    nc = await connect(js_server)
    js = nc.jetstream()
    info = await js.stream_info("k")
    assert info.state.last_seq >= max(acked)
    assert info.state.messages == info.state.last_seq - info.state.first_seq + 1  # no gaps
    for seq, payload in sorted(acked.items()):
        assert (await js.get_msg("k", seq=seq)).data == payload


async def test_limits_and_deletes_hold_across_restart(
    js_server: ServerProcess, connect: Connect
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="l", subjects=["l.*"], max_msgs=5, max_msgs_per_subject=2)
    for i in range(10):
        await js.publish(f"l.{i % 3}", str(i).encode())
    await js.delete_msg("l", 9)
    before = await js.stream_info("l", subjects_filter=">")
    await nc.close()
    await js_server.restart_async()
    nc = await connect(js_server)
    js = nc.jetstream()
    after = await js.stream_info("l", subjects_filter=">")
    assert after.state == before.state
    assert (after.state.messages, after.state.first_seq, after.state.last_seq) == (4, 6, 10)
    await js.publish("l.0", b"10")  # seq 11 pushes seq 7 out of subject l.0
    state = (await js.stream_info("l")).state
    assert (state.messages, state.first_seq, state.num_deleted) == (4, 6, 2)


async def test_memory_streams_are_gone_after_restart(
    js_server: ServerProcess, connect: Connect
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="mem", subjects=["mem"], storage="memory")
    assert (await js.publish("mem", b"x")).seq == 1
    assert (await js.stream_info("mem")).state.messages == 1
    await nc.close()
    await js_server.restart_async()
    nc = await connect(js_server)
    names = await nc.jetstream().streams_info()
    assert [s.config.name for s in names] == []
