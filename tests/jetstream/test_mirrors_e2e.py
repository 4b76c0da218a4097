"""Mirrors against both servers: the origin's numbering, headers and timestamps kept, the
`mirror` state, the reference's refusals, promotion on update, direct gets answered for
the origin, a KV bucket read through a mirror, external origins as configured, and
progress that survives a kill -9 with nothing copied twice or skipped."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.js.errors import KeyNotFoundError

from tests.conftest import Connect
from tests.jetstream.test_sources_e2e import stream_holding
from tests.jetstream.test_streams_e2e import api
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess


async def _until_seq(nc: NATS, stream: str, last_seq: int) -> dict[str, Any]:
    return await stream_holding(nc, stream, last_seq, key="last_seq")


async def _origin_get(nc: NATS, origin: str, request: bytes) -> Msg:
    """A direct get for `origin` once its mirror has joined the origin's responders: the
    mirror joins when its first catch-up has committed, a moment after its copies show."""
    return await poll_async(
        lambda: nc.request(f"$JS.API.DIRECT.GET.{origin}", request, timeout=5),
        f"a direct get for {origin} answered",
        10,
        retry=NoRespondersError,
    )


async def _get(nc: NATS, stream: str, seq: int) -> dict[str, Any]:
    return await api(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})


async def test_mirror_keeps_the_origins_numbering_headers_and_times(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="O", subjects=["o.>"], allow_direct=True)
    for i in range(5):
        await js.publish(f"o.{i % 2}", b"m%d" % i, headers={"Nats-Msg-Id": f"id{i}"})
    await js.delete_msg("O", 2)
    created = await api(nc, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O"}})
    config = created["config"]
    assert config["mirror"] == {"name": "O"} and config["mirror_direct"] is True
    assert "subjects" not in config and "duplicate_window" not in config
    assert created["mirror"]["name"] == "O" and created["mirror"]["lag"] == 0
    info = await _until_seq(nc, "M", 5)
    state = info["state"]
    assert (state["messages"], state["first_seq"], state["last_seq"]) == (4, 1, 5)
    assert state["num_deleted"] == 1 and state["bytes"] == 276
    assert info["mirror"]["lag"] == 0 and info["mirror"]["active"] >= 0
    for seq in (1, 3, 4, 5):
        assert (await _get(nc, "M", seq))["message"] == (await _get(nc, "O", seq))["message"]
    assert (await _get(nc, "M", 2))["error"]["err_code"] == 10037
    ack = await js.publish("o.9", b"late")
    info = await _until_seq(nc, "M", ack.seq)
    assert info["state"]["last_seq"] == 6
    assert (await _get(nc, "M", 6))["message"] == (await _get(nc, "O", 6))["message"]


async def test_filtered_and_transformed_mirrors(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="O", subjects=["o.>"])
    for i in range(6):
        await js.publish(f"o.{i % 2}", b"m%d" % i)
    await js.delete_msg("O", 2)
    filtered = {"name": "O", "filter_subject": "o.1", "opt_start_seq": 2}
    await api(nc, "$JS.API.STREAM.CREATE.F", {"name": "F", "mirror": filtered})
    info = await _until_seq(nc, "F", 6)
    state = info["state"]
    assert (state["messages"], state["first_seq"], state["last_seq"]) == (2, 4, 6)
    assert state["num_deleted"] == 1
    assert info["mirror"]["filter_subject"] == "o.1" and info["mirror"]["lag"] == 0
    transforms = [{"src": "o.0", "dest": "zero"}, {"src": "o.1", "dest": ""}]
    await api(
        nc,
        "$JS.API.STREAM.CREATE.T",
        {"name": "T", "mirror": {"name": "O", "subject_transforms": transforms}},
    )
    info = await _until_seq(nc, "T", 6)
    assert info["mirror"]["subject_transforms"] == transforms
    assert info["state"]["messages"] == 5
    subjects = [(await _get(nc, "T", seq))["message"]["subject"] for seq in (1, 3, 4)]
    assert subjects == ["zero", "zero", "o.1"]


async def test_mirror_and_source_starting_past_the_origins_end_and_own_limits(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="O", subjects=["o.>"], max_msgs=3)
    for i in range(10):
        await js.publish("o.a", b"%d" % i)
    limited = {"name": "M", "mirror": {"name": "O"}, "max_msgs": 2}
    await api(nc, "$JS.API.STREAM.CREATE.M", limited)
    state = (await _until_seq(nc, "M", 10))["state"]
    assert (state["messages"], state["first_seq"], state["last_seq"]) == (2, 9, 10)
    late = {"name": "P", "mirror": {"name": "O", "opt_start_seq": 20}}
    await api(nc, "$JS.API.STREAM.CREATE.P", late)
    source = {"name": "S", "sources": [{"name": "O", "opt_start_seq": 20}]}
    await api(nc, "$JS.API.STREAM.CREATE.S", source)
    for i in range(12):
        await js.publish("o.b", b"%d" % i)
    state = (await _until_seq(nc, "P", 22))["state"]
    assert (state["messages"], state["first_seq"], state["last_seq"]) == (3, 20, 22)
    info = await _until_seq(nc, "S", 3)
    assert info["state"]["messages"] == 3 and info["sources"][0]["lag"] == 0


async def test_a_mirror_drains_a_work_queue_as_its_consumer_would(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    """The reference's link reads through a consumer that acks on delivery, and a work
    queue drops what a consumer acked: the messages move to the mirror."""
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="WQ", subjects=["w.>"], retention="workqueue")
    for i in range(3):
        await js.publish("w.a", b"%d" % i)
    await api(nc, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "WQ"}})
    await _until_seq(nc, "M", 3)
    await js.publish("w.a", b"3")
    assert (await _until_seq(nc, "M", 4))["state"]["messages"] == 4

    async def drained() -> bool:
        return not (await api(nc, "$JS.API.STREAM.INFO.WQ"))["state"]["messages"]

    await poll_async(drained, "the work queue emptied of what the mirror took", 10)


MIRROR_REFUSALS = [
    ({"mirror": {"name": "O"}, "subjects": ["x"]}, 400, 10034),
    ({"mirror": {"name": "O"}, "sources": [{"name": "O"}]}, 400, 10031),
    ({"mirror": {"name": "O"}, "first_seq": 5}, 400, 10143),
    ({"mirror_direct": True, "subjects": ["x"]}, 500, 10052),
    ({"mirror": {"name": "a.b"}}, 400, 10142),
    (
        {"mirror": {"name": "O", "filter_subject": "a", "subject_transforms": [{"src": "b"}]}},
        400,
        10150,
    ),
    ({"mirror": {"name": "O", "subject_transforms": [{"src": "a.>"}, {"src": "a.b"}]}}, 400, 10152),
    (
        {"mirror": {"name": "O", "subject_transforms": [{"src": "a.*", "dest": "{{x()}}"}]}},
        400,
        10154,
    ),
    ({"mirror": {"name": "O"}, "subject_delete_marker_ttl": 5_000_000_000}, 500, 10052),
    ({"mirror": {"name": "O"}, "max_msg_size": 10}, 400, 10030),
    ({"sources": [{"name": "O"}], "max_msg_size": 10}, 400, 10046),
    ({"mirror": {"name": "E"}}, 500, 10052),
    ({"mirror": {"name": "O", "external": {"api": "$JS.API"}}}, 400, 10021),
    ({"mirror": {"name": "O", "external": {"api": "x.*"}}}, 500, 10052),
    ({"mirror": {"name": "O", "external": {"api": "x", "deliver": "d.*"}}}, 400, 10024),
]


@pytest.mark.parametrize("body", [case[0] for case in MIRROR_REFUSALS])
async def test_mirror_refusals_are_the_references(
    js_server: ServerProcess,
    connect: Connect,
    body: dict[str, Any],
) -> None:
    nc = await connect(js_server)
    await api(nc, "$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["o"], "max_msg_size": 100})
    refused = await api(nc, "$JS.API.STREAM.CREATE.E", {"name": "E", **body})
    _, code, err_code = next(case for case in MIRROR_REFUSALS if case[0] is body)
    assert (refused["error"]["code"], refused["error"]["err_code"]) == (code, err_code), refused


async def test_mirror_update_rules_and_promotion(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="O", subjects=["o.>"])
    for i in range(3):
        await js.publish("o.x", b"%d" % i)
    await api(nc, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O"}})
    await _until_seq(nc, "M", 3)
    changed = {"name": "M", "mirror": {"name": "O", "filter_subject": "o.y"}}
    refused = await api(nc, "$JS.API.STREAM.UPDATE.M", changed)
    assert refused["error"] == {
        "code": 400,
        "err_code": 10055,
        "description": "stream mirror configuration can not be updated",
    }
    same = await api(
        nc, "$JS.API.STREAM.UPDATE.M", {"name": "M", "mirror": {"name": "O"}, "max_msgs": 100}
    )
    assert same["config"]["max_msgs"] == 100
    promoted = await api(nc, "$JS.API.STREAM.UPDATE.M", {"name": "M", "subjects": ["m.>"]})
    assert "mirror" not in promoted and "mirror" not in promoted["config"]
    assert promoted["config"]["mirror_direct"] is False
    assert promoted["config"]["duplicate_window"] == 120_000_000_000
    ack = await js.publish("m.own", b"mine")
    assert (ack.stream, ack.seq) == ("M", 4)
    await js.publish("o.x", b"not copied any more")
    info = await api(nc, "$JS.API.STREAM.INFO.M")
    assert info["state"]["last_seq"] == 4 and "mirror" not in info
    again = await api(
        nc, "$JS.API.STREAM.UPDATE.M", {"name": "M", "subjects": ["m.>"], "mirror": {"name": "O"}}
    )
    assert again["error"]["err_code"] == 10034


async def test_mirror_direct_answers_for_its_origin(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="O", subjects=["o.>"], allow_direct=True)
    await js.publish("o.a", b"first")
    await api(nc, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O"}})
    await _until_seq(nc, "M", 1)
    await js.delete_stream("O")  # the mirror still answers the origin's direct gets
    reply = await _origin_get(nc, "O", b'{"seq":1}')
    assert reply.data == b"first"
    assert reply.headers is not None and reply.headers["Nats-Stream"] == "M"
    last = await nc.request("$JS.API.DIRECT.GET.O.o.a", b"", timeout=5)
    assert last.data == b"first"


async def test_a_kv_bucket_read_through_a_mirror(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    kv_a = await js.create_key_value(bucket="A", history=5)
    await kv_a.put("k", b"v1")
    await kv_a.put("k", b"v2")
    await kv_a.put("gone", b"x")
    mirror = {"name": "KV_A", "subject_transforms": [{"src": "$KV.A.>", "dest": "$KV.B.>"}]}
    cfg = {
        "name": "KV_B",
        "mirror": mirror,
        "allow_direct": True,
        "allow_rollup_hdrs": True,  # without it a mirror stores rollups but does not act
        "max_msgs_per_subject": 5,
    }
    created = await api(nc, "$JS.API.STREAM.CREATE.KV_B", cfg)
    origin = await api(nc, "$JS.API.STREAM.INFO.KV_A")
    assert created["config"]["mirror_direct"] is origin["config"]["allow_direct"]
    await _until_seq(nc, "KV_B", 3)
    kv_b = await js.key_value("B")
    assert (await kv_b.get("k")).value == b"v2"
    await kv_a.purge("gone")  # a rollup: the mirror drops the key's history as well
    await _until_seq(nc, "KV_B", 4)
    with pytest.raises(KeyNotFoundError):
        await kv_b.get("gone")
    info = await api(nc, "$JS.API.STREAM.INFO.KV_B")
    assert info["state"]["messages"] == 3  # k twice, the purge marker


async def test_external_origins_are_configured_and_reported(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    """Neither server reaches `$JS.hub.API` here (no domain, no import): both report the
    link as the reference does before its origin answers."""
    nc = await connect(js_server)
    external = {"api": "$JS.hub.API", "deliver": "dlv"}
    made = await api(
        nc, "$JS.API.STREAM.CREATE.M", {"name": "M", "mirror": {"name": "O", "external": external}}
    )
    assert made["config"]["mirror"]["external"] == external
    assert made["mirror"] == {"name": "O", "external": external, "lag": 0, "active": -1}
    sources = [{"name": "O", "filter_subject": "o.1", "external": {"api": "$JS.hub.API"}}]
    made = await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "sources": sources})
    echoed = {"api": "$JS.hub.API", "deliver": ""}
    assert made["config"]["sources"] == [{**sources[0], "external": echoed}]
    assert made["sources"] == [
        {"name": "O", "external": echoed, "lag": 0, "active": -1, "filter_subject": "o.1"}
    ]


async def test_mirror_progress_survives_kill(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    """The server dies while the new mirror catches up: after the restart it resumes with
    nothing copied twice or skipped, and the origin's gap stays a gap."""
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="O", subjects=["o"])
    acks = [await js.publish_async("o", b"%d" % i) for i in range(3000)]  # type: ignore[attr-defined]
    await asyncio.gather(*acks)
    await js.delete_msg("O", 150)
    mirror = {"name": "M", "mirror": {"name": "O"}, "allow_direct": True}
    await api(nc, "$JS.API.STREAM.CREATE.M", mirror)
    js_server.kill()
    await js_server.restart_async()
    nc = await connect(js_server)
    js = nc.jetstream()
    for i in range(3000, 3050):
        await js.publish("o", b"%d" % i)
    info = await _until_seq(nc, "M", 3050)
    state = info["state"]
    assert (state["first_seq"], state["last_seq"], state["messages"]) == (1, 3050, 3049)
    got = []
    for seq in range(1, 3051):
        reply = await nc.request("$JS.API.DIRECT.GET.M", b'{"seq":%d}' % seq, timeout=5)
        got.append(int(reply.data) if reply.data else None)
    assert got == [i if i != 149 else None for i in range(3050)]
