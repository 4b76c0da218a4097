"""KV buckets, Object Stores and consumers on replicated streams, across a leader's death."""

from __future__ import annotations

from pathlib import Path

import nats
import nats.errors
import pytest
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import NotFoundError

from tests.jscluster.support import (
    connect,
    eventually,
    js_cluster,
    request,
    server_name,
)
from tests.support.servers import enabled_kinds

pytestmark = [pytest.mark.timeout(120), pytest.mark.parametrize("kind", enabled_kinds())]


async def test_kv_and_object_store_with_three_replicas_survive_the_leader(
    kind: str, tmp_path: Path
) -> None:
    async with js_cluster(kind, tmp_path) as c:
        js = c.js
        kv = await eventually(
            lambda: js.create_key_value(bucket="cfg", replicas=3, history=3), "an R3 bucket"
        )
        for i in range(10):
            await kv.put(f"k{i % 3}", str(i).encode())
        (await c.leader("KV_cfg")).kill()
        entry = await eventually(lambda: kv.get("k0"), "a KV get after failover")
        assert entry.value == b"9" and entry.revision == 10
        revision = await eventually(lambda: kv.put("k1", b"new"), "a KV put after failover")
        assert revision == 11
        with pytest.raises(NotFoundError):
            await kv.get("missing")
        history = await eventually(lambda: kv.history("k1"), "the history of a key")
        assert [e.value for e in history] == [b"4", b"7", b"new"]
        store = await eventually(
            lambda: js.create_object_store("files", replicas=3), "an R3 object store"
        )
        blob = bytes(range(256)) * 1000
        await eventually(lambda: store.put("blob", blob), "an object put")
        got = await eventually(lambda: store.get("blob"), "an object get")
        assert got.data == blob


async def test_consumer_failover_redelivers_only_what_was_not_acknowledged(
    kind: str, tmp_path: Path
) -> None:
    async with js_cluster(kind, tmp_path) as c:
        js = c.js
        await c.add_stream("W", ["w.>"])
        for i in range(30):
            await js.publish("w.x", str(i).encode())
        await js.add_consumer(
            "W", ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT, ack_wait=2)
        )
        sub = await js.pull_subscribe_bind("d", "W")
        acked = set()
        for msg in (await sub.fetch(20, timeout=5))[:15]:
            await msg.ack_sync()  # confirmed: committed on a quorum before the answer
            acked.add(msg.metadata.sequence.stream)
        info = await js.consumer_info("W", "d")
        assert info.ack_floor.stream_seq == 15
        leader = await c.leader("W")
        leader.kill()

        async def rest() -> set[int]:
            got: set[int] = set()
            while len(got | acked) < 30:
                for msg in await sub.fetch(30, timeout=2):
                    got.add(msg.metadata.sequence.stream)
                    await msg.ack_sync()
            return got

        seen = await eventually(rest, "the unacknowledged messages after failover", 40)
        assert not seen & acked, f"acknowledged messages redelivered: {sorted(seen & acked)}"
        assert seen | acked == set(range(1, 31))
        info = await eventually(lambda: js.consumer_info("W", "d"), "consumer info")
        assert info.ack_floor.stream_seq == 30 and info.num_ack_pending == 0
        assert info.cluster is not None and info.cluster.leader != server_name(leader)


ACCOUNTS = """
accounts {
  SYS { users [ { user: sys, password: pass } ] }
  APP { users [ { user: app, password: pass } ], jetstream: enabled }
}
system_account: SYS
"""


