"""A source's or mirror's own `consumer` (API level 4) against both servers: the link reads
through a durable the user made on the origin, resetting it instead of making its own,
and the consumer API's stream identity (`Nats-Stream-Identity`, `10225`, level 5)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.aio.client import Client as NATS

from log.sources import name_hash
from tests.conftest import Connect
from tests.jetstream.test_durable_sourcing_e2e import (
    _drained,
    _killed_while_copying,
    _messages,
    _origin_seqs,
)
from tests.jetstream.test_streams_e2e import api
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess

OWN = {"name": "C", "deliver_subject": "dlv.c"}
STAMP = f"WQ:C={name_hash('C')}"


async def _durable(nc: NATS, stream: str, ack_policy: str = "flow_control") -> dict[str, Any]:
    """The user's push durable `C` on `stream`, as a link's own consumer needs it."""
    cfg: dict[str, Any] = {
        "durable_name": "C",
        "deliver_subject": "dlv.c",
        "ack_policy": ack_policy,
    }
    if ack_policy == "flow_control":
        cfg.update(flow_control=True, idle_heartbeat=1_000_000_000)
    body = {"stream_name": stream, "config": cfg}
    return await api(nc, f"$JS.API.CONSUMER.CREATE.{stream}.C", body)


def _bytes(body: Any) -> bytes:
    return json.dumps(body).encode()


async def test_the_reference_refusals(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    bad = {"name": "O", "consumer": OWN, "opt_start_seq": 3}
    source = await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "sources": [bad]})
    assert source["error"] == {
        "code": 400,
        "err_code": 10215,
        "description": "stream source consumer config is invalid",
    }
    mirror = await api(nc, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": bad})
    assert mirror["error"] == {
        "code": 400,
        "err_code": 10213,
        "description": "stream mirror consumer config is invalid",
    }
    transformed = {**_own("O"), "subject_transforms": [{"src": "a", "dest": "b"}]}
    twice = [_own("O"), transformed]
    dup = await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "sources": twice})
    assert dup["error"]["err_code"] == 10216
    assert dup["error"]["description"] == "duplicate stream source consumer detected"


async def test_a_source_reads_a_work_queue_through_the_users_durable(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    """No `JS_SRC_` consumer is made; the durable survives the sourcing stream's deletion."""
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="WQ", subjects=["w.>"], retention="workqueue")
    for i in range(3):
        await js.publish("w.a", b"%d" % i)
    assert "error" not in await _durable(nc, "WQ")
    created = await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "sources": [_own("WQ")]})
    assert created["config"]["sources"] == [_own("WQ")]
    for i in range(3, 5):
        await js.publish("w.a", b"%d" % i)
    await _drained(nc, "WQ", {"S": 5})
    assert await _origin_seqs(nc, "S") == [1, 2, 3, 4, 5]
    copy = await js.get_msg("S", seq=1)
    assert (copy.headers or {})["Nats-Stream-Source"].startswith(f"{STAMP} 1 > > w.a ")
    info = await api(nc, "$JS.API.STREAM.INFO.S")
    assert (info["sources"][0]["name"], info["sources"][0]["seq"]) == ("WQ", 5)
    assert (await api(nc, "$JS.API.CONSUMER.NAMES.WQ"))["consumers"] == ["C"]
    await js.delete_stream("S")
    await asyncio.sleep(0.5)  # a deleted source's clean-up is sent at once: none came
    assert (await api(nc, "$JS.API.CONSUMER.NAMES.WQ"))["consumers"] == ["C"]


def _own(origin: str) -> dict[str, Any]:
    return {"name": origin, "consumer": OWN}


