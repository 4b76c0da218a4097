"""`$JS.API.CONSUMER.RESET.<stream>.<consumer>` (API level 4) through nats-py against both
servers with the same assertions: the reset to the ack floor or to a sequence, what it does
to delivered, ack floor and pending, the response document, the refusals, silence for a
consumer that does not exist, a reset that survives a kill -9 (jetlake), and an interest stream
dropping what a reset skipped.

Every expectation was observed from the reference nats-server 2.15.1.
"""

from __future__ import annotations

import json
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client as NATS

from tests.conftest import Connect
from tests.jetstream.test_streams_e2e import api
from tests.support.servers import ServerProcess

RESET = "$JS.API.CONSUMER.RESET.S."
TYPE = "io.nats.jetstream.api.v1.consumer_reset_response"


async def setup(nc: NATS, *, retention: str = "limits", **config: Any) -> None:
    """Stream S (s.>) with 10 messages over s.0, s.1, s.2 and pull consumer C: created
    after them, or before on an interest stream (which keeps only what someone wants)."""
    stream = {"name": "S", "subjects": ["s.>"], "retention": retention}
    assert "error" not in await api(nc, "$JS.API.STREAM.CREATE.S", stream)
    config = {"durable_name": "C", "ack_policy": "explicit", **config}
    create = {"stream_name": "S", "config": config}
    if retention == "interest":
        assert "error" not in await api(nc, "$JS.API.CONSUMER.CREATE.S.C", create)
    js = nc.jetstream()
    for i in range(10):
        await js.publish(f"s.{i % 3}", b"%d" % (i + 1))
    if retention != "interest":
        created = await api(nc, "$JS.API.CONSUMER.CREATE.S.C", create)
        assert "error" not in created, created


def position(doc: dict[str, Any]) -> tuple[int, int, int, int, int, int, int]:
    """(delivered consumer/stream seq, ack floor consumer/stream seq, ack pending,
    redelivered, pending)."""
    return (
        doc["delivered"]["consumer_seq"],
        doc["delivered"]["stream_seq"],
        doc["ack_floor"]["consumer_seq"],
        doc["ack_floor"]["stream_seq"],
        doc["num_ack_pending"],
        doc["num_redelivered"],
        doc["num_pending"],
    )


async def fetch(nc: NATS, n: int) -> list[tuple[int, int]]:
    """(stream seq, delivery count) of the next n messages of C."""
    sub = await nc.jetstream().pull_subscribe_bind("C", "S")
    msgs = await sub.fetch(n, timeout=2)
    await sub.unsubscribe()
    return [(m.metadata.sequence.stream, m.metadata.num_delivered) for m in msgs]


