"""A single server whose state files were damaged while it was down still starts, says
which file and what was lost, and serves everything the damage did not take.

On one server nothing else knows a stream's config or a consumer's acks: a
stream whose stream.json is damaged is not opened (its files are kept), a
consumer whose state is damaged starts over from its deliver policy (so its
messages come again: none is lost), one whose meta is damaged is gone.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from tests.conftest import Connect, MakeServer


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x22
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("server_kind", ["jetlake"], indirect=True)  # jetlake's own files
async def test_damaged_files_are_named_and_the_rest_is_served(
    make_server: MakeServer, connect: Connect, tmp_path: Path
) -> None:
    store = tmp_path / "js"
    server = make_server("-js", "-sd", str(store))
    nc = await connect(server)
    js = nc.jetstream()
    for name in ("A", "B"):
        await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
        for i in range(5):
            await js.publish(f"{name.lower()}.x", f"{name}{i}".encode())
    for durable in ("KEEP", "STATE", "META"):
        await js.add_consumer(
            "A", ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT)
        )
        sub = await js.pull_subscribe("a.>", durable=durable, stream="A")
        for msg in await sub.fetch(3, timeout=5):
            await msg.ack_sync()
    await nc.close()
    await server.stop_async()

    streams = store / "jetstream" / "$G" / "streams"
    flip(streams / "B" / "stream.json")
    flip(streams / "A" / "obs" / "STATE" / "state.json")
    flip(streams / "A" / "obs" / "META" / "meta.json")
    await server.restart_async()

    for pattern in (
        r"\[ERR\].*stream '\$G > B' not recovered: \S+/B/stream\.json is unreadable "
        r"\(\S+: damaged at byte \d+: checksum",
        r"\[ERR\].*consumer STATE: \S+/obs/STATE/state\.json: damaged at byte \d+.*starts over",
        r"\[ERR\].*consumer META not recovered, its config is lost: \S+/obs/META/meta\.json",
    ):
        assert server.find_log(re.compile(pattern)), f"{pattern} not in\n{server.log()}"
    assert "Traceback" not in server.log()
    assert (streams / "B" / "00000000000000000001.0.arrows").is_file()  # kept

    nc = await connect(server)
    js = nc.jetstream()
    assert (await js.stream_info("A")).state.messages == 5
    assert {i.name for i in await js.consumers_info("A")} == {"KEEP", "STATE"}
    assert (await js.consumer_info("A", "KEEP")).ack_floor.stream_seq == 3
    sub = await js.pull_subscribe("a.>", durable="STATE", stream="A")
    again = [m.metadata.sequence.stream for m in await sub.fetch(5, timeout=5)]
    assert again == [1, 2, 3, 4, 5]  # delivered again, none lost
    assert [s.config.name for s in await js.streams_info()] == ["A"]
