"""The compiled fast path on a stream's leader, in a cluster: what it learnt never hides
a peer's interest.

A client on the leader publishing with a reply inbox has its PUBs handed to the
stream in runs and its PubAcks framed without a match, both learnt from the
sublist of this server alone. A subscriber that a peer announces afterwards, on
the stream's subject or on the inbox, must get the next message or PubAck, as
it would from a server routing every message in Python. Both kinds alike.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats
import pytest

from tests.jscluster.support import js_cluster, server_name
from tests.support.cluster import has_route_interest, poll
from tests.support.servers import enabled_kinds

pytestmark = [pytest.mark.timeout(180), pytest.mark.parametrize("kind", enabled_kinds())]

SUBJECT = "fast.orders"
INBOX = "fast.inbox"


async def test_a_peer_subscribing_later_gets_what_the_leader_routed_fast(
    kind: str, tmp_path: Path
) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("ORDERS", [SUBJECT])
        leader = await c.leader("ORDERS")
        peer = next(s for s in c.servers if server_name(s) != server_name(leader))
        pub = await nats.connect(leader.url, allow_reconnect=False)
        watch = await nats.connect(peer.url, allow_reconnect=False)
        try:
            acks = await pub.subscribe(f"{INBOX}.*")
            for i in range(20):  # enough to be learnt, in runs or one by one
                await pub.publish(SUBJECT, b"%d" % i, reply=f"{INBOX}.{i}")
            for i in range(20):
                assert json.loads((await acks.next_msg(timeout=5)).data)["seq"] == i + 1
            copies, peer_acks = await watch.subscribe(SUBJECT), await watch.subscribe(f"{INBOX}.*")
            await watch.flush()
            for subject in (SUBJECT, f"{INBOX}.*"):
                await asyncio.to_thread(
                    poll, lambda s=subject: has_route_interest(leader, s), f"interest in {subject}"
                )
            await pub.publish(SUBJECT, b"after", reply=f"{INBOX}.after")
            assert (await copies.next_msg(timeout=5)).data == b"after"
            ack = await peer_acks.next_msg(timeout=5)
            assert (ack.subject, json.loads(ack.data)["seq"]) == (f"{INBOX}.after", 21)
            assert json.loads((await acks.next_msg(timeout=5)).data)["seq"] == 21
        finally:
            await pub.close()
            await watch.close()
