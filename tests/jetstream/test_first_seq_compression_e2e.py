"""`first_seq` and `compression` through nats-py against both servers."""

from __future__ import annotations

from tests.conftest import Connect
from tests.jetstream.test_streams_e2e import api
from tests.support.servers import ServerProcess


async def test_first_seq_numbers_from_it_across_a_kill(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    created = await api(
        nc, "$JS.API.STREAM.CREATE.F", {"name": "F", "subjects": ["f"], "first_seq": 100}
    )
    assert created["config"]["first_seq"] == 100
    state = created["state"]
    assert (state["messages"], state["first_seq"], state["last_seq"]) == (0, 100, 99)
    assert (await api(nc, "f", b"a"))["seq"] == 100
    await nc.close()
    js_server.kill()
    await js_server.restart_async()
    nc = await connect(js_server)
    assert (await api(nc, "f", b"b"))["seq"] == 101
    info = await api(nc, "$JS.API.STREAM.INFO.F")
    assert (info["state"]["first_seq"], info["state"]["last_seq"]) == (100, 101)


async def test_empty_stream_with_first_seq_survives_a_restart(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    await api(nc, "$JS.API.STREAM.CREATE.E", {"name": "E", "subjects": ["e"], "first_seq": 7})
    await nc.close()
    await js_server.restart_async()
    nc = await connect(js_server)
    assert (await api(nc, "e", b"x"))["seq"] == 7


async def test_compression_is_kept_and_messages_read_back(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    created = await api(
        nc, "$JS.API.STREAM.CREATE.Z", {"name": "Z", "subjects": ["z.>"], "compression": "s2"}
    )
    assert created["config"]["compression"] == "s2"
    for i in range(50):
        await js.publish(f"z.{i % 3}", b"payload %d " % i * 20)
    await nc.close()
    await js_server.restart_async()
    nc = await connect(js_server)
    js = nc.jetstream()
    got = await js.get_msg("Z", seq=42)
    assert got.data == b"payload 41 " * 20
    assert (await js.stream_info("Z")).config.compression == "s2"


async def test_compression_can_change_and_mirror_direct_needs_a_mirror(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    cfg = {"name": "C", "subjects": ["c"], "compression": "s2"}
    await api(nc, "$JS.API.STREAM.CREATE.C", cfg)
    updated = await api(nc, "$JS.API.STREAM.UPDATE.C", {**cfg, "compression": "none"})
    assert updated["config"]["compression"] == "none"
    refused = await api(nc, "$JS.API.STREAM.CREATE.D", {"name": "D", "mirror_direct": True})
    assert refused["error"] == {
        "code": 500,
        "err_code": 10052,
        "description": "stream has no mirror but does have mirror direct",
    }
