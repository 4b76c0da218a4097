"""Replicated streams on three real servers, the reference and jetlake side by side.

Each scenario starts its own cluster (they kill servers). What a client can
see is compared between the kinds; what only jetlake promises beyond the
reference (no acknowledged loss after any minority fault) is asserted on both
where the reference keeps it too.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from nats.js.api import Placement, StreamConfig
from nats.js.errors import APIError

from tests.jscluster.support import (
    eventually,
    http_json,
    js_cluster,
    jsz,
    request,
    server_name,
    stream_messages,
)
from tests.support.servers import enabled_kinds

pytestmark = [pytest.mark.timeout(120), pytest.mark.parametrize("kind", enabled_kinds())]


async def test_r3_stream_replicates_and_reports_its_cluster(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        info = await c.add_stream("R3", ["r3.>"])
        assert info.config.num_replicas == 3
        cluster = info.cluster
        assert cluster is not None and cluster.name == "C"
        assert cluster.leader in {"S0", "S1", "S2"}
        assert sorted(r.name for r in cluster.replicas or []) == sorted(
            {"S0", "S1", "S2"} - {cluster.leader}
        )
        for i in range(50):
            ack = await c.js.publish(f"r3.{i % 5}", str(i).encode())
            assert ack.seq == i + 1
        for server in c.servers:  # every replica holds every acknowledged message
            await eventually(
                lambda s=server: asyncio.sleep(0, stream_messages(s, "R3") == 50),
                f"{server_name(server)} holding 50 messages",
            )
            assert jsz(server)["ha_assets"] == 2  # its Raft groups: the meta group's and R3's
        listed = await request(c.nc, "$JS.API.STREAM.LIST")
        assert (listed["total"], listed["offset"], listed["limit"]) == (1, 0, 256)
        [doc] = listed["streams"]  # the leader's info, without its envelope
        assert doc["config"]["name"] == "R3" and doc["state"]["messages"] == 50
        assert "type" not in doc and "missing" not in listed
        # Past the end the offset is the count; a clustered list's empty page says
        # total 0 (the reference answers it before counting), its names say the count.
        past = await request(c.nc, "$JS.API.STREAM.LIST", b'{"offset": 5}')
        assert (past["total"], past["offset"], past["streams"]) == (0, 1, [])
        past = await request(c.nc, "$JS.API.STREAM.NAMES", b'{"offset": 5}')
        assert (past["total"], past["offset"]) == (1, 1)
        await c.js.add_consumer("R3", durable_name="D", ack_policy="explicit")
        for server in c.servers:  # every replica holds the consumer, and counts it
            await eventually(
                lambda s=server: asyncio.sleep(0, jsz(s)["consumers"] == 1),
                f"{server_name(server)} counting consumer D",
            )
            [held] = jsz(server, "?streams=true")["account_details"][0]["stream_detail"]
            assert held["state"]["consumer_count"] == 1, server_name(server)
        past = await request(c.nc, "$JS.API.CONSUMER.LIST.R3", b'{"offset": 5}')
        assert (past["total"], past["offset"], past["consumers"]) == (0, 1, [])
        listed = await request(c.nc, "$JS.API.CONSUMER.LIST.R3")
        assert (listed["total"], listed["offset"]) == (1, 0)
        meta = jsz(c.servers[0])["meta_cluster"]
        assert meta["cluster_size"] == 3 and meta["leader"] in {"S0", "S1", "S2"}
        [detail] = jsz(c.servers[0], "?streams=true&raft=true")["account_details"][0][
            "stream_detail"
        ]
        assert detail["stream_raft_group"] == cluster.raft_group
        [plain] = jsz(c.servers[0], "?streams=true")["account_details"][0]["stream_detail"]
        assert "stream_raft_group" not in plain
        raftz = http_json(c.servers[0], "/raftz")
        meta_group = raftz["$SYS"]["_meta_"]
        assert meta_group["size"] == 3 and meta_group["quorum_needed"] == 2
        assert meta_group["state"] in ("LEADER", "FOLLOWER")
        assert list(http_json(c.servers[0], "/raftz?group=_meta_")["$SYS"]) == ["_meta_"]
        # a stream's group is its account's; a filter that finds none shows none
        owned = http_json(c.servers[0], f"/raftz?acc=$G&group={cluster.raft_group}")
        assert list(owned["$G"]) == [cluster.raft_group]
        assert http_json(c.servers[0], "/raftz?acc=APP") == {}
        assert http_json(c.servers[0], "/raftz?group=NOPE") == {}


async def test_placement_errors_match_the_reference(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("OK", ["ok"], replicas=1)
        with pytest.raises(APIError) as four:
            await c.js.add_stream(StreamConfig(name="R4", subjects=["r4"], num_replicas=4))
        assert (four.value.code, four.value.err_code) == (400, 10005)
        with pytest.raises(APIError) as six:
            await c.js.add_stream(StreamConfig(name="R6", subjects=["r6"], num_replicas=6))
        assert (six.value.code, six.value.err_code) == (500, 10052)
        with pytest.raises(APIError) as missing:
            await c.js.stream_info("NOPE")
        assert missing.value.err_code == 10059
        for subjects in (["ok"], ["*"], ["o.>", "ok"]):  # the same, a wildcard's, among others
            with pytest.raises(APIError) as overlap:
                await c.js.add_stream(StreamConfig(name="OVER", subjects=subjects))
            assert (overlap.value.err_code, overlap.value.description) == (
                10065,
                "subjects overlap with an existing stream",
            )
        names = await request(c.nc, "$JS.API.STREAM.NAMES")
        assert names["streams"] == ["OK"]


async def test_leader_failover_keeps_every_acknowledged_message(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path) as c:
        await c.add_stream("F", ["f.>"])
        acked = [(await c.js.publish("f.x", str(i).encode())).seq for i in range(20)]
        leader = await c.leader("F")
        leader.kill()
        ack = await eventually(lambda: c.js.publish("f.x", b"after"), "a publish after failover")
        acked.append(ack.seq)
        new = await c.js.stream_info("F")
        assert new.cluster is not None and new.cluster.leader != server_name(leader)
        assert new.state.messages == len(acked) and new.state.last_seq == acked[-1]
        leader.restart()
        await eventually(
            lambda: asyncio.sleep(0, stream_messages(leader, "F") == len(acked)),
            "the restarted server caught up",
        )


async def test_stream_leader_stepdown(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("D", ["d"])
        before = (await c.js.stream_info("D")).cluster
        assert before is not None
        answer = await request(c.nc, "$JS.API.STREAM.LEADER.STEPDOWN.D")
        assert answer == {"type": "io.nats.jetstream.api.v1.stream_leader_stepdown_response",
                          "success": True}  # fmt: skip

        async def moved() -> bool:
            now = (await c.js.stream_info("D")).cluster
            return now is not None and now.leader not in (None, before.leader)

        await eventually(moved, "a new stream leader")
        ack = await eventually(lambda: c.js.publish("d", b"x"), "a publish to the new leader")
        assert ack.seq == 1


async def test_update_purge_and_delete_go_through_the_leaders(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("U", ["u.>"])
        for i in range(10):
            await c.js.publish(f"u.{i % 2}", b"x")
        updated = await c.js.update_stream(
            StreamConfig(name="U", subjects=["u.>"], num_replicas=3, max_msgs=8)
        )
        assert updated.config.max_msgs == 8 and updated.state.messages == 8
        await c.js.delete_msg("U", 5)
        await c.js.purge_stream("U", subject="u.1")
        info = await c.js.stream_info("U")
        assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (3, 3, 10)
        for server in c.servers:  # every replica applied the same changes
            await eventually(
                lambda s=server: asyncio.sleep(0, stream_messages(s, "U") == 3),
                f"{server_name(server)} holding 3 messages",
            )
        await c.js.delete_stream("U")
        with pytest.raises(APIError) as gone:
            await c.js.stream_info("U")
        assert gone.value.err_code == 10059


async def test_peer_remove_moves_a_replica_to_a_spare_server(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, size=4, timeout=5) as c:
        info = await c.add_stream("P", ["p"])
        for _ in range(5):
            await c.js.publish("p", b"x")
        assert info.cluster is not None and info.cluster.leader
        peers = {info.cluster.leader, *(r.name for r in info.cluster.replicas or [])}
        victim = sorted(peers - {info.cluster.leader})[0]
        answer = await request(
            c.nc, "$JS.API.STREAM.PEER.REMOVE.P", b'{"peer": "%s"}' % victim.encode()
        )
        assert answer == {"type": "io.nats.jetstream.api.v1.stream_remove_peer_response",
                          "success": True}  # fmt: skip
        spare = ({f"S{i}" for i in range(4)} - peers).pop()

        async def moved() -> bool:
            now = (await c.js.stream_info("P")).cluster
            names = {r.name: r.current for r in now.replicas or []} if now else {}
            return now is not None and spare in {now.leader, *names} and victim not in names

        await eventually(moved, f"the replica moved from {victim} to {spare}")
        host = next(s for s in c.servers if server_name(s) == spare)
        await eventually(
            lambda: asyncio.sleep(0, stream_messages(host, "P") == 5), f"{spare} caught up"
        )
        assert (await c.js.publish("p", b"y")).seq == 6
        again = await request(c.nc, "$JS.API.STREAM.PEER.REMOVE.P", b'{"peer": "NOPE"}')
        assert again["error"]["err_code"] == 10040
        empty = await request(c.nc, "$JS.API.STREAM.PEER.REMOVE.P", b"")
        assert empty["error"]["err_code"] == 10003


async def test_peer_remove_without_a_spare_server_fails(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        info = await c.add_stream("P", ["p"])
        assert info.cluster is not None and info.cluster.replicas
        victim = info.cluster.replicas[0].name
        answer = await request(
            c.nc, "$JS.API.STREAM.PEER.REMOVE.P", b'{"peer": "%s"}' % victim.encode()
        )
        assert answer["error"] == {
            "code": 503,
            "err_code": 10075,
            "description": "peer remap failed",
        }


async def test_placement_by_server_tags(kind: str, tmp_path: Path) -> None:
    own = [
        'server_tags: ["az:1", "ssd"]\n',
        'server_tags: ["az:2"]\n',
        'server_tags: ["AZ:3", "ssd"]\n',
    ]
    async with js_cluster(kind, tmp_path, own=own, timeout=5) as c:
        assert http_json(c.servers[0], "/varz")["tags"] == ["az:1", "ssd"]
        await c.add_stream("X", ["x"], replicas=1)  # the meta group is up

        async def placed(name: str, replicas: int, tags: list[str]) -> list[str]:
            config = StreamConfig(
                name=name, subjects=[name], num_replicas=replicas, placement=Placement(tags=tags)
            )
            info = await c.js.add_stream(config)
            assert info.cluster is not None and info.cluster.leader
            return sorted([info.cluster.leader, *(r.name for r in info.cluster.replicas or [])])

        assert await placed("A", 2, ["ssd"]) == ["S0", "S2"]
        assert await placed("B", 1, ["az:2"]) == ["S1"]
        assert await placed("D", 1, ["az:3"]) == ["S2"]  # tags compare lower-cased
        with pytest.raises(APIError) as unmatched:
            await placed("C", 2, ["az:2"])
        assert (unmatched.value.err_code, unmatched.value.description) == (
            10005,
            "no suitable peers for placement, tags not matched ['az:2']",
        )


async def test_placement_by_free_storage(kind: str, tmp_path: Path) -> None:
    """A stream's `max_bytes` must fit what a server has free (its `max_file_store` less
    what it stores, as its STATSZ events say)."""
    sizes = ("10MB", "100MB", "30MB")
    own = [f"jetstream {{ max_file_store: {size} }}\n" for size in sizes]
    mb = 1024 * 1024
    async with js_cluster(kind, tmp_path, own=own, timeout=5) as c:
        await c.add_stream("X", ["x"], replicas=1)  # the meta group is up

        async def placed(name: str, replicas: int, max_bytes: int) -> list[str]:
            config = StreamConfig(
                name=name, subjects=[name], num_replicas=replicas, max_bytes=max_bytes
            )
            info = await c.js.add_stream(config)
            assert info.cluster is not None and info.cluster.leader
            return sorted([info.cluster.leader, *(r.name for r in info.cluster.replicas or [])])

        assert await placed("A", 1, 50 * mb) == ["S1"]  # only S1 has 50 MB
        assert await placed("B", 2, 20 * mb) == ["S1", "S2"]  # S0 has 10 MB
        for name, replicas, size in (("C", 1, 200 * mb), ("D", 3, 20 * mb)):
            with pytest.raises(APIError) as full:
                await placed(name, replicas, size)
            assert (full.value.code, full.value.err_code, full.value.description) == (
                400,
                10005,
                "no suitable peers for placement, insufficient storage",
            )


async def test_large_messages_replicate(kind: str, tmp_path: Path) -> None:
    """A Raft APPEND of many 8 KB messages, or of one near `max_payload`, still crosses
    the routes (capped in bytes, and routes take more than a client's payload)."""
    async with js_cluster(kind, tmp_path, timeout=10) as c:
        await c.add_stream("BIG", ["big"])
        futures = [await c.js.publish_async("big", b"m" * 8000) for _ in range(300)]
        futures += [await c.js.publish_async("big", b"L" * 1_000_000) for _ in range(3)]
        acks = await asyncio.wait_for(asyncio.gather(*futures), 60)
        assert [a.seq for a in acks] == list(range(1, 304))
        for server in c.servers:
            await eventually(
                lambda s=server: asyncio.sleep(0, stream_messages(s, "BIG") == 303),
                f"{server_name(server)} holding 303 messages",
            )
