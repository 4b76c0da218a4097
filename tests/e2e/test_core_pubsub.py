"""Core messaging with the real nats-py client: what every application relies on.

Each test runs against the reference (``ref``) and jetlake (``jl``) with the
same assertions. Completeness is checked with flush barriers (see
tests/support/clients.py), never by waiting "long enough".
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from nats.errors import NoRespondersError

from tests.conftest import Connect
from tests.support.clients import barrier, drain_pending, received, subjects, sync
from tests.support.raw import RawClient
from tests.support.servers import ServerProcess


async def test_publish_subscribe_in_order(server: ServerProcess, connect: Connect) -> None:
    """Payloads arrive byte-exact, in publish order, empty and binary included."""
    pub, sub_nc = await connect(server), await connect(server)
    sub = await sub_nc.subscribe("greet")
    await sync(sub_nc)
    payloads = [b"hello", b"", bytes(range(256)), b"\r\nPUB x 1\r\n", b"x" * 100_000]
    for p in payloads:
        await pub.publish("greet", p)
    msgs = await received(pub, sub_nc, sub)
    assert [m.data for m in msgs] == payloads
    assert {m.subject for m in msgs} == {"greet"}
    assert all(not m.reply for m in msgs)


async def test_max_payload_sized_message(server: ServerProcess, connect: Connect) -> None:
    """A message of exactly max_payload bytes is accepted and delivered whole."""
    nc = await connect(server)
    assert nc.max_payload == 1024 * 1024
    sub = await nc.subscribe("big")
    data = bytes(i % 251 for i in range(nc.max_payload))
    await nc.publish("big", data)
    msg = await sub.next_msg(timeout=5)
    assert msg.data == data


async def test_wildcards(server: ServerProcess, connect: Connect) -> None:
    """``*`` matches exactly one token, ``>`` one or more trailing tokens."""
    pub, sub_nc = await connect(server), await connect(server)
    patterns = ["foo.*", "foo.>", "*.bar", "foo.*.baz", ">", "foo.bar", "*"]
    subs = {p: await sub_nc.subscribe(p) for p in patterns}
    await sync(sub_nc)
    sent = ["foo", "foo.bar", "foo.bar.baz", "foo.qux.baz", "bar", "x.bar", "foo.bar.baz.q"]
    for s in sent:
        await pub.publish(s, s.encode())
    await barrier(pub, sub_nc)
    got = {p: subjects(await drain_pending(sub)) for p, sub in subs.items()}
    assert got == {
        "foo.*": ["foo.bar"],
        "foo.>": ["foo.bar", "foo.bar.baz", "foo.qux.baz", "foo.bar.baz.q"],
        "*.bar": ["foo.bar", "x.bar"],
        "foo.*.baz": ["foo.bar.baz", "foo.qux.baz"],
        ">": sent,
        "foo.bar": ["foo.bar"],
        "*": ["foo", "bar"],
    }


async def test_overlapping_subscriptions_each_deliver(
    server: ServerProcess, connect: Connect
) -> None:
    """One connection with two matching subscriptions gets the message twice (per sid)."""
    nc = await connect(server)
    a, b = await nc.subscribe("o.x"), await nc.subscribe("o.*")
    await nc.publish("o.x", b"1")
    await barrier(nc)
    assert len(await drain_pending(a)) == 1
    assert len(await drain_pending(b)) == 1


async def test_queue_groups(server: ServerProcess, connect: Connect) -> None:
    """Each message goes to exactly one member per group, spread over members."""
    pub = await connect(server)
    members: dict[str, list] = {"g1": [], "g2": []}
    for group, subs in members.items():
        for _ in range(3):
            nc = await connect(server)
            subs.append((nc, await nc.subscribe("work", queue=group)))
    plain_nc = await connect(server)
    plain = await plain_nc.subscribe("work")
    for subs in members.values():
        for nc, _ in subs:
            await sync(nc)
    await sync(plain_nc)

    n = 300
    for i in range(n):
        await pub.publish("work", str(i).encode())
    await barrier(pub, plain_nc, *(nc for subs in members.values() for nc, _ in subs))

    expected = [str(i).encode() for i in range(n)]
    assert [m.data for m in await drain_pending(plain)] == expected
    for group, subs in members.items():
        per_member = [[m.data for m in await drain_pending(sub)] for _, sub in subs]
        everything = Counter(d for msgs in per_member for d in msgs)
        assert sorted(everything) == sorted(expected), f"{group}: lost or extra messages"
        assert max(everything.values()) == 1, f"{group}: a message reached two members"
        assert all(len(msgs) > 0 for msgs in per_member), f"{group}: not spread: {per_member}"


async def test_request_reply(server: ServerProcess, connect: Connect) -> None:
    """Concurrent requests each get their own reply through an _INBOX subject."""
    responder, requester = await connect(server), await connect(server)

    async def echo(msg) -> None:
        assert msg.reply.startswith("_INBOX.")
        await msg.respond(b"re:" + msg.data)

    await responder.subscribe("svc.echo", cb=echo)
    await sync(responder)
    replies = await asyncio.gather(
        *(requester.request("svc.echo", str(i).encode(), timeout=5) for i in range(20))
    )
    assert [r.data for r in replies] == [f"re:{i}".encode() for i in range(20)]


async def test_no_responders(server: ServerProcess, connect: Connect) -> None:
    """A request nobody listens to fails at once with 503, not after the timeout."""
    nc = await connect(server)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(NoRespondersError):
        await nc.request("nobody.home", b"?", timeout=5)
    assert loop.time() - started < 4, "no-responders status must not wait for the timeout"


async def test_no_responders_wire_format(server: ServerProcess) -> None:
    """The 503 is an HMSG to the reply subject; the reference adds Nats-Subject."""
    async with await RawClient.connect(server.host, server.port) as c:
        await c.handshake(headers=True, no_responders=True)
        await c.send(b"SUB _INBOX.r 1\r\nPUB nobody _INBOX.r 2\r\nhi\r\n")
        line, payload = await c.read_op()
        assert line == b"HMSG _INBOX.r 1 38 38"
        assert payload == b"NATS/1.0 503\r\nNats-Subject: nobody\r\n\r\n"


async def test_headers_round_trip(server: ServerProcess, connect: Connect) -> None:
    """Headers published with nats-py come back as sent."""
    pub, sub_nc = await connect(server), await connect(server)
    sub = await sub_nc.subscribe("h")
    await sync(sub_nc)
    headers = {"X-Trace": "abc-123", "Content-Type": "text/plain", "Empty": ""}
    await pub.publish("h", b"body", headers=headers)
    (msg,) = await received(pub, sub_nc, sub)
    assert msg.data == b"body"
    assert msg.headers == headers


async def test_multi_valued_headers_forwarded_verbatim(server: ServerProcess) -> None:
    """The server forwards the header block byte for byte (repeated keys, case, spaces)."""
    hdr = b"NATS/1.0\r\nX-A: 1\r\nX-A: 2\r\nx-b:  sp \r\n\r\n"
    body = b"payload"
    async with await RawClient.connect(server.host, server.port) as c:
        await c.handshake(headers=True)
        await c.send(
            b"SUB h 1\r\nHPUB h %d %d\r\n%s%s\r\n" % (len(hdr), len(hdr) + len(body), hdr, body)
        )
        line, payload = await c.read_op()
        assert line == b"HMSG h 1 %d %d" % (len(hdr), len(hdr) + len(body))
        assert payload == hdr + body


async def test_auto_unsubscribe(server: ServerProcess, connect: Connect) -> None:
    """``max_msgs`` (UNSUB sid max) delivers exactly that many, then stops."""
    pub, sub_nc = await connect(server), await connect(server)
    sub = await sub_nc.subscribe("auto", max_msgs=3)
    later = await sub_nc.subscribe("later")
    await later.unsubscribe(limit=2)
    await sync(sub_nc)
    for i in range(6):
        await pub.publish("auto", str(i).encode())
        await pub.publish("later", str(i).encode())
    await barrier(pub, sub_nc)
    got = [m.data for m in await drain_pending(sub)]
    assert got == [b"0", b"1", b"2"]
    assert [m.data for m in await drain_pending(later)] == [b"0", b"1"]


async def test_unsubscribe_stops_delivery(server: ServerProcess, connect: Connect) -> None:
    """After UNSUB is processed nothing more arrives for that sid."""
    pub, sub_nc = await connect(server), await connect(server)
    sub = await sub_nc.subscribe("u")
    await sync(sub_nc)
    await pub.publish("u", b"before")
    await barrier(pub, sub_nc)
    await sub.unsubscribe()
    await sync(sub_nc)
    keep = await sub_nc.subscribe("u")
    await sync(sub_nc)
    await pub.publish("u", b"after")
    msgs = await received(pub, sub_nc, keep)
    assert [m.data for m in msgs] == [b"after"]


@pytest.mark.parametrize("no_echo", [False, True])
async def test_echo(server: ServerProcess, connect: Connect, no_echo: bool) -> None:
    """With ``echo: false`` a connection does not receive its own publishes."""
    me, other = await connect(server, no_echo=no_echo), await connect(server)
    sub = await me.subscribe("e")
    await sync(me)
    await me.publish("e", b"mine")
    await other.publish("e", b"theirs")
    await barrier(me, other, me)
    got = sorted(m.data for m in await drain_pending(sub))
    assert got == ([b"theirs"] if no_echo else [b"mine", b"theirs"])
