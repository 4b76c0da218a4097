"""A replica that was down while its stream moved on catches up and can lead.

On jetlake the stream's Raft log is snapshotted every 40 entries here, so
the restarted replica is far behind the leader's log: it restores a snapshot
and copies the messages from a peer (`log.streams.snapshot`). The reference
catches up its own way; a client sees the same on both: the replica's copy
equals the leader's, and once it leads, the stream and its consumer are as
they were.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig
from nats.js.errors import NotFoundError

from tests.jscluster.support import (
    eventually,
    js_cluster,
    jsz,
    request,
    server_name,
    stream_messages,
)
from tests.support.servers import ServerProcess, enabled_kinds

pytestmark = [pytest.mark.timeout(150), pytest.mark.parametrize("kind", enabled_kinds())]


def replica_state(server: ServerProcess, stream: str) -> dict[str, Any] | None:
    doc = jsz(server, "?streams=true")
    for account in doc.get("account_details") or []:
        for detail in account.get("stream_detail") or []:
            if detail["name"] == stream:
                state = detail["state"]
                keys = ("messages", "bytes", "first_seq", "last_seq", "num_deleted")
                return {k: state.get(k) for k in keys}
    return None


async def test_a_replica_far_behind_catches_up_and_leads(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JETLAKE_RAFT_SNAPSHOT_ENTRIES", "40")
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        config = StreamConfig(
            name="SNAP", subjects=["snap.>"], num_replicas=3, max_msgs_per_subject=25
        )
        await eventually(lambda: c.js.add_stream(config), "stream SNAP created")
        durable = ConsumerConfig(durable_name="C", ack_policy=AckPolicy.EXPLICIT)
        await c.js.add_consumer("SNAP", durable)
        for i in range(50):
            await c.js.publish(f"snap.{i % 10}", f"early {i}".encode())
        leader = await c.leader("SNAP")
        behind = next(s for s in c.servers if s is not leader)
        behind.kill()
        for i in range(400):  # a client of the killed server reconnects meanwhile: retry,
            await eventually(  # deduplicated
                lambda i=i: c.js.publish(
                    f"snap.{i % 10}", f"late {i}".encode(), headers={"Nats-Msg-Id": f"l{i}"}
                ),
                f"publish {i} after a kill",
            )
        for seq in (300, 301, 420):
            await c.js.delete_msg("SNAP", seq)
        # the reference's consumer may have led on the killed server: it elects anew
        sub = await eventually(
            lambda: c.js.pull_subscribe("snap.>", durable="C", stream="SNAP"), "consumer C"
        )
        acked = 0
        while acked < 60:
            for msg in await eventually(lambda: sub.fetch(20, timeout=5), "a fetch"):
                await msg.ack_sync()
                acked += 1
        wanted = replica_state(leader, "SNAP")
        assert wanted is not None and wanted["last_seq"] == 450
        consumer = await c.js.consumer_info("SNAP", "C")

        behind.restart()
        await eventually(
            lambda: asyncio.sleep(0, replica_state(behind, "SNAP") == wanted),
            f"{server_name(behind)} holding what the leader holds",
        )

        await c.lead_on("SNAP", behind)
        info = await c.js.stream_info("SNAP")
        assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (
            wanted["messages"],
            wanted["first_seq"],
            450,
        )
        last = await c.js.get_msg("SNAP", subject="snap.9")
        assert last.data == b"late 399"
        after = await eventually(
            lambda: c.js.consumer_info("SNAP", "C"), "the consumer on the new leader"
        )
        assert after.ack_floor.stream_seq == consumer.ack_floor.stream_seq
        assert after.num_pending == consumer.num_pending
        ack = await c.js.publish("snap.new", b"after")
        assert ack.seq == 451
        if kind == "jetlake":  # it came through a snapshot, not a replay of the whole log
            assert "restored a snapshot" in behind.log()
            store = Path(behind.args[behind.args.index("-sd") + 1])
            snaps = store.glob(f"jetstream/$SYS/_js_/{info.cluster.raft_group}/*.snap")
            assert max(int(p.stem) for p in snaps) > 400  # its own, as it applied since


async def test_a_server_down_while_streams_came_and_went_learns_them_from_a_meta_snapshot(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The meta group snapshots too: a server that missed more operations than the
    leader keeps in its log drops the streams deleted meanwhile and takes the updates."""
    monkeypatch.setenv("JETLAKE_RAFT_SNAPSHOT_ENTRIES", "8")
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        for name in ("KEEP", "GONE"):
            await c.add_stream(name, [f"{name.lower()}.>"])
        await c.js.publish("keep.a", b"before")
        leader = await c.leader("KEEP")
        behind = next(s for s in c.servers if s is not leader)
        assert stream_messages(behind, "GONE") == 0
        behind.kill()

        async def gone() -> bool:
            try:
                return await c.js.delete_stream("GONE")
            except NotFoundError:  # an earlier try deleted it, its answer was lost
                return True

        await eventually(gone, "GONE deleted with a server down")
        for i in range(30):  # more meta operations than the log keeps past a snapshot
            update = StreamConfig(
                name="KEEP", subjects=["keep.>"], num_replicas=3, max_msgs=100 - i
            )
            await eventually(lambda u=update: c.js.update_stream(u), f"KEEP update {i}")

        behind.restart()
        await eventually(
            lambda: asyncio.sleep(
                0, stream_messages(behind, "KEEP") == 1 and stream_messages(behind, "GONE") is None
            ),
            f"{server_name(behind)} back with KEEP and without GONE",
        )

        await c.lead_on("KEEP", behind)
        info = await c.js.stream_info("KEEP")
        assert info.config.max_msgs == 71  # the updates it missed, as it leads
        names = await request(c.nc, "$JS.API.STREAM.NAMES")
        assert sorted(names["streams"]) == ["KEEP"]
        if kind == "jetlake":
            store = Path(behind.args[behind.args.index("-sd") + 1])
            assert any(store.glob("jetstream/$SYS/_js_/_meta_/*.snap"))
            assert "JetStream meta: restored a snapshot of 1 streams (2 changed here)" in (
                behind.log()
            )
