"""A replicated stream's backup and restore in a cluster, the reference and jetlake side by
side: the stream's leader answers the snapshot and streams it to a client on any server;
a restore places the stream with the replicas its config asks for, and every replica
holds the restored messages (gaps, headers) and consumer, which go on after a leader
change (a stepdown or a kill -9)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_nats_cli import cli
from tests.jetstream.test_backup_e2e import restore, snapshot
from tests.jscluster.support import (
    Running,
    eventually,
    js_cluster,
    request,
    server_name,
    stream_messages,
)
from tests.jscluster.test_consumer_reset_cluster_e2e import durable
from tests.support.servers import ServerProcess, enabled_kinds

pytestmark = [pytest.mark.timeout(120), pytest.mark.parametrize("kind", enabled_kinds())]


async def test_the_leader_answers_a_snapshot(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("R", ["r.>"])
        for i in range(50):
            await c.js.publish("r.x", b"%d" % i * 100)
        doc, receiver = await snapshot(c.nc, "R", chunk_size=1024)
        assert doc["state"]["messages"] == 50
        assert receiver.end.result().headers == {"Status": "204"}
        assert len(receiver.chunks) > 1


@pytest.mark.parametrize("stop", ["stepdown", "kill"])
async def test_a_restore_is_replicated(kind: str, tmp_path: Path, stop: str) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("B", ["b.>"])
        for i in range(60):
            await c.js.publish(f"b.{i % 3}", os.urandom(200), headers={"Nats-Msg-Id": f"m{i}"})
        await c.js.delete_msg("B", 7)
        await durable(c, "B", "D")
        sub = await c.js.pull_subscribe_bind("D", "B")
        for msg in await sub.fetch(10, timeout=5):
            await msg.ack_sync()
        await sub.unsubscribe()
        before = await request(c.nc, "$JS.API.STREAM.INFO.B")
        consumer = await request(c.nc, "$JS.API.CONSUMER.INFO.B.D")
        doc, receiver = await snapshot(c.nc, "B", chunk_size=1024)
        assert receiver.end.result().headers == {"Status": "204"}
        await c.js.delete_stream("B")
        await eventually(
            lambda: asyncio.sleep(0, not any(_stream_folder(s, "B") for s in c.servers)),
            "B's files gone from every server",
        )

        done = await restore(c.nc, "B", doc, [m.data for m in receiver.chunks])
        assert done["type"] == "io.nats.jetstream.api.v1.stream_create_response", done
        assert "error" not in done, done
        assert list(done) == ["type", "config", "created", "state", "ts"]
        assert done["config"]["num_replicas"] == 3
        assert done["state"]["messages"] == 59
        after = await eventually(lambda: _replicated_info(c, "B"), "B's two other replicas")
        for key in ("messages", "bytes", "first_seq", "last_seq", "num_deleted"):
            assert after["state"][key] == before["state"][key], key
        for server in c.servers:
            await eventually(
                lambda server=server: asyncio.sleep(0, stream_messages(server, "B") == 59),
                f"{server_name(server)} holds the restored messages",
            )

        async def consumer_restored() -> Any:
            """The reference assigns restored consumers after it answers: poll."""
            info = await request(c.nc, "$JS.API.CONSUMER.INFO.B.D", timeout=1)
            floor = info.get("ack_floor", {}).get("stream_seq")
            wanted = (consumer["ack_floor"]["stream_seq"], consumer["num_pending"])
            return info if (floor, info.get("num_pending")) == wanted else None

        await eventually(consumer_restored, "consumer D restored at its ack floor and pending")

        leader = await c.leader("B")
        if stop == "kill":  # what the leader committed lives on without it
            leader.kill()
        else:
            stepped = await request(c.nc, "$JS.API.STREAM.LEADER.STEPDOWN.B")
            assert stepped.get("success") is True, stepped
        ack = await eventually(lambda: c.js.publish("b.0", b"after"), "a publish after the restore")
        assert ack.seq == 61
        # after a kill the meta leader may be electing too: each request waits for roles
        moved = await eventually(lambda: c.leader("B"), "B's leader")
        assert moved is not leader
        msg = await eventually(lambda: c.js.get_msg("B", 60), "message 60")
        assert msg.headers == {"Nats-Msg-Id": "m59"}
        again = await eventually(
            lambda: request(
                c.nc, "$JS.API.STREAM.RESTORE.B", json.dumps({"config": doc["config"]}).encode()
            ),
            "a second restore refused",
        )
        assert again["error"]["err_code"] == 10130
        five = {"config": {**doc["config"], "name": "F", "subjects": ["f"], "num_replicas": 5}}
        refused = await eventually(
            lambda: request(c.nc, "$JS.API.STREAM.RESTORE.F", json.dumps(five).encode()),
            "a restore of five replicas refused",
        )
        assert refused["error"]["err_code"] == 10005, refused


def _stream_folder(server: ServerProcess, stream: str) -> bool:
    """Whether a deleted stream's folder is still there (both kinds lay it out alike):
    a stream assigned again before it is gone would find the old files."""
    store = Path(server.args[server.args.index("-sd") + 1])
    return (store / "jetstream" / "$G" / "streams" / stream).exists()


async def test_nats_stream_restore_places_the_replicas_asked_for(kind: str, tmp_path: Path) -> None:
    """natscli's backup and restore (`--replicas 3`) of an R1 stream in a cluster."""
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        url = ",".join(s.url for s in c.servers)
        await c.add_stream("ORD", ["ord.>"], replicas=1)
        for i in range(30):
            await c.js.publish(f"ord.{i % 3}", b"order %d" % i * 40)
        before = await request(c.nc, "$JS.API.STREAM.INFO.ORD")
        folder = tmp_path / "backup"
        code, out = await cli(url, "stream", "backup", "ORD", str(folder), "--no-progress")
        assert code == 0, out
        assert (await cli(url, "stream", "rm", "ORD", "-f"))[0] == 0
        await eventually(
            lambda: asyncio.sleep(0, not any(_stream_folder(s, "ORD") for s in c.servers)),
            "ORD's files gone from every server",
        )
        code, out = await cli(
            url, "stream", "restore", str(folder), "--replicas", "3", "--no-progress"
        )
        assert code == 0, out
        assert 'Restored stream "ORD"' in out
        after = await eventually(lambda: _replicated_info(c, "ORD"), "ORD's two other replicas")
        assert after["config"]["num_replicas"] == 3
        for key in ("messages", "bytes", "first_seq", "last_seq"):
            assert after["state"][key] == before["state"][key], key
        for server in c.servers:
            await eventually(
                lambda server=server: asyncio.sleep(0, stream_messages(server, "ORD") == 30),
                f"{server_name(server)} holds the restored messages",
            )


async def test_a_purged_stream_restores_its_sequences(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("P", ["p.>"])
        for i in range(5):
            await c.js.publish("p.x", b"%d" % i)
        await c.js.purge_stream("P")
        doc, receiver = await snapshot(c.nc, "P", chunk_size=1024)
        await c.js.delete_stream("P")
        await eventually(
            lambda: asyncio.sleep(0, not any(_stream_folder(s, "P") for s in c.servers)),
            "P's files gone from every server",
        )
        done = await restore(c.nc, "P", doc, [m.data for m in receiver.chunks])
        assert "error" not in done, done
        state = done["state"]
        assert (state["messages"], state["first_seq"], state["last_seq"]) == (0, 6, 5)
        ack = await eventually(lambda: c.js.publish("p.x", b"next"), "a publish after it")
        assert ack.seq == 6


async def _replicated_info(c: Running, stream: str) -> Any:
    """Stream info once it lists the two other replicas (the reference lists them a
    moment after a restore answers)."""
    info = await request(c.nc, f"$JS.API.STREAM.INFO.{stream}", timeout=1)
    return info if len((info.get("cluster") or {}).get("replicas") or []) == 2 else None
