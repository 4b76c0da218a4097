"""Many streams created one after another, listed page by page, kept across a kill -9.

nats.py's own suite creates 300 streams (no subjects: each takes its name) inside a
five-second test and pages through them with an offset; the reference answers each
create without waiting for the disk. Expectations were observed from the reference.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.aio.client import Client as NATS

from tests.conftest import Connect
from tests.support.servers import ServerProcess

STREAMS = 300
CREATE_DEADLINE = 120  # seconds for all of them: generous for a loaded machine


async def api(nc: NATS, subject: str, body: Any = b"") -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    msg = await nc.request(subject, data, timeout=10)
    return json.loads(msg.data)


async def test_streams_page_by_offset_and_outlive_a_kill(
    js_server: ServerProcess, connect: Connect
) -> None:
    nc = await connect(js_server)
    jsm = nc.jsm()

    async def create_all() -> None:
        for i in range(STREAMS):
            await jsm.add_stream(name=f"stream_{i}")

    await asyncio.wait_for(create_all(), CREATE_DEADLINE)
    first = await api(nc, "$JS.API.STREAM.LIST", {"offset": 0})
    second = await api(nc, "$JS.API.STREAM.LIST", {"offset": 256})
    assert (first["total"], first["offset"], first["limit"]) == (STREAMS, 0, 256)
    assert (second["total"], second["offset"], second["limit"]) == (STREAMS, 256, 256)
    assert (len(first["streams"]), len(second["streams"])) == (256, 44)
    listed = [s["config"]["name"] for s in first["streams"] + second["streams"]]
    assert sorted(listed) == sorted(f"stream_{i}" for i in range(STREAMS))
    assert second["streams"][0]["config"]["subjects"] == [listed[256]]  # its name
    assert len(await jsm.streams_info(offset=0)) == 256
    assert len(await jsm.streams_info(offset=256)) == 44
    names = await api(nc, "$JS.API.STREAM.NAMES", {"offset": 0})
    assert (names["total"], names["limit"], len(names["streams"])) == (STREAMS, 1024, STREAMS)
    past = await api(nc, "$JS.API.STREAM.LIST", {"offset": STREAMS + 5})  # at the end
    assert (past["total"], past["offset"], past["streams"]) == (STREAMS, STREAMS, [])
    past = await api(nc, "$JS.API.STREAM.NAMES", {"offset": STREAMS + 5})
    assert (past["total"], past["offset"], past["limit"]) == (STREAMS, STREAMS, 1024)

    # A create's reply goes out before any fsync: the files are the OS's already, so a
    # kill -9 right after it keeps the stream.
    await nc.jetstream().add_stream(name="fresh", subjects=["fresh.>"], max_msgs=10)
    await nc.close()
    await asyncio.to_thread(js_server.kill)
    await js_server.restart_async()
    nc = await connect(js_server)
    js = nc.jetstream()
    info = await js.stream_info("fresh")
    assert (info.config.subjects, info.config.max_msgs) == (["fresh.>"], 10)
    assert (await js.publish("fresh.a", b"x")).seq == 1
    names = await api(nc, "$JS.API.STREAM.NAMES", {"offset": 0})
    assert names["total"] == STREAMS + 1
