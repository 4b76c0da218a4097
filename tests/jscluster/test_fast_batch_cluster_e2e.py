"""Fast batch publish (API level 4) on a replicated (R3) stream, the reference and jetlake
side by side: the batch's flow acks and PubAck come from the leader, every replica
holds the batch, and a batch carries on after a leader change (stepdown or kill -9)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from nats.aio.msg import Msg

from tests.jscluster.support import eventually, js_cluster, request, server_name, stream_messages
from tests.support.servers import enabled_kinds

pytestmark = [pytest.mark.timeout(120), pytest.mark.parametrize("kind", enabled_kinds())]


async def test_a_fast_batch_reaches_every_replica(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        config = {"name": "FB", "subjects": ["fb.>"], "num_replicas": 3, "allow_batched": True}

        async def create() -> Any:
            reply = await c.nc.request(
                "$JS.API.STREAM.CREATE.FB", json.dumps(config).encode(), timeout=5
            )
            created = json.loads(reply.data)
            assert "error" not in created, created
            return created

        await eventually(create, "stream FB created")
        got: list[Any] = []
        done = asyncio.Event()

        async def on_reply(msg: Msg) -> None:
            got.append(json.loads(msg.data))
            if "stream" in got[-1]:
                done.set()

        await c.nc.subscribe("fbr.>", cb=on_reply)
        for seq in range(1, 21):
            op = 0 if seq == 1 else 2 if seq == 20 else 1
            await c.nc.publish("fb.a", b"%d" % seq, reply=f"fbr.b.5.fail.{seq}.{op}.$FI")
        await asyncio.wait_for(done.wait(), 10)
        assert got[0] == {"type": "ack", "seq": 0, "msgs": 5}
        assert got[-1] == {"stream": "FB", "seq": 20, "batch": "b", "count": 20}
        acked = [m["seq"] for m in got[1:-1]]
        assert acked == sorted(acked) and set(acked) <= {5, 10, 15}
        for server in c.servers:
            await eventually(
                lambda server=server: asyncio.sleep(0, stream_messages(server, "FB") == 20),
                f"{server_name(server)} holds the batch",
            )


@pytest.mark.parametrize("stop", ["stepdown", "kill"])
async def test_fast_batches_carry_on_after_a_leader_change(
    kind: str, tmp_path: Path, stop: str
) -> None:
    """The new leader tells each batch's publisher, with a flow ack for the last message
    stored (the flow started afresh: 1 with two batches in flight), where to go on from;
    both a `gap: ok` and a `gap: fail` batch then go on to their PubAck, as on the
    reference."""
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        config = {"name": "FB", "subjects": ["fb.>"], "num_replicas": 3, "allow_batched": True}

        async def create() -> Any:
            created = await request(c.nc, "$JS.API.STREAM.CREATE.FB", json.dumps(config).encode())
            assert "error" not in created, created
            return created

        await eventually(create, "stream FB created")
        got: dict[str, list[Any]] = {"b": [], "c": []}

        async def on_reply(msg: Msg) -> None:
            got[msg.subject.split(".")[1]].append(json.loads(msg.data))

        await c.nc.subscribe("fbr.>", cb=on_reply)
        gaps = {"b": "ok", "c": "fail"}

        async def send(batch: str, seqs: range, last_op: int = 1) -> None:
            for seq in seqs:
                op = 0 if seq == 1 else last_op if seq == seqs[-1] else 1
                reply = f"fbr.{batch}.5.{gaps[batch]}.{seq}.{op}.$FI"
                await c.nc.publish("fb.a", b"%d" % seq, reply=reply)

        for batch in gaps:
            await send(batch, range(1, 11))
        stored = {"type": "ack", "seq": 10, "msgs": 5}
        await eventually(lambda: asyncio.sleep(0, stored in got["b"]), "b's 10 messages stored")
        await eventually(
            lambda: asyncio.sleep(0, any(a.get("seq") == 7 for a in got["c"])),
            "c's first 7 messages stored",
        )
        leader = await c.leader("FB")
        for replies in got.values():
            replies.clear()
        if stop == "kill":
            leader.kill()
        else:
            stepped = await request(c.nc, "$JS.API.STREAM.LEADER.STEPDOWN.FB")
            assert stepped.get("success") is True, stepped

        async def resumed() -> bool:
            await asyncio.sleep(0)
            return all(replies for replies in got.values())

        await eventually(resumed, "a flow ack from the new leader for each batch")
        assert got == {
            "b": [{"type": "ack", "seq": 10, "msgs": 1}],
            "c": [{"type": "ack", "seq": 10, "msgs": 1}],
        }
        for batch in gaps:
            await send(batch, range(11, 15), last_op=2)

        async def acked() -> bool:
            await asyncio.sleep(0)
            return all("stream" in replies[-1] for replies in got.values())

        await eventually(acked, "both PubAcks")
        assert [r for r in got["b"] if "stream" in r] == [
            {"stream": "FB", "seq": 24, "batch": "b", "count": 14}
        ]
        assert [r for r in got["c"] if "stream" in r] == [
            {"stream": "FB", "seq": 28, "batch": "c", "count": 14}
        ]
        assert got["b"][1:3] == [
            {"type": "ack", "seq": 11, "msgs": 2},
            {"type": "ack", "seq": 13, "msgs": 4},
        ]
