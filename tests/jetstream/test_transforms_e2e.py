"""Subject transforms, republish and config `mappings {}` against both servers.

Partition numbers are compared with values observed from nats-server: a client
that computes the partition of a key must find the message where the server put it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from tests.conftest import Connect, MakeServer
from tests.jetstream.test_streams_e2e import api
from tests.support.servers import ServerProcess

# (published subject, stored subject) through `orders.*.*` → `part.{{partition(7,1,2)}}.…`;
# the numbers are the reference's.
PARTITIONED = [
    ("orders.acme.1", "part.6.acme.1.ac.me"),
    ("orders.acme.2", "part.1.acme.2.ac.me"),
    ("orders.globex.77", "part.3.globex.77.gl.obex"),
    ("orders.initech.x", "part.1.initech.x.in.itech"),
]


async def _subscribe(
    nc: NATS, subject: str, count: int
) -> Callable[[], Coroutine[Any, Any, list[Msg]]]:
    """Subscribe (the server knows once this returns); the result awaits `count` messages."""
    got: list[Msg] = []
    done = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        got.append(msg)
        if len(got) == count:
            done.set()

    await nc.subscribe(subject, cb=on_msg)
    await nc.flush()

    async def wait() -> list[Msg]:
        await asyncio.wait_for(done.wait(), 5)
        return got

    return wait


async def test_stream_subject_transform_partitions(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    cfg = {
        "name": "T",
        "subjects": ["orders.>"],
        "subject_transform": {
            "src": "orders.*.*",
            "dest": "part.{{partition(7,1,2)}}.{{wildcard(1)}}.$2.{{SplitFromLeft(1,2)}}",
        },
    }
    created = await api(nc, "$JS.API.STREAM.CREATE.T", cfg)
    assert created["config"]["subject_transform"] == cfg["subject_transform"]
    for subject, _ in PARTITIONED:
        assert (await api(nc, subject, b"x"))["stream"] == "T"
    await api(nc, "orders.not.two.tokens", b"y")  # outside src: stored as published
    info = await api(nc, "$JS.API.STREAM.INFO.T", {"subjects_filter": ">"})
    stored = {stored for _, stored in PARTITIONED} | {"orders.not.two.tokens"}
    assert set(info["state"]["subjects"]) == stored


async def test_transform_validation_errors(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    cases = [
        ({"src": "a.*", "dest": "b.{{nope(1)}}"}, 10156, "unknown function in {{nope(1)}}"),
        ({"src": "a.*", "dest": "b.{{wildcard(2)}}"}, 10156, "out of range in {{wildcard(2)}}"),
        ({"src": "a.*", "dest": "b.{{split(1)}}"}, 10156, "not enough arguments"),
        ({"src": "a.*", "dest": "b.{{partition(x,1)}}"}, 10156, "invalid or in the wrong format"),
        ({"src": "a..b", "dest": "b"}, 10155, "stream transform source: invalid subject a..b"),
        ({"src": "a.*", "dest": "b.*"}, 10156, "stream transform: invalid subject"),
    ]
    for transform, code, words in cases:
        cfg = {"name": "V", "subjects": ["a.>"], "subject_transform": transform}
        doc = await api(nc, "$JS.API.STREAM.CREATE.V", cfg)
        assert doc["error"]["err_code"] == code, (transform, doc)
        assert doc["error"]["code"] == 400
        assert words in doc["error"]["description"], (transform, doc)
    cycle = {"name": "V", "subjects": ["a.>"], "republish": {"src": ">", "dest": "a.x"}}
    doc = await api(nc, "$JS.API.STREAM.CREATE.V", cycle)
    assert doc["error"] == {
        "code": 500,
        "err_code": 10052,
        "description": "stream configuration for republish destination forms a cycle",
    }


async def test_republish_headers(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    cfg = {
        "name": "R",
        "subjects": ["r.>"],
        "republish": {"src": "r.*", "dest": "echo.$1"},
    }
    created = await api(nc, "$JS.API.STREAM.CREATE.R", cfg)
    assert created["config"]["republish"] == {"src": "r.*", "dest": "echo.$1"}
    wait = await _subscribe(nc, "echo.>", 3)
    js = nc.jetstream()
    await js.publish("r.a", b"one")
    await js.publish("r.b", b"two", headers={"X-Mine": "yes"})
    await js.publish("r.deep.skip", b"not covered")
    await js.publish("r.a", b"three")
    got = await wait()
    assert [(m.subject, m.data) for m in got] == [
        ("echo.a", b"one"),
        ("echo.b", b"two"),
        ("echo.a", b"three"),
    ]
    first, second, third = (m.headers or {} for m in got)
    assert {k: v for k, v in first.items() if k != "Nats-Time-Stamp"} == {
        "Nats-Stream": "R",
        "Nats-Subject": "r.a",
        "Nats-Sequence": "1",
        "Nats-Last-Sequence": "0",
    }
    assert first["Nats-Time-Stamp"].endswith("Z")
    assert (second["X-Mine"], second["Nats-Sequence"]) == ("yes", "2")
    assert (third["Nats-Sequence"], third["Nats-Last-Sequence"]) == ("4", "1")


async def test_republish_headers_only_and_kv(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    from nats.js.api import KeyValueConfig, RePublish

    nc = await connect(js_server)
    js = nc.jetstream()
    watch = await _subscribe(nc, "kvecho.>", 2)
    kv = await js.create_key_value(
        KeyValueConfig(
            bucket="cfg",
            republish=RePublish(src="$KV.cfg.>", dest="kvecho.>", headers_only=True),
        )
    )
    await kv.put("color", b"blue")
    await kv.put("color", b"green!")
    got = await watch()
    assert [m.subject for m in got] == ["kvecho.color"] * 2  # `>` keeps the tail past src
    assert [m.data for m in got] == [b"", b""]
    assert [(m.headers or {}).get("Nats-Msg-Size") for m in got] == ["4", "6"]
    assert [(m.headers or {}).get("Nats-Last-Sequence") for m in got] == ["0", "1"]
    assert (await kv.get("color")).value == b"green!"


MAPPINGS = """
mappings {
  "svc.one": "svc.uno"
  "ord.*.*": "ord.{{partition(5,1)}}.{{wildcard(2)}}.{{wildcard(1)}}"
  "canary": [{destination: "canary.a", weight: 100%}]
  "split": [{destination: "split.a", weight: 50%}, {destination: "split.b", weight: 50%}]
}
"""


async def test_config_mappings(make_server: MakeServer, connect: Connect) -> None:
    server = make_server(config=MAPPINGS)
    nc = await connect(server)
    expected = [
        ("svc.one", "svc.uno"),
        ("ord.acme.9", "ord.0.9.acme"),
        ("ord.globex.9", "ord.2.9.globex"),
        ("canary", "canary.a"),
        ("unmapped.x", "unmapped.x"),
    ]
    routed = await _subscribe(nc, ">", len(expected))
    for subject, _ in expected:
        await nc.publish(subject, b"")
    assert [m.subject for m in await routed()] == [dest for _, dest in expected]
    splits = await _subscribe(nc, "split.*", 200)
    for _ in range(200):
        await nc.publish("split", b"")
    seen = {m.subject for m in await splits()}
    assert seen == {"split.a", "split.b"}


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ('"a.*": "b.{{nope(1)}}"', 'Error adding mapping for "a.*" to "b.{{nope(1)}}"'),
        ('"a": [{destination: "b", weight: 120%}]', "Invalid weight 120 for mapping destination"),
        ('"a": [{destination: "b"}]', 'Missing weight for mapping destination "b"'),
        (
            '"a": [{destination: "b", weight: 60}, {destination: "c", weight: 60}]',
            "total weight needs to be <= 100",
        ),
    ],
)
def test_config_mapping_errors(body: str, words: str, make_server: MakeServer) -> None:
    from tests.support.servers import ServerError

    with pytest.raises(ServerError) as failed:
        make_server(config=f"mappings {{\n  {body}\n}}\n")
    assert words in str(failed.value)
