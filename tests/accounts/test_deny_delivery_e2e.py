"""A subscribe deny rule filters deliveries, the reference and jetlake alike: a wildcard
subscription overlapping the rule is allowed but never gets a denied subject, and from
then on every delivery on that connection is checked, a JetStream deliver subject's
too (before it, a push consumer delivers a denied stored subject)."""

from __future__ import annotations

import json

from nats.aio.client import Client as NATS
from nats.aio.subscription import Subscription

from tests.conftest import Connect
from tests.support.clients import barrier, drain_pending, sync
from tests.support.servers import ServerProcess


def url(server: ServerProcess, user: str) -> str:
    return f"nats://{user}:{user}@{server.host}:{server.port}"


async def until_end(sub: Subscription) -> list[str]:
    """Subjects delivered on `sub` up to the stream's last message, `dny.end`."""
    got = [(await sub.next_msg(5)).subject]
    while got[-1] != "dny.end":
        got.append((await sub.next_msg(5)).subject)
    return got


async def push(d: NATS, inbox: str) -> None:
    consumer = {"deliver_subject": inbox, "ack_policy": "none"}
    body = json.dumps({"stream_name": "DNY", "config": consumer}).encode()
    answer = json.loads((await d.request("$JS.API.CONSUMER.CREATE.DNY", body, timeout=5)).data)
    assert "error" not in answer, answer


async def test_deny_checks_every_delivery_once_a_wildcard_overlaps(
    shared: ServerProcess, connect: Connect
) -> None:
    d, dd = await connect(url(shared, "d")), await connect(url(shared, "dd"))
    stream = {"name": "DNY", "subjects": ["dny.>"], "storage": "memory"}
    await d.request("$JS.API.STREAM.CREATE.DNY", json.dumps(stream).encode(), timeout=5)
    try:
        for subject in ("dny.bar", "dny.baz", "dny.end"):
            await d.request(subject, b"stored", timeout=5)
        first = await dd.subscribe("dnybox.one")
        await sync(dd)
        await push(d, "dnybox.one")
        assert await until_end(first) == ["dny.bar", "dny.baz", "dny.end"]

        wild = await dd.subscribe("dny.*")  # overlaps the deny rule dny.bar
        second = await dd.subscribe("dnybox.two")
        await sync(dd)
        await push(d, "dnybox.two")
        assert await until_end(second) == ["dny.baz", "dny.end"]
        for subject in ("dny.bar", "dny.baz", "dny.end"):
            await d.request(subject, b"again", timeout=5)
        assert await until_end(first) == ["dny.baz", "dny.end"]
        assert await until_end(second) == ["dny.baz", "dny.end"]
        await barrier(d, dd)
        assert [m.subject for m in await drain_pending(wild)] == ["dny.baz", "dny.end"]
    finally:
        await d.request("$JS.API.STREAM.DELETE.DNY", b"", timeout=5)
