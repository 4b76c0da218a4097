"""Fast batch publish (`allow_batched`, API level 4) through nats-py against both servers,
with the same assertions: the `$FI` reply-subject protocol, its flow acks, gap reports,
error reports and final PubAcks, and the config rules around it.

Every expected reply was observed from the reference nats-server 2.15. A step waits
for the replies it expects (a deadline, no sleep); a reply arriving late would show
up in the next step's list and fail it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from tests.conftest import Connect
from tests.jetstream.test_streams_e2e import api
from tests.support.servers import ServerProcess

INBOX = "fbx"


class Replies:
    """Everything the servers send to the batches' inbox, in arrival order."""

    def __init__(self, nc: NATS) -> None:
        self.nc = nc
        self.got: list[Any] = []

    async def start(self) -> None:
        async def on_msg(msg: Msg) -> None:
            self.got.append(json.loads(msg.data))

        await self.nc.subscribe(f"{INBOX}.>", cb=on_msg)

    async def send(
        self, reply: str, expect: int, subject: str = "f.a", **headers: str
    ) -> list[Any]:
        """Publish with a fast batch reply; the `expect` replies it draws."""
        hdrs = {k.replace("_", "-"): v for k, v in headers.items()} or None
        await self.nc.publish(subject, b"x", reply=f"{INBOX}.{reply}.$FI", headers=hdrs)
        await self.nc.flush()
        deadline = asyncio.get_running_loop().time() + 5
        while len(self.got) < expect and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        out, self.got = self.got, []
        return out


def ack(seq: int, msgs: int) -> dict[str, Any]:
    return {"type": "ack", "seq": seq, "msgs": msgs}


def gap(expected: int, seq: int) -> dict[str, Any]:
    return {"type": "gap", "last_seq": expected, "seq": seq}


def done(seq: int, batch: str, count: int) -> dict[str, Any]:
    return {"stream": "F", "seq": seq, "batch": batch, "count": count}


def refused(code: int, text: str, stream: str = "F", status: int = 400) -> dict[str, Any]:
    error = {"code": status, "err_code": code, "description": text}
    return {"error": error, "stream": stream, "seq": 0}


def flow_err(seq: int, text: str) -> dict[str, Any]:
    return {
        "type": "err",
        "seq": seq,
        "error": {"code": 400, "err_code": 10071, "description": text},
    }


async def create(nc: NATS, name: str, **cfg: Any) -> Any:
    return await api(nc, f"$JS.API.STREAM.CREATE.{name}", {"name": name, **cfg})


@pytest.fixture
async def nc(js_server: ServerProcess, connect: Connect) -> NATS:
    """A client of the server under test, with fast-batch stream F (subjects f.>)."""
    client = await connect(js_server)
    await create(client, "F", subjects=["f.>"], allow_batched=True)
    return client


async def test_the_config_and_the_level_it_requires(nc: NATS) -> None:
    config = (await api(nc, "$JS.API.STREAM.INFO.F"))["config"]
    assert config["allow_batched"] is True and config["metadata"]["_nats.req.level"] == "4"
    config = (await create(nc, "P", subjects=["p"], allow_batched=True, persist_mode="async"))[
        "config"
    ]
    assert (config["persist_mode"], config["allow_batched"]) == ("async", True)
    mirror = await create(nc, "M", mirror={"name": "F"}, allow_batched=True)
    assert mirror["error"] == {
        "code": 400,
        "err_code": 10209,
        "description": "stream mirrors can not also use batch publishing",
    }
    unknown = await create(nc, "Q", subjects=["q"], bogus_field=1, other=2)
    assert unknown["error"] == {
        "code": 400,
        "err_code": 10025,
        "description": 'invalid JSON: json: unknown field "bogus_field"',
    }
    updated = await api(
        nc, "$JS.API.STREAM.UPDATE.F", {"name": "F", "subjects": ["f.>"], "max_msgs": 5, "x": 1}
    )
    assert updated["error"]["description"] == 'invalid JSON: json: unknown field "x"'
    off = await api(nc, "$JS.API.STREAM.UPDATE.F", {"name": "F", "subjects": ["f.>"]})
    assert "allow_batched" not in off["config"]
    assert off["config"]["metadata"]["_nats.req.level"] == "0"


