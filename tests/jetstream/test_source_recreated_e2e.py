"""API level 5 against both servers: a sourced stream deleted and created anew is copied
again from its first message (its seqs started over), told apart by the identity the
copies carry in `Nats-Stream-Source`; and on jetlake that progress survives a kill -9."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS

from tests.conftest import Connect
from tests.jetstream.test_sources_e2e import _identity, stream_holding
from tests.jetstream.test_streams_e2e import api
from tests.support.servers import ServerProcess, start_server

# The reference notices a recreated origin on its source consumer's next retry, about
# 12 s after the old one went.
RETRY_WITHIN = 30


async def _recreate_origin(nc: NATS) -> dict[str, Any]:
    """AGG sources O; O holds 5, is deleted, made again and given 2: AGG must hold 7."""
    js = nc.jetstream()
    await js.add_stream(name="O", subjects=["o"])
    await api(nc, "$JS.API.STREAM.CREATE.AGG", {"name": "AGG", "sources": [{"name": "O"}]})
    for i in range(5):
        await js.publish("o", b"old%d" % i)
    assert (await stream_holding(nc, "AGG", 5, within=RETRY_WITHIN))["state"]["messages"] == 5
    await js.delete_stream("O")
    await js.add_stream(name="O", subjects=["o"])
    for i in range(2):
        await js.publish("o", b"new%d" % i)
    return await stream_holding(nc, "AGG", 7, within=RETRY_WITHIN)


async def test_a_recreated_source_is_copied_from_its_start(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    info = await _recreate_origin(nc)
    assert info["state"]["messages"] == 7
    assert info["sources"][0]["seq"] == 2  # the origin seq of the newest copy
    origin = await api(nc, "$JS.API.STREAM.INFO.O")
    js = nc.jetstream()
    newest = await js.get_msg("AGG", 7)
    assert newest.data == b"new1"
    assert newest.headers == {"Nats-Stream-Source": f"O 2 > > o {_identity(origin['created'])}"}
    oldest = await js.get_msg("AGG", 1)
    assert oldest.headers is not None
    assert not oldest.headers["Nats-Stream-Source"].endswith(_identity(origin["created"]))


async def test_progress_against_the_new_origin_survives_kill(
    tmp_path: Path, connect: Connect
) -> None:
    """After a kill -9 the newest copy names the new origin's identity, so the restarted
    server neither copies the new origin again nor skips what it publishes next."""
    server = start_server("jetlake", "-js", "-sd", str(tmp_path / "store"), tmp_path=tmp_path)
    try:
        nc = await connect(server)
        assert (await _recreate_origin(nc))["state"]["messages"] == 7
        await nc.close()
        server.kill()
        server.start()
        nc = await connect(server)
        await nc.jetstream().publish("o", b"after")
        info = await stream_holding(nc, "AGG", 8)
        assert info["state"]["messages"] == 8
        assert (await nc.jetstream().get_msg("AGG", 8)).data == b"after"
        await asyncio.sleep(0.3)  # a double copy would land meanwhile
        assert (await api(nc, "$JS.API.STREAM.INFO.AGG"))["state"]["messages"] == 8
    finally:
        server.stop(expect_code=None)
