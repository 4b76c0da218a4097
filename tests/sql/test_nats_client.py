"""SQL over NATS's Python client against a server with no SQL service: the server's
no-responders status is the answer, at once, on both servers (not an empty result)."""

from __future__ import annotations

import asyncio
import time

import nats
import pyarrow as pa
import pytest
from nats.errors import NoRespondersError

from sql.nats_door.client import query
from sql.nats_door.encoding import encode_table
from tests.support.clients import sync
from tests.support.servers import ServerProcess


async def test_a_query_with_no_service_fails_at_once_with_no_responders(
    server: ServerProcess,
) -> None:
    nc = await nats.connect(server.url)
    try:
        started = time.monotonic()
        with pytest.raises(NoRespondersError):
            await query(nc, "SELECT 1", timeout=10.0)
        assert time.monotonic() - started < 5.0
    finally:
        await nc.close()


async def test_heartbeats_are_skipped_and_one_nobody_receives_comes_back_as_503(
    server: ServerProcess,
) -> None:
    """A stand-in for the service: the client asks for heartbeats, answers the one sent
    before its chunk (not taken for a chunk), and once it has its answer (its inbox gone)
    the server answers the next heartbeat's reply subject with no responders, which is how
    the service sees it go."""
    svc = await nats.connect(server.url)
    nc = await nats.connect(server.url)
    asked: list[dict[str, str]] = []
    inbox: list[str] = []
    back: asyncio.Queue[nats.aio.msg.Msg] = asyncio.Queue()
    try:

        async def serve(msg: nats.aio.msg.Msg) -> None:
            asked.append(dict(msg.headers or {}))
            inbox.append(msg.reply)
            beat = {"Jl-Sql-Heartbeat": "1"}
            await svc.publish(msg.reply, b"", reply="acks.beat", headers=beat)
            chunk = encode_table(pa.table({"n": [42]}))
            await svc.publish(msg.reply, chunk, reply="acks.0", headers={"Jl-Sql-Chunk": "0"})
            await svc.publish(msg.reply, b"", headers={"Jl-Sql-Rows": "1"})

        await svc.subscribe("$JL.SQL.query", cb=serve)
        await svc.subscribe("acks.*", cb=back.put)
        await sync(svc)  # the SUBs reach the server before the request does
        answer = await query(nc, "SELECT 42 AS n", timeout=30.0)
        assert answer.to_pylist() == [{"n": 42}]
        assert asked[0]["Jl-Sql-Heartbeat"] == "1"
        acked = [await asyncio.wait_for(back.get(), 30) for _ in range(2)]
        assert sorted(m.subject for m in acked) == ["acks.0", "acks.beat"]  # chunk, heartbeat
        assert all("Status" not in (m.headers or {}) for m in acked)

        await nc.flush()  # its inbox's UNSUB is in before the late heartbeat
        await svc.publish(inbox[0], b"", reply="acks.late", headers={"Jl-Sql-Heartbeat": "1"})
        late = await asyncio.wait_for(back.get(), 30)
        assert late.subject == "acks.late" and (late.headers or {}).get("Status") == "503"
    finally:
        await nc.close()
        await svc.close()