async def test_reset_to_the_ack_floor_then_to_a_sequence(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    await setup(nc)
    sub = await nc.jetstream().pull_subscribe_bind("C", "S")
    msgs = await sub.fetch(4, timeout=2)
    for msg in msgs[:2]:
        await msg.ack_sync()
    await sub.unsubscribe()
    info = await api(nc, "$JS.API.CONSUMER.INFO.S.C")
    assert position(info) == (4, 4, 2, 2, 2, 0, 6)

    doc = await api(nc, RESET + "C")
    assert doc["type"] == TYPE and doc["reset_seq"] == 3
    assert (doc["stream_name"], doc["name"], doc["config"]["durable_name"]) == ("S", "C", "C")
    assert list(doc)[-1] == "reset_seq" and "ts" in doc and "created" in doc
    assert doc["config"]["metadata"]["_nats.req.level"] == "0"
    assert position(doc) == (0, 2, 0, 2, 0, 0, 8)
    assert await fetch(nc, 2) == [(3, 1), (4, 1)]  # delivered anew, not as redeliveries

    doc = await api(nc, RESET + "C", {"seq": 9})
    assert doc["reset_seq"] == 9 and position(doc) == (0, 8, 0, 8, 0, 0, 2)
    assert await fetch(nc, 2) == [(9, 1), (10, 1)]
    assert position(await api(nc, "$JS.API.CONSUMER.INFO.S.C")) == (2, 10, 0, 8, 2, 0, 0)

    doc = await api(nc, RESET + "C", {"seq": 50})  # beyond the stream: nothing pending
    assert doc["reset_seq"] == 50 and position(doc) == (0, 49, 0, 49, 0, 0, 0)
    doc = await api(nc, RESET + "C", {"seq": 1, "unknown": True})  # unknown fields ignored
    assert doc["reset_seq"] == 1 and position(doc) == (0, 0, 0, 0, 0, 0, 10)


@pytest.mark.parametrize(
    ("config", "seq", "reset_seq", "floor"),
    [
        ({"deliver_policy": "new"}, 0, 11, 10),
        ({"deliver_policy": "last"}, 0, 10, 9),
        ({"deliver_policy": "last_per_subject", "filter_subject": "s.>"}, 0, 8, 7),
        ({"deliver_policy": "by_start_sequence", "opt_start_seq": 4}, 6, 6, 3),
        ({"deliver_policy": "by_start_time", "opt_start_time": "2000-01-01T00:00:00Z"}, 3, 3, 0),
    ],
)
async def test_deliver_policies_start_the_floor_and_allow(
    js_server: ServerProcess,
    connect: Connect,
    config: dict[str, Any],
    seq: int,
    reset_seq: int,
    floor: int,
) -> None:
    nc = await connect(js_server)
    await setup(nc, **config)
    info = await api(nc, "$JS.API.CONSUMER.INFO.S.C")
    assert info["ack_floor"] == {"consumer_seq": 0, "stream_seq": floor}
    doc = await api(nc, RESET + "C", {"seq": seq} if seq else b"")
    assert doc["reset_seq"] == reset_seq
    assert doc["ack_floor"] == {"consumer_seq": 0, "stream_seq": reset_seq - 1}


@pytest.mark.parametrize(
    ("config", "body", "error"),
    [
        ({"deliver_policy": "new"}, {"seq": 2}, (400, 10204, "invalid reset: not allowed")),
        ({"deliver_policy": "last"}, {"seq": 6}, (400, 10204, "invalid reset: not allowed")),
        (
            {"deliver_policy": "last_per_subject", "filter_subject": "s.>"},
            {"seq": 3},
            (400, 10204, "invalid reset: not allowed"),
        ),
        (
            {"deliver_policy": "by_start_sequence", "opt_start_seq": 4},
            {"seq": 2},
            (400, 10204, "invalid reset: below start seq"),
        ),
        (
            {},
            {"seq": -1},
            (
                400,
                10025,
                "invalid JSON: json: cannot unmarshal number -1 into Go struct field"
                " JSApiConsumerResetRequest.seq of type uint64",
            ),
        ),
        (
            {},
            {"seq": "3"},
            (
                400,
                10025,
                "invalid JSON: json: cannot unmarshal string into Go struct field"
                " JSApiConsumerResetRequest.seq of type uint64",
            ),
        ),
    ],
)
async def test_refusals(
    js_server: ServerProcess,
    connect: Connect,
    config: dict[str, Any],
    body: dict[str, Any],
    error: tuple[int, int, str],
) -> None:
    nc = await connect(js_server)
    await setup(nc, **config)
    doc = await api(nc, RESET + "C", body)
    assert doc == {
        "type": TYPE,
        "error": dict(zip(("code", "err_code", "description"), error, strict=True)),
        "reset_seq": 0,
    }
    assert position(await api(nc, "$JS.API.CONSUMER.INFO.S.C"))[4] == 0  # nothing changed


async def test_malformed_json_and_the_required_level(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    await setup(nc)
    doc = await api(nc, RESET + "C", b"{")
    assert (doc["error"]["err_code"], doc["reset_seq"]) == (10025, 0)
    doc = await api(nc, RESET + "C", b"", **{"Nats-Required-Api-Level": "99"})
    assert doc == {
        "type": TYPE,
        "error": {
            "code": 412,
            "err_code": 10185,
            "description": "JetStream minimum api level required",
        },
        "reset_seq": 0,
    }


async def test_the_stream_identity_is_told_when_asked(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    """The header asks for the stream's identity in the answer (durable sourcing's check
    that its origin is the one it knew); its value is not checked against anything."""
    nc = await connect(js_server)
    await setup(nc)
    plain = await nc.request(RESET + "C", b"", timeout=5)
    assert not plain.headers
    asked = [
        await nc.request(RESET + "C", b"", timeout=5, headers={"Nats-Stream-Identity": x})
        for x in ("wrong", "")
    ]
    told = {m.headers["Nats-Stream-Identity"] for m in asked if m.headers}
    assert len(told) == 1 and len(told.pop()) == 8
    assert json.loads(asked[0].data)["reset_seq"] == 1


async def test_an_unknown_consumer_or_stream_gets_no_answer(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    """The reference's consumer answers on its own subscription: with no consumer there is
    nobody to answer, but the API's subjects have a listener, so the client times out."""
    nc = await connect(js_server)
    await setup(nc)
    for subject in (RESET + "X", "$JS.API.CONSUMER.RESET.Z.C"):
        with pytest.raises(nats.errors.TimeoutError):
            await nc.request(subject, b"", timeout=0.5)


async def test_a_reset_survives_a_kill(jetlake_js: ServerProcess, connect: Connect) -> None:
    """jetlake only: its reset is on disk before the answer. The reference writes consumer
    state in the background, and a restart soon after a reset finds it or not."""
    nc = await connect(jetlake_js)
    await setup(nc)
    await fetch(nc, 5)
    doc = await api(nc, RESET + "C", {"seq": 3})
    assert position(doc) == (0, 2, 0, 2, 0, 0, 8)
    await nc.close()
    jetlake_js.kill()
    jetlake_js.start(port=jetlake_js.port)
    nc = await connect(jetlake_js)
    assert position(await api(nc, "$JS.API.CONSUMER.INFO.S.C")) == (0, 2, 0, 2, 0, 0, 8)
    assert await fetch(nc, 1) == [(3, 1)]


async def test_an_interest_stream_drops_what_a_reset_skipped(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    await setup(nc, retention="interest")
    doc = await api(nc, RESET + "C", {"seq": 7})
    assert position(doc) == (0, 6, 0, 6, 0, 0, 4)
    state = (await api(nc, "$JS.API.STREAM.INFO.S"))["state"]
    assert (state["messages"], state["first_seq"]) == (4, 7)
