"""`STREAM.SNAPSHOT` and `STREAM.RESTORE` against both servers: the errors, the chunk
protocol (acks, `window_size`, the closing status), and a round trip that brings back
messages, gaps, creation time and consumers. Each server restores only its own
archives, so the bytes are never compared, only what a client sees."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from tests.conftest import Connect
from tests.jetstream.test_streams_e2e import api
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess, start_server

CREATE = "io.nats.jetstream.api.v1.stream_create_response"


class Receiver:
    """A client's side of a snapshot: collects chunks, acks them unless told to hold."""

    def __init__(self, nc: NATS, *, hold: bool = False) -> None:
        self.nc = nc
        self.hold = hold
        self.chunks: list[Msg] = []
        self.end: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()

    async def on_msg(self, msg: Msg) -> None:
        if not msg.data:
            self.end.set_result(msg)
            return
        self.chunks.append(msg)
        if msg.reply and not self.hold:
            await msg.respond(b"")

    async def release(self) -> None:
        self.hold = False
        for msg in self.chunks:
            if msg.reply:
                await msg.respond(b"")


async def snapshot(nc: NATS, stream: str, **options: Any) -> tuple[dict[str, Any], Receiver]:
    receiver = Receiver(nc)
    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=receiver.on_msg)
    doc = await api(nc, f"$JS.API.STREAM.SNAPSHOT.{stream}", {"deliver_subject": inbox, **options})
    await asyncio.wait_for(receiver.end, 10)
    return doc, receiver


async def restore(nc: NATS, stream: str, meta: dict[str, Any], chunks: list[bytes]) -> Any:
    body = {"config": meta["config"], "state": meta["state"]}
    started = await api(nc, f"$JS.API.STREAM.RESTORE.{stream}", body)
    subject = started["deliver_subject"]
    for chunk in chunks:
        ack = await nc.request(subject, chunk, timeout=5)
        assert ack.data == b""
    final = await nc.request(subject, b"", timeout=30)
    return json.loads(final.data)


async def _filled(nc: NATS) -> dict[str, Any]:
    """A stream with incompressible bodies, a deleted message and a consumer part-way."""
    js = nc.jetstream()
    await js.add_stream(name="B", subjects=["b.>"])
    for i in range(60):
        await js.publish(f"b.{i % 3}", os.urandom(1000), headers={"Nats-Msg-Id": f"m{i}"})
    await js.delete_msg("B", 7)
    sub = await js.pull_subscribe("b.>", durable="D", stream="B")
    for msg in await sub.fetch(10):
        await msg.ack_sync()
    await sub.fetch(2)  # delivered, not acknowledged
    return await api(nc, "$JS.API.STREAM.INFO.B")


