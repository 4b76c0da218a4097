"""A stream's replica count changed by an update, R1 → R3 → R1, while a publisher writes:
the new replicas catch up from the leader, every acknowledged message stays, and the
dropped replicas go. Both kinds, through nats-py as users update streams."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from nats.js.api import StreamConfig
from nats.js.errors import BadRequestError

from tests.jscluster.support import Running, eventually, js_cluster, stream_messages
from tests.support.servers import enabled_kinds

pytestmark = [pytest.mark.timeout(150), pytest.mark.parametrize("kind", enabled_kinds())]


async def _write(c: Running, acked: list[int], stop: asyncio.Event) -> None:
    """Publish until told to stop; a publish unanswered mid-change is sent again with the
    same message id, so the stream holds it once whether or not the first one landed."""
    while not stop.is_set():
        with contextlib.suppress(Exception):
            body = f"m{len(acked)}"
            ack = await c.js.publish("s.x", body.encode(), timeout=2, headers={"Nats-Msg-Id": body})
            acked.append(ack.seq)


async def _replicas(c: Running, want: int) -> bool:
    """The leader reports `want` - 1 current replicas."""
    info = await c.js.stream_info("S")
    replicas = (info.cluster.replicas if info.cluster else None) or []
    return len(replicas) == want - 1 and all(r.current for r in replicas)


async def _changed(c: Running, replicas: int, acked: list[int]) -> None:
    stop = asyncio.Event()
    writer = asyncio.create_task(_write(c, acked, stop))
    before = len(acked) + 20
    await eventually(lambda: _after(acked, before), "publishes before the change")
    info = await c.js.update_stream(StreamConfig(name="S", subjects=["s.>"], num_replicas=replicas))
    assert info.config.num_replicas == replicas
    after = len(acked) + 20
    await eventually(lambda: _after(acked, after), "publishes after the change")
    stop.set()
    await writer
    await eventually(lambda: _replicas(c, replicas), f"{replicas - 1} current replicas", 60)


async def _after(acked: list[int], count: int) -> bool:
    await asyncio.sleep(0.05)  # the writer's pace, not a synchronisation
    return len(acked) >= count


async def test_replicas_up_and_down_under_publish_load(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("S", ["s.>"], replicas=1)
        acked: list[int] = []
        await _changed(c, 3, acked)
        last = (await c.js.stream_info("S")).state.last_seq
        assert acked == list(range(1, len(acked) + 1)) and last == acked[-1]
        await eventually(lambda: _all_hold(c, last, 3), "every replica holding every message", 60)
        await _changed(c, 1, acked)
        last = (await c.js.stream_info("S")).state.last_seq
        assert acked == list(range(1, len(acked) + 1)) and last == acked[-1]
        await eventually(lambda: _all_hold(c, last, 1), "one replica left", 60)
        for seq in range(1, last + 1):
            assert (await c.js.get_msg("S", seq)).data == f"m{seq - 1}".encode()


async def _all_hold(c: Running, last: int, replicas: int) -> list[int | None] | None:
    """Each server's replica: `replicas` of them hold every message, the others none."""
    held = [stream_messages(s, "S") for s in c.servers]
    full, gone = held.count(last), held.count(None)
    return held if (full, gone) == (replicas, len(held) - replicas) else None


async def test_more_replicas_than_servers_is_refused(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("S", ["s.>"], replicas=1)
        with pytest.raises(BadRequestError) as refused:
            await c.js.update_stream(StreamConfig(name="S", subjects=["s.>"], num_replicas=5))
        assert refused.value.err_code == 10005, refused.value
        assert refused.value.description == "no suitable peers for placement"
