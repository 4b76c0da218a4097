"""Followers apply a run of publishes from its log bytes: what they store is what the
leader stored, down to the bytes each message counts for.

A client's PUBs read together are one Run entry; a follower lays a run of plain
publishes (no msg id, rollup or TTL) out as a segment batch straight from the
entry, and reads any other run as its publishes. Leadership moved to each
follower in turn must then report the state the first leader reported, and
serve the same messages. Both kinds alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import nats
import pytest

from tests.jscluster.support import js_cluster, server_name
from tests.support.servers import enabled_kinds

pytestmark = [pytest.mark.timeout(180), pytest.mark.parametrize("kind", enabled_kinds())]

COUNT = 300


def headers(i: int) -> dict[str, str] | None:
    """Some plain messages with headers, an empty header block, and a few with msg ids
    (which make their run one that is read as its publishes)."""
    if i % 50 == 7:
        return {"Nats-Msg-Id": f"id-{i}"}
    if i % 5 == 1:
        return {"Trace": f"t{i}", "Mark": "a b"}
    return None


async def test_followers_store_a_run_as_the_leader_did(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("RUNS", ["runs.>"])
        leader = await c.leader("RUNS")
        pub = await nats.connect(leader.url, allow_reconnect=False)
        try:
            acks = await pub.subscribe("acks.*")
            for i in range(COUNT):  # one flush: the leader reads them together, in runs
                await pub.publish(
                    f"runs.{i % 3}.é", b"%d" % i * (i % 7), reply=f"acks.{i}", headers=headers(i)
                )
            await pub.flush()
            seqs = {json.loads((await acks.next_msg(timeout=10)).data)["seq"] for _ in range(COUNT)}
            assert seqs == set(range(1, COUNT + 1))
        finally:
            await pub.close()
        first = await c.js.stream_info("RUNS")
        assert first.state.messages == COUNT
        for follower in [s for s in c.servers if server_name(s) != server_name(leader)]:
            await c.lead_on("RUNS", follower)
            info = await c.js.stream_info("RUNS")
            assert (info.state.messages, info.state.bytes, info.state.last_seq) == (
                first.state.messages,
                first.state.bytes,
                first.state.last_seq,
            ), server_name(follower)
            for seq in (1, 2, 8, 57, COUNT):
                msg = await c.js.get_msg("RUNS", seq)
                i = seq - 1
                assert (msg.subject, msg.data or b"") == (f"runs.{i % 3}.é", b"%d" % i * (i % 7))
                assert (msg.headers or None) == headers(i)