async def test_flow_gaps_errors_and_commits(nc: NATS) -> None:
    await create(nc, "N", subjects=["n.>"])
    r = Replies(nc)
    await r.start()
    disabled = refused(10205, "batch publish is disabled", "N")
    assert await r.send("b0.10.ok.1.0", 1, subject="n.a") == [disabled]
    await create(nc, "Z", subjects=["z.>"], allow_batched=True, max_msg_size=16)
    too_big = refused(10054, "message size exceeds maximum allowed", "Z")
    assert await r.send("b0.10.ok.1.0", 1, subject="z.a", Nats_Msg_Id="over-16-bytes") == [too_big]

    # gap: fail; a flow ack every 3 stored, the gap ends the batch at what was stored
    assert await r.send("b1.3.fail.1.0", 1) == [ack(0, 3)]
    expected = {3: [ack(3, 3)], 6: [ack(6, 3)]}
    for seq in range(2, 8):
        assert await r.send(f"b1.3.fail.{seq}.1", len(expected.get(seq, []))) == expected.get(
            seq, []
        )
    assert await r.send("b1.3.fail.9.1", 2) == [gap(8, 9), done(7, "b1", 7)]
    assert await r.send("b1.3.fail.10.1", 1) == [refused(10208, "batch publish ID unknown")]

    # gap: ok goes on past gaps, pings report them, a refused message is reported
    assert await r.send("b2.3.ok.1.0", 1) == [ack(0, 3)]
    assert await r.send("b2.3.ok.2.1", 0) == []
    assert await r.send("b2.3.ok.5.1", 2) == [gap(3, 5), ack(3, 3)]
    assert await r.send("b2.3.ok.6.4", 2) == [gap(6, 7), ack(6, 3)]
    assert await r.send("b2.3.ok.9.4", 2) == [gap(7, 10), ack(9, 3)]
    wrong = await r.send("b2.3.ok.10.1", 1, Nats_Expected_Last_Sequence="1")
    assert wrong == [flow_err(10, "wrong last sequence: 10")]
    assert await r.send("b2.3.ok.11.2", 1) == [done(11, "b2", 11)]

    # a batch of one, an end-of-batch marker, and malformed or unknown batches
    assert await r.send("b3.3.ok.1.2", 1) == [done(12, "b3", 1)]
    invalid = refused(10206, "batch publish pattern is invalid")
    assert await r.send("b4.3.ok.1.3", 1) == [invalid]
    assert await r.send("b5.3.ok.1.0", 1) == [ack(0, 3)]
    assert await r.send("b5.3.ok.2.3", 1) == [done(13, "b5", 1)]
    assert await r.send("b6.3.ok.2.1", 1) == [refused(10208, "batch publish ID unknown")]
    long_id = "x" * 65 + ".3.ok.1.0"
    assert await r.send(long_id, 1) == [refused(10207, "batch publish ID is invalid")]
    assert await r.send("b7.3.maybe.1.0", 1) == [invalid]
    assert await r.send("b7.3.ok.1.9", 1) == [invalid]
    level = refused(10185, "JetStream minimum api level required", status=412)
    assert await r.send("b12.3.ok.1.0", 1, Nats_Required_Api_Level="9") == [level]

    # gap: fail refusing its first message answers as a plain publish would
    first = await r.send("b8.0.fail.1.0", 2, Nats_Expected_Last_Sequence="1")
    assert first == [ack(0, 10), refused(10071, "wrong last sequence: 13")]
    info = await api(nc, "$JS.API.STREAM.INFO.F")
    assert (info["state"]["messages"], info["state"]["last_seq"]) == (13, 13)


async def test_duplicates_and_a_refusal_inside_a_failing_batch(nc: NATS) -> None:
    """With another batch in flight a new one starts at a flow of 1 and ramps up."""
    r = Replies(nc)
    await r.start()
    assert await r.send("b9.3.fail.1.0", 1, Nats_Msg_Id="dup") == [ack(0, 3)]
    duplicate = await r.send("b10.3.fail.1.2", 2, Nats_Msg_Id="dup")
    assert duplicate == [ack(1, 2), {**done(1, "b10", 1), "duplicate": True}]
    assert await r.send("b11.3.fail.1.0", 2) == [ack(0, 1), ack(1, 2)]
    wrong = await r.send("b11.3.fail.2.1", 2, Nats_Expected_Last_Sequence="1")
    assert wrong == [flow_err(2, "wrong last sequence: 2"), done(2, "b11", 1)]
    assert await r.send("b11.3.fail.3.1", 1) == [refused(10208, "batch publish ID unknown")]
    got = await api(nc, "$JS.API.STREAM.MSG.GET.F", {"seq": 2})
    assert got["message"]["subject"] == "f.a" and "hdrs" not in got["message"]
