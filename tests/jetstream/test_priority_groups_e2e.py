"""Pull consumer priority groups on the wire, against both servers.

Config refusals, pull status lines, `Nats-Pin-Id`, CONSUMER.UNPIN and the
`priority_groups` state of CONSUMER.INFO were first observed from nats-server
2.15; jetlake must answer the same, pin ids and times aside.
"""

from __future__ import annotations

import asyncio
import json
from functools import partial
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from tests.conftest import Connect
from tests.jetstream.test_consumers_e2e import status_of, stream_with
from tests.jetstream.test_streams_e2e import api, normalise
from tests.support.clients import sync
from tests.support.servers import ServerProcess

MS = 1_000_000
UNPIN = "$JS.API.CONSUMER.UNPIN.S."
GROUP_NAME = (
    "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters"
)


async def create(nc: NATS, name: str, **cfg: Any) -> Any:
    body = {"stream_name": "S", "config": {"durable_name": name, **cfg}}
    return await api(nc, f"$JS.API.CONSUMER.CREATE.S.{name}", body)


async def pull(nc: NATS, consumer: str, reply: str, **req: Any) -> None:
    data = json.dumps({"batch": 1, **req}).encode()
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.S.{consumer}", data, reply=reply)


Line = tuple[str, str, str]  # (reply, status code or "", description or payload)


class Replies:
    """What each reply subject `inb.<name>` receives, in arrival order across them all.

    A delivery's subject is the stream's, so each inbox has its own subscription.
    """

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[str, Msg]] = asyncio.Queue()

    async def listen(self, nc: NATS, *names: str) -> Replies:
        for name in names:
            await nc.subscribe(f"inb.{name}", cb=partial(self._got, f"inb.{name}"))
        await sync(nc)
        return self

    async def _got(self, reply: str, msg: Msg) -> None:
        await self.queue.put((reply, msg))

    async def next(self) -> tuple[str, Msg]:
        return await asyncio.wait_for(self.queue.get(), 3.0)

    async def line(self) -> Line:
        """Where a message went and its status, or its payload when it is a delivery."""
        reply, msg = await self.next()
        code, text = status_of(msg)
        return (reply, code, text or "") if code else (reply, "", msg.data.decode())

    async def take(self, n: int) -> list[Line]:
        return sorted([await self.line() for _ in range(n)])


def error(doc: Any) -> tuple[int, int, str]:
    err = doc["error"]
    return err["code"], err["err_code"], err["description"]


