"""Consumer `ack_policy: flow_control` (API level 4) through nats-py against both servers,
with the same assertions: its config rules, and acknowledgement by flow-control replies
only (what the reference's durable sourcing relies on), also on a work-queue stream.

Every expectation was observed from the reference nats-server 2.15.
"""

from __future__ import annotations

from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from tests.conftest import Connect
from tests.jetstream.test_streams_e2e import api
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess

S = 1_000_000_000
FC = {"ack_policy": "flow_control", "deliver_subject": "d.x"}


@pytest.fixture
async def nc(js_server: ServerProcess, connect: Connect) -> NATS:
    """A client of the server under test, with stream S (subjects s.>) created."""
    client = await connect(js_server)
    await api(client, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
    return client


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        (
            {"deliver_subject": ""},
            (10218, "flow control ack policy requires a push based consumer"),
        ),
        ({"ack_wait": 5 * S}, (10221, "flow control ack policy requires unset ack wait")),
        ({"backoff": [S]}, (10221, "flow control ack policy requires unset ack wait")),
        ({"max_deliver": 3}, (10222, "flow control ack policy requires unset max deliver")),
    ],
)
async def test_config_refusals(nc: NATS, extra: dict[str, Any], error: tuple[int, str]) -> None:
    got = await api(
        nc, "$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": {**FC, **extra}}
    )
    assert (got["error"]["err_code"], got["error"]["description"]) == error


async def test_defaults_and_the_level_required(nc: NATS) -> None:
    asked = {**FC, "flow_control": False, "idle_heartbeat": 2 * S}
    config = (await api(nc, "$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": asked}))[
        "config"
    ]
    assert {k: config.get(k) for k in ("flow_control", "idle_heartbeat", "max_ack_pending")} == {
        "flow_control": True,
        "idle_heartbeat": S,
        "max_ack_pending": 1000,
    }
    assert "ack_wait" not in config and config["max_deliver"] == -1
    assert config["metadata"]["_nats.req.level"] == "4"


class Deliveries:
    def __init__(self) -> None:
        self.msgs: list[Msg] = []

    async def on_msg(self, msg: Msg) -> None:
        self.msgs.append(msg)

    def data(self) -> list[bytes]:
        return [m.data for m in self.msgs if m.data]

    def flow_requests(self) -> list[Msg]:
        return [m for m in self.msgs if not m.data and m.reply.startswith("$JS.FC.")]


async def floor_and_pending(nc: NATS, stream: str, name: str) -> tuple[int, int, int]:
    info = await api(nc, f"$JS.API.CONSUMER.INFO.{stream}.{name}")
    return info["delivered"]["stream_seq"], info["ack_floor"]["stream_seq"], info["num_ack_pending"]


async def acknowledge(nc: NATS, request: Msg, seq: int) -> None:
    """Answer a flow-control request as a sourcing stream does: up to `seq`."""
    await nc.publish(
        request.reply, b"", headers={"Nats-Last-Stream": str(seq), "Nats-Last-Consumer": str(seq)}
    )


async def follow(
    nc: NATS, stream: str, subject: str, count: int, max_ack_pending: int
) -> Deliveries:
    """Publish `count` messages, then follow the stream with a flow_control consumer
    (named `fc`) delivering to a subscription of this client."""
    for i in range(count):
        await nc.request(subject, b"%d" % i, timeout=5)
    got = Deliveries()
    await nc.subscribe(f"d.{stream}", cb=got.on_msg)
    cfg = {"durable_name": "fc", "ack_policy": "flow_control", "deliver_subject": f"d.{stream}"}
    cfg["max_ack_pending"] = max_ack_pending
    body = {"stream_name": stream, "config": cfg}
    created = await api(nc, f"$JS.API.CONSUMER.CREATE.{stream}.fc", body)
    assert created["config"]["ack_policy"] == "flow_control"
    return got


async def test_acknowledged_by_flow_control_replies_only(nc: NATS) -> None:
    got = await follow(nc, "S", "s.a", 10, max_ack_pending=3)

    async def asked(n: int) -> bool:
        return len(got.flow_requests()) >= n

    await poll_async(lambda: asked(1), "a flow-control request once max_ack_pending is reached", 5)
    assert got.data() == [b"0", b"1", b"2"]
    await nc.publish(got.msgs[0].reply, b"+ACK")  # an ordinary ack settles nothing
    assert await floor_and_pending(nc, "S", "fc") == (3, 0, 3)
    await acknowledge(nc, got.flow_requests()[0], 2)

    async def moved() -> bool:
        return await floor_and_pending(nc, "S", "fc") == (5, 2, 3)

    await poll_async(moved, "the reply acknowledged up to 2 and two more went out", 5)
    await poll_async(lambda: asked(2), "full again: another request", 5)
    assert got.data() == [b"%d" % i for i in range(5)]


async def test_a_work_queue_retires_what_the_replies_acknowledge(nc: NATS) -> None:
    """Below max_ack_pending the idle heartbeat asks for the reply."""
    body = {"name": "W", "subjects": ["w.>"], "retention": "workqueue"}
    await api(nc, "$JS.API.STREAM.CREATE.W", body)
    got = await follow(nc, "W", "w.a", 4, max_ack_pending=10)

    async def asked() -> bool:
        return bool(got.flow_requests())

    await poll_async(asked, "the heartbeat asks for a reply while messages are pending", 5)
    assert got.data() == [b"0", b"1", b"2", b"3"]
    await acknowledge(nc, got.flow_requests()[0], 4)

    async def emptied() -> bool:
        info = await api(nc, "$JS.API.STREAM.INFO.W")
        return info["state"]["messages"] == 0

    await poll_async(emptied, "acknowledged messages leave the work queue", 5)
    assert await floor_and_pending(nc, "W", "fc") == (4, 4, 0)
