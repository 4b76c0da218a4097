"""`$JS.API.CONSUMER.RESET` on a replicated (R3) consumer, the reference and jetlake side by
side: the consumer's leader answers once the reset is replicated, so a new leader after a
stepdown resumes from the reset position; a consumer nobody leads gets no answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nats.errors
import pytest

from tests.jetstream.test_consumer_reset_e2e import RESET, TYPE, position
from tests.jscluster.support import Running, eventually, js_cluster, request
from tests.support.servers import enabled_kinds

pytestmark = [pytest.mark.timeout(120), pytest.mark.parametrize("kind", enabled_kinds())]


async def durable(c: Running, stream: str, name: str) -> None:
    """An R3 pull consumer with explicit acks, retried while its stream's group settles."""
    config = {"durable_name": name, "ack_policy": "explicit", "num_replicas": 3}
    body = json.dumps({"stream_name": stream, "config": config}).encode()
    subject = f"$JS.API.CONSUMER.CREATE.{stream}.{name}"
    created = await eventually(lambda: request(c.nc, subject, body), f"consumer {name} created")
    assert "error" not in created, created


async def test_a_reset_is_replicated_to_the_next_leader(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("S", ["s.>"])
        for i in range(10):
            await c.js.publish(f"s.{i % 3}", b"%d" % (i + 1))
        await durable(c, "S", "C")
        sub = await c.js.pull_subscribe_bind("C", "S")
        msgs = await sub.fetch(4, timeout=5)
        for msg in msgs[:2]:
            await msg.ack_sync()
        doc = await request(c.nc, RESET + "C")
        assert doc["type"] == TYPE and doc["reset_seq"] == 3
        assert position(doc) == (0, 2, 0, 2, 0, 0, 8)
        doc = await request(c.nc, RESET + "C", b'{"seq": 6}')
        assert doc["reset_seq"] == 6 and position(doc) == (0, 5, 0, 5, 0, 0, 5)
        doc = await request(c.nc, RESET + "C", b'{"seq": 2}')
        assert doc["reset_seq"] == 2
        doc = await request(c.nc, RESET + "C", b'{"seq": 6}')  # the last word

        before = (await request(c.nc, "$JS.API.CONSUMER.INFO.S.C"))["cluster"]["leader"]
        stepped = await request(c.nc, "$JS.API.CONSUMER.LEADER.STEPDOWN.S.C")
        assert stepped.get("success") is True, stepped

        async def moved() -> Any:
            info = await request(c.nc, "$JS.API.CONSUMER.INFO.S.C", timeout=1)
            leader = (info.get("cluster") or {}).get("leader")
            return info if leader and leader != before else None

        info = await eventually(moved, "a new consumer leader")
        assert position(info) == (0, 5, 0, 5, 0, 0, 5)
        msgs = await eventually(lambda: sub.fetch(1, timeout=1), "a delivery from the new leader")
        assert [(m.metadata.sequence.stream, m.metadata.num_delivered) for m in msgs] == [(6, 1)]

        with pytest.raises(nats.errors.TimeoutError):
            await c.nc.request(RESET + "X", b"", timeout=0.5)