async def test_a_mirror_reads_through_the_users_durable(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="I", subjects=["i.>"], retention="interest")
    assert "error" not in await _durable(nc, "I")
    await api(nc, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": _own("I")})
    for i in range(4):
        await js.publish("i.x", b"%d" % i)
    await _drained(nc, "I", {"M": 4})
    info = await api(nc, "$JS.API.STREAM.INFO.M")
    assert (info["state"]["first_seq"], info["state"]["last_seq"]) == (1, 4)
    assert info["mirror"]["name"] == "I" and "error" not in info["mirror"]
    msg = await js.get_msg("M", seq=4)
    assert (msg.subject, msg.data) == ("i.x", b"3")


async def test_a_durable_without_flow_control_acks_is_refused_in_stream_info(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="L", subjects=["l.>"])
    await js.publish("l.x", b"1")
    assert "error" not in await _durable(nc, "L", ack_policy="explicit")
    await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "sources": [_own("L")]})
    await api(nc, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": _own("L")})
    source = await poll_async(lambda: _link_error(nc, "S", "sources"), "no source error")
    assert source == {
        "code": 400,
        "err_code": 10217,
        "description": "stream source consumer requires flow control ack policy",
    }
    mirror = await poll_async(lambda: _link_error(nc, "M", "mirror"), "no mirror error")
    assert mirror == {
        "code": 400,
        "err_code": 10214,
        "description": "stream mirror consumer requires flow control ack policy",
    }
    assert await _messages(nc, "S") == 0 and await _messages(nc, "M") == 0


async def _link_error(nc: NATS, stream: str, key: str) -> dict[str, Any] | None:
    info = await api(nc, f"$JS.API.STREAM.INFO.{stream}")
    link = info[key][0] if key == "sources" else info[key]
    return link.get("error")


async def test_a_durable_made_after_the_source_is_read_once_there(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    """A reset of a durable that is not there goes unanswered; the link asks again."""
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="WQ", subjects=["w.>"], retention="workqueue")
    await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "sources": [_own("WQ")]})
    for i in range(3):
        await js.publish("w.a", b"%d" % i)
    await asyncio.sleep(1)
    assert await _messages(nc, "S") == 0 and await _messages(nc, "WQ") == 3
    assert "error" not in await _durable(nc, "WQ")
    await _drained(nc, "WQ", {"S": 3}, timeout=40)
    assert await _origin_seqs(nc, "S") == [1, 2, 3]


async def test_the_consumer_api_checks_a_sourcing_readers_stream_identity(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    """API level 5: another identity is refused with 10225 and the answer names this one;
    an empty one is told it; a consumer that is not a sourcing reader is not checked."""
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="L", subjects=["l.>"])
    cfg = {
        "name": "JS_SRC_x",
        "deliver_subject": "dlv.x",
        "ack_policy": "none",
        "direct": True,
        "sourcing": True,
        "flow_control": True,
        "idle_heartbeat": 1_000_000_000,
    }
    body = {"stream_name": "L", "config": cfg}
    other = await api(nc, "$JS.API.CONSUMER.CREATE.L", body, **{"Nats-Stream-Identity": "x"})
    error = other["error"]
    assert (error["code"], error["err_code"]) == (400, 10225)
    assert error["description"].startswith("consumer's stream identity does not match: ")
    identity = error["description"].rsplit(" ", 1)[1]
    data = _bytes(body)
    told = await nc.request(
        "$JS.API.CONSUMER.CREATE.L", data, timeout=5, headers={"Nats-Stream-Identity": ""}
    )
    assert (told.headers or {}).get("Nats-Stream-Identity") == identity
    same = await nc.request(
        "$JS.API.CONSUMER.CREATE.L", data, timeout=5, headers={"Nats-Stream-Identity": identity}
    )
    assert (same.headers or {}).get("Nats-Stream-Identity") == identity
    plain = {"stream_name": "L", "config": {"durable_name": "P", "ack_policy": "explicit"}}
    made = await nc.request(
        "$JS.API.CONSUMER.DURABLE.CREATE.L.P",
        _bytes(plain),
        timeout=5,
        headers={"Nats-Stream-Identity": "x"},
    )
    assert not made.headers and b'"error"' not in made.data


async def test_a_source_on_its_own_durable_survives_kill(
    jetlake_js: ServerProcess,
    connect: Connect,
) -> None:
    """The sourcing server dies mid-copy: after the restart the source holds every message
    once, and the queue empties. jetlake only, as `test_work_queue_sourcing_survives_kill`
    explains (the reference buffers its writes and loses some under kill -9)."""
    nc = await connect(jetlake_js)
    js = nc.jetstream()
    await js.add_stream(name="WQ", subjects=["w"], retention="workqueue")
    assert "error" not in await _durable(nc, "WQ")
    await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "sources": [_own("WQ")]})
    nc = await _killed_while_copying(jetlake_js, connect)
    await _drained(nc, "WQ", {"S": 2050}, timeout=40)
    assert await _origin_seqs(nc, "S") == list(range(1, 2051))
    assert (await api(nc, "$JS.API.CONSUMER.NAMES.WQ"))["consumers"] == ["C"]
