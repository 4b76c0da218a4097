"""Explicit deletes and purges reach the lake; stream metadata opts a stream out of either."""

from __future__ import annotations

from deltalake import DeltaTable
from nats.js.api import StreamConfig

from log.compactor.layout import StreamRef
from tests.conftest import Connect
from tests.lake.conftest import Lake


def lake_seqs(lake: Lake, stream: str) -> set[int]:
    table = StreamRef.load(lake.stream_dir(stream)).table_path(lake.lake_dir)
    return set(DeltaTable(str(table)).to_pyarrow_table(columns=["seq"]).column("seq").to_pylist())


def view_seqs(lake: Lake, stream: str) -> set[int]:
    return {r.seq for r in lake.sql(f"SELECT seq FROM {stream}")}


async def test_message_delete_and_purge_reach_the_lake(lake: Lake, connect: Connect) -> None:
    server = lake.start()
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(name="DEL", subjects=["d.>"])
    await js.add_stream(
        StreamConfig(name="KEEP", subjects=["k.>"], metadata={"jetlake.lake.deletes": "keep"})
    )
    for i in range(60):
        await js.publish(f"d.{i % 3}", b"%d" % i)
        await js.publish(f"k.{i % 3}", b"%d" % i)
    await lake.sealed("DEL", 60)
    await lake.sealed("KEEP", 60)
    lake.compact()
    everything = set(range(1, 61))
    assert lake_seqs(lake, "DEL") == lake_seqs(lake, "KEEP") == everything
    for stream in ("DEL", "KEEP"):
        await js.delete_msg(stream, 10)
        await js.purge_stream(stream, subject=f"{stream[0].lower()}.1")  # seqs 2, 5, 8, ...
    gone = {10} | set(range(2, 61, 3))
    assert view_seqs(lake, "DEL") == everything - gone  # at once, before the lake has it
    assert view_seqs(lake, "KEEP") == everything
    lake.compact()
    assert lake_seqs(lake, "DEL") == everything - gone
    assert lake_seqs(lake, "KEEP") == everything
    assert view_seqs(lake, "DEL") == everything - gone


async def test_a_stream_can_stay_out_of_the_lake(lake: Lake, connect: Connect) -> None:
    server = lake.start()
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(
        StreamConfig(name="OFF", subjects=["off.>"], metadata={"jetlake.lake": "off"})
    )
    for i in range(20):
        await js.publish("off.x", b"%d" % i)
    await js.delete_msg("OFF", 3)
    assert lake.compact().streams == 0
    ref = StreamRef.load(lake.stream_dir("OFF"))
    assert not ref.table_path(lake.lake_dir).is_dir()
    assert view_seqs(lake, "OFF") == set(range(1, 21)) - {3}  # the live log alone
