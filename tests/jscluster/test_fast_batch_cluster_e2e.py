"""Fast batch publish (API level 4) on a replicated (R3) stream, the reference and jetlake
side by side: the batch's flow acks and PubAck come from the leader, and every replica
holds the batch."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from nats.aio.msg import Msg

from tests.jscluster.support import eventually, js_cluster, server_name, stream_messages
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
