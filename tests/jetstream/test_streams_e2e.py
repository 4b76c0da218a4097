"""JetStream streams through nats-py against both servers: the same scenario, the same answers.

Every expectation below was observed from the reference nats-server; jetlake
must produce what a client sees identically, timestamps, ids and the server's
own version metadata aside (`normalise`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.js.errors import APIError, BadRequestError, NotFoundError

from tests.conftest import Connect, MakeServer
from tests.support.raw import RawClient
from tests.support.servers import ServerProcess

_VOLATILE = {"ts", "created", "cluster", "first_ts", "last_ts", "time"}


def normalise(doc: Any) -> Any:
    """Drop what differs between any two runs: times, server ids and version metadata."""
    if isinstance(doc, dict):
        return {
            k: normalise(v)
            for k, v in doc.items()
            if k not in _VOLATILE and not (k.startswith("_nats.") and k != "_nats.req.level")
        }
    if isinstance(doc, list):
        return [normalise(v) for v in doc]
    return doc


async def api(nc: NATS, subject: str, body: Any = b"", **headers: str) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    msg = await nc.request(subject, data, timeout=5, headers=headers or None)
    return json.loads(msg.data)


async def test_stream_info_fields(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    created = await api(nc, "$JS.API.STREAM.CREATE.orders", {"name": "orders", "subjects": ["o.>"]})
    assert normalise(created) == {
        "type": "io.nats.jetstream.api.v1.stream_create_response",
        "config": {
            "name": "orders",
            "subjects": ["o.>"],
            "retention": "limits",
            "max_consumers": -1,
            "max_msgs": -1,
            "max_bytes": -1,
            "max_age": 0,
            "max_msgs_per_subject": -1,
            "max_msg_size": -1,
            "discard": "old",
            "storage": "file",
            "num_replicas": 1,
            "duplicate_window": 120000000000,
            "compression": "none",
            "allow_direct": False,
            "mirror_direct": False,
            "sealed": False,
            "deny_delete": False,
            "deny_purge": False,
            "allow_rollup_hdrs": False,
            "consumer_limits": {},
            "allow_msg_ttl": False,
            "metadata": {"_nats.req.level": "0"},
        },
        "state": {
            "messages": 0,
            "bytes": 0,
            "first_seq": 0,
            "last_seq": 0,
            "consumer_count": 0,
        },
        "did_create": True,
    }
    for subject in ("o.a", "o.b", "o.a"):
        await api(nc, subject, b"hello")
    await api(nc, "$JS.API.STREAM.MSG.DELETE.orders", {"seq": 2})
    info = await api(
        nc, "$JS.API.STREAM.INFO.orders", {"subjects_filter": ">", "deleted_details": True}
    )
    assert (info["total"], info["offset"], info["limit"]) == (1, 0, 100000)
    assert normalise(info["state"]) == {
        "messages": 2,
        "bytes": 2 * 38,  # the reference's file store counts 30 bytes of overhead a message
        "first_seq": 1,
        "last_seq": 3,
        "num_subjects": 1,
        "subjects": {"o.a": 2},
        "num_deleted": 1,
        "deleted": [2],
        "consumer_count": 0,
    }
    names = await api(nc, "$JS.API.STREAM.NAMES", {"subject": "o.x"})
    assert normalise(names) == {
        "type": "io.nats.jetstream.api.v1.stream_names_response",
        "total": 1,
        "offset": 0,
        "limit": 1024,
        "streams": ["orders"],
    }


async def test_error_paths(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    with pytest.raises(NotFoundError) as missing:
        await js.stream_info("nope")
    assert (missing.value.err_code, missing.value.description) == (10059, "stream not found")
    await js.add_stream(name="s", subjects=["s.*"], max_msg_size=64)
    with pytest.raises(BadRequestError) as in_use:
        await js.add_stream(name="s", subjects=["s.*"], max_msgs=5)
    assert in_use.value.err_code == 10058
    with pytest.raises(BadRequestError) as overlap:
        await js.add_stream(name="t", subjects=["s.a"])
    assert (overlap.value.err_code, overlap.value.description) == (
        10065,
        "subjects overlap with an existing stream",
    )
    await js.publish("s.a", b"1", headers={"Nats-Msg-Id": "m1"})
    assert (await js.publish("s.a", b"1", headers={"Nats-Msg-Id": "m1"})).duplicate
    wrong = await api(nc, "s.a", b"x", **{"Nats-Expected-Last-Sequence": "7"})
    assert wrong["error"] == {
        "code": 400,
        "err_code": 10071,
        "description": "wrong last sequence: 1",
    }
    big = await api(nc, "s.a", b"x" * 65)
    assert big == {
        "error": {
            "code": 400,
            "err_code": 10054,
            "description": "message size exceeds maximum allowed",
        },
        "stream": "s",
        "seq": 0,
    }
    with pytest.raises(NoRespondersError):
        await nc.request("nobody.listens", b"", timeout=2)


async def test_discard_new_sealed_and_deny_delete(
    js_server: ServerProcess, connect: Connect
) -> None:
    nc = await connect(js_server)
    cfg = {"name": "d", "subjects": ["d"], "max_msgs": 1, "discard": "new", "deny_delete": True}
    await api(nc, "$JS.API.STREAM.CREATE.d", cfg)
    assert (await api(nc, "d", b"1"))["seq"] == 1
    assert (await api(nc, "d", b"2"))["error"] == {
        "code": 503,
        "err_code": 10077,
        "description": "maximum messages exceeded",
    }
    refused = await api(nc, "$JS.API.STREAM.MSG.DELETE.d", {"seq": 1})
    assert refused["error"] == {
        "code": 500,
        "err_code": 10057,
        "description": "message delete not permitted",
    }
    sealed = await api(nc, "$JS.API.STREAM.UPDATE.d", {**cfg, "sealed": True})
    assert sealed["config"]["sealed"] and sealed["config"]["deny_purge"]
    assert (await api(nc, "d", b"3"))["error"]["err_code"] == 10109
    unseal = await api(nc, "$JS.API.STREAM.UPDATE.d", cfg)
    assert unseal["error"]["description"] == (
        "stream configuration update can not unseal a sealed stream"
    )


async def test_messages_purge_and_direct_get(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="m", subjects=["m.>"], allow_direct=True)
    for i, subject in enumerate(["m.a", "m.b", "m.a", "m.a", "m.c"]):
        await js.publish(subject, str(i).encode(), headers={"K": str(i)})
    got = await js.get_msg("m", subject="m.a", direct=True)
    assert (got.seq, got.data, got.headers and got.headers["K"]) == (4, b"3", "3")
    by_seq = await js.get_msg("m", seq=2)
    assert (by_seq.subject, by_seq.data) == ("m.b", b"1")
    with pytest.raises(NotFoundError):
        await js.get_msg("m", seq=99, direct=True)
    assert await js.purge_stream("m", subject="m.a", keep=1)
    info = await js.stream_info("m", subjects_filter=">")
    assert info.state.subjects == {"m.a": 1, "m.b": 1, "m.c": 1}
    purged = await api(nc, "$JS.API.STREAM.PURGE.m", {"seq": 5})
    assert normalise(purged) == {
        "type": "io.nats.jetstream.api.v1.stream_purge_response",
        "success": True,
        "purged": 2,
    }
    assert (await js.delete_msg("m", 5)) is True
    with pytest.raises(APIError) as gone:
        await js.delete_msg("m", 5)
    assert gone.value.err_code == 10057


async def test_key_value_put_get_history(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    kv = await nc.jetstream().create_key_value(bucket="cfg", history=2)
    await kv.put("a", b"1")
    await kv.put("a", b"2")
    revision = await kv.put("a", b"3")
    entry = await kv.get("a")
    assert (entry.value, entry.revision) == (b"3", revision)
    await kv.create("b", b"x")
    with pytest.raises(Exception, match="wrong last sequence"):
        await kv.create("b", b"y")
    await kv.delete("a")
    status = await kv.status()
    assert status.values == 3  # history 2 of "a" (3 and its delete marker), plus "b"


async def test_acknowledged_messages_survive_a_restart(
    js_server: ServerProcess, connect: Connect
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="r", subjects=["r"])
    acks = [await js.publish("r", f"m{i}".encode()) for i in range(20)]
    await nc.close()
    await js_server.restart_async()
    nc = await connect(js_server)
    js = nc.jetstream()
    info = await js.stream_info("r")
    assert (info.state.messages, info.state.last_seq) == (20, acks[-1].seq)
    assert (await js.get_msg("r", seq=7)).data == b"m6"


async def test_jetstream_disabled_means_no_responders(
    make_server: MakeServer, connect: Connect
) -> None:
    nc = await connect(make_server())
    with pytest.raises(NoRespondersError):
        await nc.request("$JS.API.INFO", b"", timeout=2)
    with pytest.raises(NoRespondersError):
        await nc.request("$JS.API.STREAM.CREATE.x", b'{"name":"x"}', timeout=2)


async def test_jetstream_disabled_wire_form(make_server: MakeServer) -> None:
    """No API listener at all: the core 503, Nats-Subject included, as from the reference."""
    server = make_server()
    async with await RawClient.connect(server.host, server.port) as c:
        await c.handshake(headers=True, no_responders=True)
        await c.send(b"SUB _INBOX.js 1\r\nPUB $JS.API.INFO _INBOX.js 0\r\n\r\n")
        line, payload = await c.read_op()
        assert line == b"HMSG _INBOX.js 1 44 44"
        assert payload == b"NATS/1.0 503\r\nNats-Subject: $JS.API.INFO\r\n\r\n"


async def test_required_api_level_header(js_server: ServerProcess, connect: Connect) -> None:
    """A request naming an API level the server lacks (or no number) is refused with 412."""
    nc = await connect(js_server)
    config = {"name": "LVL", "subjects": ["lvl"], "allow_direct": True}
    await api(nc, "$JS.API.STREAM.CREATE.LVL", config)
    refused = {
        "code": 412,
        "err_code": 10185,
        "description": "JetStream minimum api level required",
    }
    for level in ("99", "x"):
        for subject in ("$JS.API.INFO", "$JS.API.STREAM.INFO.LVL"):
            doc = await api(nc, subject, **{"Nats-Required-Api-Level": level})
            assert doc["error"] == refused, (subject, level)
        got = await nc.request(
            "$JS.API.DIRECT.GET.LVL", b'{"seq":1}', headers={"Nats-Required-Api-Level": level}
        )
        assert got.headers == {"Status": "412", "Description": "Required Api Level"}
    accepted = await api(nc, "$JS.API.STREAM.INFO.LVL", **{"Nats-Required-Api-Level": "1"})
    assert accepted["config"]["name"] == "LVL"