async def test_config_refusals_and_echo(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    await stream_with(nc, 0)
    refused = [
        ({"priority_policy": "overflow"}, 10159),
        ({"priority_policy": "overflow", "priority_groups": [""]}, 10161),
        ({"priority_policy": "pinned_client", "priority_groups": ["a.b"]}, 10162),
        ({"priority_groups": ["A"]}, 10196),
        ({"priority_timeout": 5}, 10197),
        ({"priority_policy": "overflow", "priority_groups": ["A"], "deliver_subject": "d"}, 10178),
        ({"priority_policy": "bogus", "priority_groups": ["A"]}, 10025),
    ]
    codes = [error(await create(nc, "c", **cfg))[1] for cfg, _ in refused]
    assert codes == [code for _, code in refused]
    assert error(await create(nc, "c", priority_policy="bogus", priority_groups=["A"])) == (
        400,
        10025,
        'invalid JSON: unknown priority policy: "bogus"',
    )
    made = normalise(
        await create(nc, "p", priority_policy="pinned_client", priority_groups=["A", "B"])
    )
    assert made["config"]["priority_groups"] == ["A", "B"]
    assert made["config"]["priority_timeout"] == 120_000_000_000
    assert made["config"]["metadata"] == {"_nats.req.level": "1"}
    assert made["priority_groups"] == [{"group": "A", "pinned_ts": "0001-01-01T00:00:00Z"}]


async def test_pull_refusals(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    await stream_with(nc, 1)
    await create(nc, "pin", priority_policy="pinned_client", priority_groups=["A"])
    await create(nc, "ovf", priority_policy="overflow", priority_groups=["A"])
    box = await Replies().listen(nc, *(str(i) for i in range(5)))
    cases = [
        ("pin", {}, "Bad Request - Priority Group missing"),
        ("pin", {"group": "Z"}, "Bad Request - Invalid Priority Group"),
        ("pin", {"group": "A", "min_pending": 3}, "Bad Request - Not a Overflow Priority consumer"),
        ("ovf", {"group": "A", "id": "x"}, "Bad Request - Not a Pinned Client Priority consumer"),
        ("ovf", {"group": "A", "priority": 10}, "Bad Request - Priority must be between 0 and 9"),
    ]
    for i, (consumer, req, _) in enumerate(cases):
        await pull(nc, consumer, f"inb.{i}", **req)
    got = await box.take(len(cases))
    assert got == [(f"inb.{i}", "400", text) for i, (_, _, text) in enumerate(cases)]


async def test_overflow_thresholds(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    await stream_with(nc, 10)
    await create(nc, "o", priority_policy="overflow", priority_groups=["A"], ack_policy="explicit")
    box = await Replies().listen(nc, "a", "b", "c", "d", "n")
    await pull(nc, "o", "inb.a", batch=5, group="A", min_pending=10, expires=300 * MS)
    assert await box.take(2) == [
        ("inb.a", "", "m0"),  # 10 pending with it; with m1 only 9
        ("inb.a", "408", "Request Timeout"),
    ]
    info = await api(nc, "$JS.API.CONSUMER.INFO.S.o")
    assert (info["delivered"]["stream_seq"], info["num_pending"]) == (1, 9)
    await pull(nc, "o", "inb.b", batch=2, group="A", min_ack_pending=1)
    assert await box.take(2) == [("inb.b", "", "m1"), ("inb.b", "", "m2")]
    await pull(nc, "o", "inb.c", group="A", min_pending=100, expires=300 * MS)
    await pull(nc, "o", "inb.d", group="A")
    assert await box.take(2) == [("inb.c", "408", "Request Timeout"), ("inb.d", "", "m3")]
    await pull(nc, "o", "inb.n", group="A", min_pending=100, no_wait=True)
    assert await box.line() == ("inb.n", "404", "No Messages")
    assert (await api(nc, "$JS.API.CONSUMER.INFO.S.o"))["num_waiting"] == 0


async def test_pinned_client(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    await stream_with(nc, 6)
    cfg = {"priority_policy": "pinned_client", "priority_groups": ["A"]}
    await create(nc, "p", priority_timeout=1000 * MS, **cfg)
    box = await Replies().listen(nc, "stale", "one", "two", "bad")
    await pull(nc, "p", "inb.stale", group="A", id="old")
    _, stale = await box.next()
    assert status_of(stale) == ("423", "Nats-Wrong-Pin-Id")
    assert stale.headers is not None and stale.headers["Nats-Pending-Messages"] == "1"
    await pull(nc, "p", "inb.one", group="A")
    reply, first = await box.next()
    assert (reply, first.data) == ("inb.one", b"m0")
    assert first.headers is not None
    pin = first.headers["Nats-Pin-Id"]
    state = (await api(nc, "$JS.API.CONSUMER.INFO.S.p"))["priority_groups"]
    assert [(s["group"], s["pinned_client_id"]) for s in state] == [("A", pin)]
    await pull(nc, "p", "inb.two", group="A", expires=200 * MS)
    await pull(nc, "p", "inb.bad", group="A", id="nope")
    await pull(nc, "p", "inb.stale", group="A", no_wait=True)
    assert await box.take(3) == [
        ("inb.bad", "423", "Nats-Pin-Id mismatch"),
        ("inb.stale", "404", "No Messages"),
        ("inb.two", "408", "Request Timeout"),
    ]
    await pull(nc, "p", "inb.one", group="A", id=pin)
    reply, again = await box.next()
    assert (reply, again.data, again.headers) == ("inb.one", b"m1", {"Nats-Pin-Id": pin})
    # Silent past the TTL: the waiting client is pinned with a new id.
    await pull(nc, "p", "inb.two", group="A", expires=3000 * MS)
    reply, moved = await box.next()
    assert (reply, moved.data) == ("inb.two", b"m2")
    assert moved.headers is not None and moved.headers["Nats-Pin-Id"] not in ("", pin)
    await pull(nc, "p", "inb.one", group="A", id=pin)
    assert await box.line() == ("inb.one", "423", "Nats-Pin-Id mismatch")


async def test_unpin(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    await stream_with(nc, 3)
    await create(nc, "p", priority_policy="pinned_client", priority_groups=["A"])
    await create(nc, "plain")
    box = await Replies().listen(nc, "one", "two")
    events = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.*.S.p")
    await sync(nc)
    await pull(nc, "p", "inb.one", group="A")
    pin = (await box.next())[1].headers["Nats-Pin-Id"]  # type: ignore[index]
    refusals = [
        ("p", b"", (400, 10025, "invalid JSON: unexpected end of JSON input")),
        ("p", b"{}", (400, 10025, "invalid JSON: consumer group not specified")),
        ("p", {"group": "a.b"}, (400, 10162, GROUP_NAME)),
        (
            "p",
            {"group": "Q"},
            (400, 10160, "Provided priority group does not exist for this consumer"),
        ),
        (
            "plain",
            {"group": "A"},
            (400, 10160, "Provided priority group does not exist for this consumer"),
        ),
        ("nope", {"group": "A"}, (404, 10014, "consumer not found")),
    ]
    for consumer, body, expected in refusals:
        assert error(await api(nc, UNPIN + consumer, body)) == expected
    done = await api(nc, UNPIN + "p", {"group": "A"})
    assert done == {"type": "io.nats.jetstream.api.v1.consumer_unpin_response"}
    pinned, unpinned = [await events.next_msg(3) for _ in range(2)]
    assert pinned.subject == "$JS.EVENT.ADVISORY.CONSUMER.PINNED.S.p"
    assert unpinned.subject == "$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.S.p"
    seen = [json.loads(pinned.data), json.loads(unpinned.data)]
    assert [(d["type"], d["stream"], d["consumer"], d["group"]) for d in seen] == [
        ("io.nats.jetstream.advisory.v1.consumer_group_pinned", "S", "p", "A"),
        ("io.nats.jetstream.advisory.v1.consumer_group_unpinned", "S", "p", "A"),
    ]
    assert (seen[0]["pinned_id"], seen[1]["reason"]) == (pin, "admin")
    state = (await api(nc, "$JS.API.CONSUMER.INFO.S.p"))["priority_groups"]
    assert state == [{"group": "A", "pinned_ts": "0001-01-01T00:00:00Z"}]
    await pull(nc, "p", "inb.two", group="A")
    reply, got = await box.next()
    assert (reply, got.data) == ("inb.two", b"m1")
    assert got.headers is not None and got.headers["Nats-Pin-Id"] not in ("", pin)


async def test_prioritized(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    await stream_with(nc, 0)
    await create(nc, "r", priority_policy="prioritized", priority_groups=["A"])
    box = await Replies().listen(nc, "a", "b", "c")
    await pull(nc, "r", "inb.c", group="A", priority=5)
    await pull(nc, "r", "inb.a", batch=2, group="A")
    await pull(nc, "r", "inb.b", batch=2, group="A", priority=0)
    await api(nc, "$JS.API.CONSUMER.INFO.S.r")  # every request is queued
    js = nc.jetstream()
    for i in range(5):
        await js.publish(f"s.{i}", f"m{i}".encode())
    got = [await box.line() for _ in range(5)]
    assert got == [
        ("inb.a", "", "m0"),
        ("inb.b", "", "m1"),
        ("inb.a", "", "m2"),
        ("inb.b", "", "m3"),
        ("inb.c", "", "m4"),
    ]
