"""Stream sources against both servers: what is copied, the state reported, errors, and
progress that survives a kill -9 with nothing copied twice or skipped."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from nats.aio.client import Client as NATS

from tests.conftest import Connect
from tests.jetstream.test_streams_e2e import api
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess


async def stream_holding(
    nc: NATS, stream: str, messages: int, key: str = "messages", within: float = 10
) -> dict[str, Any]:
    """Stream info once its state's `key` reaches `messages` (sourcing and mirroring are
    asynchronous)."""

    async def reached() -> dict[str, Any] | None:
        info = await api(nc, f"$JS.API.STREAM.INFO.{stream}")
        return info if info["state"][key] >= messages else None

    return await poll_async(reached, f"{stream}'s {key} at {messages}", within)


async def test_sources_copy_filter_and_transform(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="EU", subjects=["eu.>"])
    await js.add_stream(name="US", subjects=["us.>"])
    await js.publish("eu.order", b"e1")
    cfg = {
        "name": "ALL",
        "sources": [
            {"name": "EU"},
            {"name": "US", "subject_transforms": [{"src": "us.*", "dest": "world.us.$1"}]},
        ],
    }
    created = await api(nc, "$JS.API.STREAM.CREATE.ALL", cfg)
    assert "subjects" not in created["config"]
    assert created["config"]["sources"] == cfg["sources"]
    await js.publish("us.order", b"u1")
    await js.publish("us.deep.skipped", b"u2")
    # Met in the origin; the copy must not be checked against the aggregate's own sequence.
    await js.publish("eu.order", b"e2", headers={"Nats-Expected-Last-Sequence": "1"})
    info = await stream_holding(nc, "ALL", 3)
    assert info["state"]["messages"] == 3
    by_name = {s["name"]: s for s in info["sources"]}
    assert by_name["EU"]["lag"] == 0 and by_name["EU"]["active"] > 0
    assert by_name["US"]["subject_transforms"] == [{"src": "us.*", "dest": "world.us.$1"}]
    got = [await js.get_msg("ALL", seq=seq) for seq in (1, 2, 3)]
    subjects = sorted((m.subject, m.data) for m in got)
    assert subjects == [("eu.order", b"e1"), ("eu.order", b"e2"), ("world.us.order", b"u1")]
    headers = {m.data: (m.headers or {}).get("Nats-Stream-Source") for m in got}
    eu = await api(nc, "$JS.API.STREAM.INFO.EU")
    us = await api(nc, "$JS.API.STREAM.INFO.US")
    assert headers[b"e1"] == f"EU 1 > > eu.order {_identity(eu['created'])}"
    assert headers[b"u1"] == f"US 1 us.* world.us.$1 us.order {_identity(us['created'])}"


def _identity(created: str) -> str:
    """The origin's identity as the reference derives it from its creation time."""
    digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    return "".join(digits[b % 62] for b in hashlib.sha256(created.encode()).digest()[:8])


async def test_source_validation_errors(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    cases = [
        ([{"name": "a.b"}], 10141, "sourced stream name is invalid"),
        ([{"name": "X"}, {"name": "X"}], 10140, "duplicate source configuration detected"),
        (
            [
                {
                    "name": "X",
                    "filter_subject": "a",
                    "subject_transforms": [{"src": "b", "dest": ""}],
                }
            ],
            10144,
            "source with multiple subject transforms cannot also have a single subject filter",
        ),
        (
            [{"name": "X", "subject_transforms": [{"src": "a.*", "dest": "{{nope()}}.$1"}]}],
            10146,
            "source transform: invalid mapping destination: unknown function in {{nope()}}",
        ),
        (
            [
                {
                    "name": "X",
                    "subject_transforms": [{"src": "a.>", "dest": ""}, {"src": "a.b", "dest": ""}],
                }
            ],
            10147,
            "source filters can not overlap",
        ),
    ]
    for sources, code, words in cases:
        doc = await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "sources": sources})
        assert doc["error"] == {"code": 400, "err_code": code, "description": words}, sources


async def test_source_progress_survives_kill(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="O", subjects=["o"])
    await api(nc, "$JS.API.STREAM.CREATE.AGG", {"name": "AGG", "sources": [{"name": "O"}]})
    acks = [await js.publish_async("o", b"%d" % i) for i in range(300)]  # type: ignore[attr-defined]
    await asyncio.gather(*acks)
    js_server.kill()
    await js_server.restart_async()
    nc = await connect(js_server)
    js = nc.jetstream()
    for i in range(300, 350):
        await js.publish("o", b"%d" % i)
    info = await stream_holding(nc, "AGG", 350)
    assert info["state"]["messages"] == 350
    origin_seqs = []
    for seq in range(info["state"]["first_seq"], info["state"]["last_seq"] + 1):
        msg = await js.get_msg("AGG", seq=seq)
        origin_seqs.append(int((msg.headers or {})["Nats-Stream-Source"].split(" ")[1]))
    assert origin_seqs == list(range(1, 351))


async def test_source_cycles_are_refused(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    cycle = {"code": 500, "err_code": 10052, "description": "detected cycle"}
    own = await api(
        nc,
        "$JS.API.STREAM.CREATE.SELF",
        {"name": "SELF", "subjects": ["s"], "sources": [{"name": "SELF"}]},
    )
    assert own["error"] == cycle
    await api(nc, "$JS.API.STREAM.CREATE.CA", {"name": "CA", "subjects": ["ca"]})
    await api(
        nc,
        "$JS.API.STREAM.CREATE.CB",
        {"name": "CB", "subjects": ["cb"], "sources": [{"name": "CA"}]},
    )
    back = await api(
        nc,
        "$JS.API.STREAM.UPDATE.CA",
        {"name": "CA", "subjects": ["ca"], "sources": [{"name": "CB"}]},
    )
    assert back["error"] == cycle


async def test_a_client_may_not_write_the_source_header(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="O", subjects=["o.>"])
    refused = await nc.request("o.a", b"x", headers={"Nats-Stream-Source": "X 1 > > o.a i"})
    assert refused.data == (
        b'{"error":{"code":400,"err_code":10227,'
        b'"description":"message stream source header is not allowed"},"stream":"O","seq":0}'
    )
    other_case = await nc.request("o.a", b"x", headers={"nats-stream-source": "anything"})
    assert other_case.data == b'{"stream":"O","seq":1}'  # the reference matches it exactly
