"""API level 2 on a replicated (R3) stream, the reference and jetlake side by side: an
atomic batch of counter increments commits on every replica and outlives its leader."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from nats.js.api import StreamConfig

from tests.jscluster.support import eventually, js_cluster, server_name, stream_messages
from tests.support.servers import enabled_kinds

pytestmark = [pytest.mark.timeout(120), pytest.mark.parametrize("kind", enabled_kinds())]


async def test_a_counter_batch_survives_its_leader(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        config = StreamConfig(
            name="CB", subjects=["cb.>"], num_replicas=3, allow_atomic=True, allow_msg_counter=True
        )
        await eventually(lambda: c.js.add_stream(config), "stream CB created")
        replies = []
        for seq, incr in enumerate(("1", "2", "3"), 1):
            headers = {"Nats-Incr": incr, "Nats-Batch-Id": "b", "Nats-Batch-Sequence": str(seq)}
            if seq == 3:
                headers["Nats-Batch-Commit"] = "1"
            replies.append(await c.nc.request("cb.total", b"", timeout=5, headers=headers))
        assert [r.data for r in replies[:2]] == [b"", b""]
        assert json.loads(replies[2].data) == {"stream": "CB", "seq": 3, "batch": "b", "count": 3}
        leader = await c.leader("CB")
        for server in c.servers:
            await eventually(
                lambda server=server: asyncio.sleep(0, stream_messages(server, "CB") == 3),
                f"{server_name(server)} holds the batch",
            )
        leader.kill()
        ack = await eventually(
            lambda: c.js.publish("cb.total", b"", headers={"Nats-Incr": "10"}),
            "an increment after failover",
        )
        stored = await eventually(  # the reference's new leader may still be settling
            lambda: c.js.get_msg("CB", ack.seq), "the increment read back"
        )
        assert (ack.seq, json.loads(stored.data)) == (
            4,
            {"val": "16"},
        )