async def test_round_trip_brings_back_messages_gaps_and_consumers(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    before = await _filled(nc)
    consumer = await api(nc, "$JS.API.CONSUMER.INFO.B.D")
    last = await nc.jetstream().get_msg("B", 60)
    doc, receiver = await snapshot(nc, "B", chunk_size=4096, jsck=True)
    assert doc["type"] == "io.nats.jetstream.api.v1.stream_snapshot_response"
    assert doc["state"]["messages"] == 59 and doc["state"]["consumer_count"] == 1
    assert "_nats.ver" not in doc["config"]["metadata"]
    assert receiver.end.result().headers == {"Status": "204"}
    sizes = [len(m.data) for m in receiver.chunks]
    assert set(sizes[:-1]) == {4096} and 0 < sizes[-1] <= 4096
    assert all(m.reply for m in receiver.chunks[:-1])
    assert receiver.chunks[0].reply.startswith("$JS.SNAPSHOT.ACK.B.")
    assert receiver.chunks[0].reply.endswith(".4096.1")

    await nc.jetstream().delete_stream("B")
    done = await restore(nc, "B", doc, [m.data for m in receiver.chunks])
    assert done["type"] == CREATE and "error" not in done, done
    assert list(done) == ["type", "config", "created", "state", "ts"]
    after = await api(nc, "$JS.API.STREAM.INFO.B")
    assert after["created"] > before["created"]  # a new stream: sources see it recreated
    for key in ("messages", "bytes", "first_seq", "last_seq", "num_deleted", "num_subjects"):
        assert after["state"][key] == before["state"][key], key
    again_last = await nc.jetstream().get_msg("B", 60)
    assert (again_last.subject, again_last.data, again_last.headers) == (
        last.subject,
        last.data,
        last.headers,
    )
    restored = await api(nc, "$JS.API.CONSUMER.INFO.B.D")
    for key in ("delivered", "ack_floor"):
        seqs = ("consumer_seq", "stream_seq")
        assert [restored[key][k] for k in seqs] == [consumer[key][k] for k in seqs], key
    for key in ("num_ack_pending", "num_pending"):
        assert restored[key] == consumer[key], key
    again = await api(nc, "$JS.API.STREAM.RESTORE.B", {"config": doc["config"]})
    assert again["error"]["err_code"] == 10130


async def test_the_window_bounds_unacknowledged_chunks(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    """API level 3: no more than `window_size` bytes go out before acks come back."""
    nc = await connect(js_server)
    await _filled(nc)
    receiver = Receiver(nc, hold=True)
    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=receiver.on_msg)
    request = {"deliver_subject": inbox, "chunk_size": 2048, "window_size": 6144}
    await api(nc, "$JS.API.STREAM.SNAPSHOT.B", request)
    await poll_async(lambda: len(receiver.chunks) >= 3, "three snapshot chunks", 10)
    await asyncio.sleep(0.3)  # what a server that ignored the window would send meanwhile
    assert len(receiver.chunks) == 3
    await receiver.release()
    await asyncio.wait_for(receiver.end, 10)
    assert len(receiver.chunks) > 20


async def test_errors_match_the_reference(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    await nc.jetstream().add_stream(name="S", subjects=["s.>"])
    snap, rest = "$JS.API.STREAM.SNAPSHOT.", "$JS.API.STREAM.RESTORE."
    cases = [
        (snap + "S", b"", (400, 10003, "bad request")),
        (snap + "S", {}, (400, 10003, "bad request")),
        (snap + "NOPE", {"deliver_subject": "x"}, (404, 10059, "stream not found")),
        (snap + "S", {"deliver_subject": "a.*"}, (400, 10015, "deliver subject not valid")),
        (snap + "S", {"deliver_subject": ""}, (400, 10015, "deliver subject not valid")),
        (
            snap + "S",
            {"deliver_subject": "d", "chunk_size": "x"},
            (
                400,
                10025,
                "invalid JSON: json: cannot unmarshal string into Go struct field"
                " JSApiStreamSnapshotRequest.chunk_size of type int",
            ),
        ),
        (rest + "S", b"", (400, 10003, "bad request")),
        (rest + "U", {}, (400, 10003, "bad request")),
        (
            rest + "S",
            {"config": {"name": "S"}},
            (400, 10130, "stream name already in use, cannot restore"),
        ),
        (
            rest + "S",
            {"config": {"name": "T"}},
            (400, 10056, "stream name in subject does not match request"),
        ),
    ]
    for subject, body, (code, err_code, words) in cases:
        doc = await api(nc, subject, body)
        assert doc["error"] == {"code": code, "err_code": err_code, "description": words}, subject
        if subject.startswith(rest):
            assert doc["deliver_subject"] == ""
    bad = await api(nc, rest + "T", b"{bad")
    assert bad["error"]["err_code"] == 10025


async def test_a_restore_left_silent_is_dropped(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    """The reference drops a restore whose client sends nothing for 5 s: no stream."""
    nc = await connect(js_server)
    started = await api(nc, "$JS.API.STREAM.RESTORE.Q", {"config": {"name": "Q"}})
    assert started["deliver_subject"].startswith("$JS.SNAPSHOT.RESTORE.Q.")
    # The stall timeout itself: nothing to poll before it, and a probe chunk would count
    # as activity.
    await asyncio.sleep(5.5)
    with pytest.raises(NoRespondersError):
        await nc.request(started["deliver_subject"], b"late", timeout=2)
    names = await api(nc, "$JS.API.STREAM.NAMES")
    assert not names["streams"]


async def test_kill_during_restore_leaves_no_stream(tmp_path: Path, connect: Connect) -> None:
    """jetlake builds a restored stream aside and renames it in: a kill -9 before the end
    leaves no stream (nor its staging files, once restarted)."""
    server = start_server("jetlake", "-js", "-sd", str(tmp_path / "store"), tmp_path=tmp_path)
    try:
        nc = await connect(server)
        await _filled(nc)
        doc, receiver = await snapshot(nc, "B", chunk_size=4096)
        await nc.jetstream().delete_stream("B")
        started = await api(nc, "$JS.API.STREAM.RESTORE.B", {"config": doc["config"]})
        half = receiver.chunks[: len(receiver.chunks) // 2]
        for msg in half:
            await nc.request(started["deliver_subject"], msg.data, timeout=5)
        staging = tmp_path / "store" / "jetstream" / "$G" / "restores"
        assert any(staging.iterdir())
        await nc.close()
        server.kill()
        server.start()
        nc = await connect(server)
        names = await api(nc, "$JS.API.STREAM.NAMES")
        assert not names["streams"]
        assert not staging.exists()
        assert not (tmp_path / "store" / "jetstream" / "$G" / "streams" / "B").exists()
        done = await restore(nc, "B", doc, [m.data for m in receiver.chunks])
        assert done["state"]["messages"] == 59
    finally:
        server.stop(expect_code=None)


async def test_a_memory_stream_round_trips(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    """natscli refuses memory streams; the API itself takes them on both servers."""
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="MEM", subjects=["mem.>"], storage="memory")
    for _ in range(30):
        await js.publish("mem.a", os.urandom(500))
    await js.delete_msg("MEM", 4)
    doc, receiver = await snapshot(nc, "MEM", chunk_size=2048)
    await js.delete_stream("MEM")
    done = await restore(nc, "MEM", doc, [m.data for m in receiver.chunks])
    state = done["state"]
    assert (state["messages"], state["last_seq"], state["num_deleted"]) == (29, 30, 1)
    assert done["config"]["storage"] == "memory"


async def test_a_receiver_that_never_acks_ends_the_snapshot(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    await _filled(nc)
    receiver = Receiver(nc, hold=True)
    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=receiver.on_msg)
    request = {"deliver_subject": inbox, "chunk_size": 4096, "window_size": 4096}
    await api(nc, "$JS.API.STREAM.SNAPSHOT.B", request)
    end = await asyncio.wait_for(receiver.end, 10)  # after the 5 s without acks
    assert end.headers == {"Status": "408", "Description": "No Flow Response"}


async def test_a_foreign_archive_fails_the_restore(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    done = await restore(nc, "X", {"config": {"name": "X"}, "state": {}}, [b"not a backup" * 100])
    assert done["type"] == CREATE
    assert (done["error"]["code"], done["error"]["err_code"]) == (500, 10062)
    assert done["error"]["description"].startswith("restore failed: ")
    assert not (await api(nc, "$JS.API.STREAM.NAMES"))["streams"]