async def test_meta_leader_stepdown_as_the_system_account(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, config=ACCOUNTS, user="app", password="pass") as c:
        await c.add_stream("A", ["a"])
        sys = await connect(c.servers, user="sys", password="pass")

        async def meta_leader() -> str | None:
            doc = await request(sys, "$SYS.REQ.SERVER.PING.JSZ")
            return doc["data"].get("meta_cluster", {}).get("leader")

        old = await eventually(meta_leader, "a meta leader")
        # Options reach a PING's JSZ as /jsz's query does; the groups are SYS's, not $SYS's
        jsz = await request(sys, "$SYS.REQ.SERVER.PING.JSZ", b'{"accounts": true}')
        assert [a["name"] for a in jsz["data"]["account_details"]] == ["APP"]
        varz = await request(sys, "$SYS.REQ.SERVER.PING.VARZ")
        assert varz["data"]["system_account"] == "SYS"
        assert varz["data"]["jetstream"]["meta"]["cluster_size"] == 3
        raftz = await request(sys, "$SYS.REQ.SERVER.PING.RAFTZ")
        assert list(raftz["data"]) == ["SYS"] and "_meta_" in raftz["data"]["SYS"]
        raftz = await request(sys, "$SYS.REQ.SERVER.PING.RAFTZ", b'{"group": "_meta_"}')
        assert list(raftz["data"]["SYS"]) == ["_meta_"]
        raftz = await request(sys, "$SYS.REQ.SERVER.PING.RAFTZ", b'{"account": "APP"}')
        assert list(raftz["data"]) == ["APP"] and len(raftz["data"]["APP"]) == 1  # A's group
        answer = await request(sys, "$JS.API.META.LEADER.STEPDOWN")
        assert answer == {"type": "io.nats.jetstream.api.v1.meta_leader_stepdown_response",
                          "success": True}  # fmt: skip

        async def moved() -> str | None:
            now = await meta_leader()
            return now if now not in (None, old) else None

        await eventually(moved, "a new meta leader")
        info = await c.add_stream("B", ["b"], replicas=1)  # through the new meta leader
        assert info.config.name == "B"
        with pytest.raises(nats.errors.TimeoutError):  # not the system account: ignored
            await request(c.nc, "$JS.API.META.LEADER.STEPDOWN", timeout=1)
        await sys.close()


async def test_server_remove_as_the_system_account(kind: str, tmp_path: Path) -> None:
    async with js_cluster(
        kind, tmp_path, size=4, config=ACCOUNTS, user="app", password="pass"
    ) as c:
        info = await c.add_stream("A", ["a"])
        assert info.cluster is not None and info.cluster.replicas
        sys = await connect(c.servers, user="sys", password="pass")
        jsz = await request(sys, "$SYS.REQ.SERVER.PING.JSZ")
        meta_leader = jsz["data"]["meta_cluster"]["leader"]  # keep it: it answers
        victim = next(r.name for r in info.cluster.replicas if r.name != meta_leader)
        kind_doc = "io.nats.jetstream.api.v1.meta_server_remove_response"
        nope = await request(sys, "$JS.API.SERVER.REMOVE", b'{"peer": "NOPE"}')
        assert nope == {"type": kind_doc, "error": {
            "code": 400, "err_code": 10044, "description": "server is not a member of the cluster"
        }}  # fmt: skip
        empty = await request(sys, "$JS.API.SERVER.REMOVE", b"")
        assert empty["error"]["err_code"] == 10003
        next(s for s in c.servers if server_name(s) == victim).kill()
        body = b'{"peer": "%s"}' % victim.encode()
        tries = [0]

        async def remove() -> dict[str, object]:
            tries[0] += 1  # a timed-out try may still have removed it
            return await request(sys, "$JS.API.SERVER.REMOVE", body)

        done = await eventually(remove, f"{victim} removed")
        if tries[0] == 1:
            assert done == {"type": kind_doc, "success": True}
        else:
            assert done.get("success") or done["error"]["err_code"] == 10044  # type: ignore[index]

        async def shrunk() -> bool:
            doc = await request(sys, "$SYS.REQ.SERVER.PING.JSZ")
            return doc["data"].get("meta_cluster", {}).get("cluster_size") == 3

        await eventually(shrunk, "a meta group of three")
        await sys.close()


async def test_a_push_consumer_wakes_for_a_subscriber_on_another_server(
    kind: str, tmp_path: Path
) -> None:
    """The deliver subject is subscribed after the consumer exists, on a server the
    consumer is not on: the subscription reaches the consumer's server as route interest,
    and that wakes it as a local subscription would."""
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("P", ["p.>"], replicas=1)
        home = await c.leader("P")
        push = ConsumerConfig(durable_name="D", deliver_subject="push.d", ack_policy=AckPolicy.NONE)
        await c.js.add_consumer("P", push)
        for i in range(5):
            await c.js.publish("p.x", b"%d" % i)
        elsewhere = next(s for s in c.servers if s is not home)
        nc = await nats.connect(elsewhere.url)
        try:
            sub = await nc.subscribe("push.d")
            got = [(await sub.next_msg(timeout=10)).data for _ in range(5)]
        finally:
            await nc.close()
        assert got == [b"0", b"1", b"2", b"3", b"4"]
