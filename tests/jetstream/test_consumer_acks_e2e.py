"""Acks, redelivery and where a consumer starts, through nats-py against both servers.

The same scenario runs on the reference and on jetlake; timing checks (redelivery, nak
delay) assert a lower bound exactly and an upper bound with a generous tolerance.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import api as jsapi

from tests.conftest import Connect
from tests.jetstream.test_consumers_e2e import inbox, status_of, stream_with
from tests.jetstream.test_streams_e2e import api
from tests.support.servers import ServerProcess

# -- acks and redelivery ---------------------------------------------------------------


async def fetch_one(nc: NATS, durable: str, **cfg: Any) -> tuple[Any, Msg]:
    js = nc.jetstream()
    sub = await js.pull_subscribe("s.>", durable=durable, config=jsapi.ConsumerConfig(**cfg))
    (msg,) = await sub.fetch(1, timeout=2)
    return sub, msg


async def test_redelivery_after_ack_wait(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    await stream_with(nc, 1)
    sub, first = await fetch_one(nc, "r", ack_wait=0.5)
    start = time.monotonic()
    (again,) = await sub.fetch(1, timeout=3)
    elapsed = time.monotonic() - start
    assert again.data == first.data and again.metadata.num_delivered == 2
    assert 0.4 <= elapsed <= 1.8
    assert again.metadata.sequence.consumer == 2
    info = await sub.consumer_info()
    assert (info.num_redelivered, info.num_ack_pending) == (1, 1)


async def test_nak_with_delay_and_term(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    await stream_with(nc, 1)
    sub, msg = await fetch_one(nc, "n", ack_wait=30)
    await msg.nak(delay=0.4)
    start = time.monotonic()
    (again,) = await sub.fetch(1, timeout=3)
    assert again.data == b"m0" and time.monotonic() - start >= 0.3
    await again.nak()
    (third,) = await sub.fetch(1, timeout=2)
    assert (third.data, third.metadata.num_delivered) == (b"m0", 3)
    await third.term()
    await nc.jetstream().publish("s.1", b"m1")
    (nxt,) = await sub.fetch(1, timeout=2)
    assert nxt.data == b"m1"
    await nxt.in_progress()
    await nxt.ack_sync()
    info = await sub.consumer_info()
    assert (info.num_ack_pending, info.ack_floor.stream_seq) == (0, 2)


async def test_max_deliver_then_advisory(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    await stream_with(nc, 1)
    advisories = await inbox(nc, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.md")
    sub, msg = await fetch_one(nc, "md", ack_wait=0.3, max_deliver=2)
    assert msg.data == b"m0"
    msgs = await sub.fetch(1, timeout=3)
    assert [m.metadata.num_delivered for m in msgs] == [2]
    waiting = asyncio.create_task(sub.fetch(1, timeout=3))  # a request to redeliver into
    advisory = json.loads((await advisories.next(5)).data)  # ... but the third try is skipped
    await nc.jetstream().publish("s.1", b"m1")
    assert [m.data for m in await waiting] == [b"m1"]
    assert (advisory["type"], advisory["stream_seq"], advisory["deliveries"]) == (
        "io.nats.jetstream.advisory.v1.max_deliver",
        1,
        2,
    )
    assert (await sub.consumer_info()).num_ack_pending == 1


async def test_max_ack_pending_limits_delivery(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    await stream_with(nc, 5)
    js = nc.jetstream()
    cfg = jsapi.ConsumerConfig(max_ack_pending=2)
    sub = await js.pull_subscribe("s.>", durable="m", config=cfg)
    msgs = await sub.fetch(5, timeout=1)
    assert [m.data for m in msgs] == [b"m0", b"m1"]
    await msgs[0].ack_sync()
    assert [m.data for m in await sub.fetch(5, timeout=1)] == [b"m2"]


async def test_ack_all_and_ack_none(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    await stream_with(nc, 4)
    js = nc.jetstream()
    sub = await js.pull_subscribe(
        "s.>", durable="all", config=jsapi.ConsumerConfig(ack_policy=jsapi.AckPolicy.ALL)
    )
    msgs = await sub.fetch(4, timeout=2)
    await msgs[2].ack_sync()
    info = await sub.consumer_info()
    assert (info.num_ack_pending, info.ack_floor.stream_seq) == (1, 3)
    none = await js.pull_subscribe(
        "s.>", durable="none", config=jsapi.ConsumerConfig(ack_policy=jsapi.AckPolicy.NONE)
    )
    assert len(await none.fetch(4, timeout=2)) == 4
    info = await none.consumer_info()
    assert (info.num_ack_pending, info.ack_floor.stream_seq, info.ack_floor.consumer_seq) == (
        0,
        4,
        4,
    )


# -- where delivery starts, what it selects ---------------------------------------------

POLICIES = [
    ({"deliver_policy": "all"}, [b"m0", b"m1", b"m2", b"m3", b"m4"]),
    ({"deliver_policy": "last"}, [b"m4"]),
    ({"deliver_policy": "new"}, []),
    ({"deliver_policy": "by_start_sequence", "opt_start_seq": 4}, [b"m3", b"m4"]),
    ({"deliver_policy": "last_per_subject", "filter_subject": "s.>"}, [b"m2", b"m3", b"m4"]),
    ({"filter_subject": "s.1"}, [b"m1", b"m4"]),
    ({"filter_subjects": ["s.0", "s.2"]}, [b"m0", b"m2", b"m3"]),
]


@pytest.mark.parametrize(("cfg", "expected"), POLICIES)
async def test_deliver_policies_and_filters(
    js_server: ServerProcess, connect: Connect, cfg: dict[str, Any], expected: list[bytes]
) -> None:
    nc = await connect(js_server)
    await stream_with(nc, 5)
    body = {"stream_name": "S", "config": {"name": "c", **cfg}}
    created = await api(nc, "$JS.API.CONSUMER.CREATE.S.c", body)
    assert created["num_pending"] == len(expected)
    box = await inbox(nc, "inb.>")
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.c", b'{"batch":10,"no_wait":true}', "inb.1")
    got = []
    while True:
        msg = await box.next()
        if status_of(msg)[0]:
            break
        got.append(msg.data)
    assert got == expected


async def test_deliver_by_start_time(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    await stream_with(nc, 3)
    middle = await nc.jetstream().get_msg("S", seq=2)
    assert middle.headers is None
    stamp = (await api(nc, "$JS.API.STREAM.MSG.GET.S", {"seq": 2}))["message"]["time"]
    body = {
        "stream_name": "S",
        "config": {"name": "t", "deliver_policy": "by_start_time", "opt_start_time": stamp},
    }
    created = await api(nc, "$JS.API.CONSUMER.CREATE.S.t", body)
    assert created["num_pending"] == 2
