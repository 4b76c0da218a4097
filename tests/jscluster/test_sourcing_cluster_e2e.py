"""Durable sourcing between replicated (R3) streams, the reference and jetlake side by side:
a mirror and a source of a work queue, each with its own leader, get every message once
while the origin's and their own leaders change; a source reading through the user's own
durable does too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.jscluster.support import Running, eventually, js_cluster, request

pytestmark = [pytest.mark.timeout(180), pytest.mark.parametrize("kind", ["nats-server", "jetlake"])]


async def _create(c: Running, name: str, config: dict[str, Any]) -> Any:
    async def attempt() -> Any:
        body = json.dumps({"name": name, "num_replicas": 3, **config}).encode()
        made = await request(c.nc, f"$JS.API.STREAM.CREATE.{name}", body)
        assert "error" not in made, made
        return made

    return await eventually(attempt, f"stream {name} created")


async def _count(c: Running, stream: str, count: int) -> bool:
    info = await request(c.nc, f"$JS.API.STREAM.INFO.{stream}")
    return info["state"]["messages"] == count


async def _names(c: Running) -> list[str]:
    """The work queue's consumers (ask in `eventually`: after a restart the reference's
    API may time out for a while)."""
    listed = await request(c.nc, "$JS.API.CONSUMER.NAMES.WQ")
    return list(listed.get("consumers") or [])


async def _readers(c: Running, count: int) -> bool:
    """Until both read, a work queue hands a message to whichever reader exists."""
    return len(await _names(c)) == count


async def _publish(c: Running, start: int, stop: int) -> None:
    for i in range(start, stop):
        await eventually(lambda i=i: c.js.publish("w.a", b"%d" % i), f"message {i} stored")


async def _step_down(c: Running, stream: str) -> None:
    before = (await request(c.nc, f"$JS.API.STREAM.INFO.{stream}"))["cluster"]["leader"]
    await eventually(
        lambda: request(c.nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}"),
        f"{stream} stepped down",
    )

    async def moved() -> bool:
        info = await request(c.nc, f"$JS.API.STREAM.INFO.{stream}")
        leader = info.get("cluster", {}).get("leader")
        return bool(leader) and leader != before

    await eventually(moved, f"{stream} has a new leader")


async def _origin_seqs(c: Running, stream: str) -> list[int]:
    seqs = []
    info = await request(c.nc, f"$JS.API.STREAM.INFO.{stream}")
    for seq in range(info["state"]["first_seq"], info["state"]["last_seq"] + 1):
        msg = await c.js.get_msg(stream, seq=seq)
        seqs.append(int((msg.headers or {})["Nats-Stream-Source"].split(" ")[1]))
    return seqs


async def test_replicated_sourcing_survives_leader_changes(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await _create(c, "WQ", {"subjects": ["w.>"], "retention": "workqueue"})
        await _create(c, "M", {"mirror": {"name": "WQ"}})
        await _create(c, "S", {"sources": [{"name": "WQ"}]})
        await eventually(lambda: _readers(c, 2), "both readers on the work queue")
        await _publish(c, 0, 20)
        await eventually(lambda: _count(c, "M", 20), "the mirror caught up")
        await eventually(lambda: _count(c, "S", 20), "the source caught up")
        await _step_down(c, "WQ")
        await _publish(c, 20, 40)
        await _step_down(c, "S")
        await _step_down(c, "M")
        await _publish(c, 40, 60)
        await eventually(lambda: _count(c, "M", 60), "the mirror has every message", 60)
        await eventually(lambda: _count(c, "S", 60), "the source has every message", 60)
        await eventually(lambda: _count(c, "WQ", 0), "the work queue let them go", 60)
        assert await _origin_seqs(c, "S") == list(range(1, 61))
        mirror = await request(c.nc, "$JS.API.STREAM.INFO.M")
        assert (mirror["state"]["first_seq"], mirror["state"]["last_seq"]) == (1, 60)


async def test_a_killed_leader_neither_loses_nor_repeats_a_copy(kind: str, tmp_path: Path) -> None:
    """The source's leader, which reads the work queue, dies by kill -9 mid-stream and
    comes back: another replica leads and reads on from the copies the group holds."""
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await _create(c, "WQ", {"subjects": ["w.>"], "retention": "workqueue"})
        await _create(c, "S", {"sources": [{"name": "WQ"}]})
        await eventually(lambda: _readers(c, 1), "the reader on the work queue")
        await _publish(c, 0, 30)
        victim = await c.leader("S")
        victim.kill()
        await _publish(c, 30, 60)
        await victim.restart_async()
        await eventually(lambda: _count(c, "S", 60), "the source has every message", 60)
        await eventually(lambda: _count(c, "WQ", 0), "the work queue let them go", 60)
        assert await _origin_seqs(c, "S") == list(range(1, 61))


async def test_a_source_on_its_own_durable_survives_a_killed_leader(
    kind: str, tmp_path: Path
) -> None:
    """The link resets the user's replicated durable instead of making a reader; its
    leader dies by kill -9 and another replica resets the durable again and reads on."""
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await _create(c, "WQ", {"subjects": ["w.>"], "retention": "workqueue"})
        durable = {
            "durable_name": "C",
            "deliver_subject": "dlv.c",
            "ack_policy": "flow_control",
            "flow_control": True,
            "idle_heartbeat": 1_000_000_000,
        }
        body = json.dumps({"stream_name": "WQ", "config": durable}).encode()

        async def made() -> Any:
            answer = await request(c.nc, "$JS.API.CONSUMER.CREATE.WQ.C", body)
            assert "error" not in answer, answer
            return answer

        await eventually(made, "the durable made")
        own = {"name": "WQ", "consumer": {"name": "C", "deliver_subject": "dlv.c"}}
        await _create(c, "S", {"sources": [own]})
        await _publish(c, 0, 30)
        victim = await c.leader("S")
        victim.kill()
        await _publish(c, 30, 60)
        await victim.restart_async()
        await eventually(lambda: _count(c, "S", 60), "the source has every message", 60)
        await eventually(lambda: _count(c, "WQ", 0), "the work queue let them go", 60)
        assert await _origin_seqs(c, "S") == list(range(1, 61))

        async def alone() -> bool:
            return await _names(c) == ["C"]

        await eventually(alone, "the durable alone on the work queue")
