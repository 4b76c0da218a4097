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

from tests.jscluster.support import eventually, js_cluster, server_name
from tests.support.cluster import has_route_interest, routez
from tests.support.poll import poll
from tests.support.servers import ServerProcess, enabled_kinds

pytestmark = [pytest.mark.timeout(180), pytest.mark.parametrize("kind", enabled_kinds())]

SUBJECT = "fast.orders"
INBOX = "fast.inbox"
INBOX_ALL = f"{INBOX}.*"


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


async def test_a_peer_client_publishing_in_runs_gets_each_puback_once(
    kind: str, tmp_path: Path
) -> None:
    """A publisher on a follower: its PUBs cross the route to the leader, which takes them
    in runs, and the PubAcks come back in runs to its inbox, framed without a match. Every
    message is stored once and acknowledged once, in order; a subscriber that joins the
    inbox later on that server gets the next PubAck too."""
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("ORDERS", [SUBJECT])
        leader = await c.leader("ORDERS")
        follower = next(s for s in c.servers if server_name(s) != server_name(leader))
        pub = await nats.connect(follower.url, allow_reconnect=False)
        try:
            acks = await pub.subscribe(f"{INBOX}.*")
            await pub.flush()
            await asyncio.to_thread(
                poll, lambda: has_route_interest(leader, f"{INBOX}.*"), "the inbox at the leader"
            )
            for i in range(300):  # one flush: the route carries them to the leader together
                await pub.publish(SUBJECT, b"%d" % i, reply=f"{INBOX}.{i}")
            await pub.flush()
            got = [await acks.next_msg(timeout=10) for _ in range(300)]
            assert [m.subject for m in got] == [f"{INBOX}.{i}" for i in range(300)]
            assert [json.loads(m.data)["seq"] for m in got] == list(range(1, 301))
            late = await pub.subscribe(f"{INBOX}.*")
            await pub.publish(SUBJECT, b"after", reply=f"{INBOX}.after")
            assert json.loads((await late.next_msg(timeout=5)).data)["seq"] == 301
            assert json.loads((await acks.next_msg(timeout=5)).data)["seq"] == 301
            assert (await c.js.stream_info("ORDERS")).state.messages == 301
            await _more_take_the_inbox(c.servers, leader, follower, pub)
        finally:
            await pub.close()


async def _more_take_the_inbox(
    servers: list[ServerProcess],
    leader: ServerProcess,
    follower: ServerProcess,
    pub: nats.NATS,
) -> None:
    """The leader learnt that the follower's route alone takes the inbox's PubAcks; a
    subscriber to it on the third server and one on the leader itself each get the next
    PubAck, as does the publisher's own."""
    names = {server_name(leader), server_name(follower)}
    third = next(s for s in servers if server_name(s) not in names)
    here = await nats.connect(leader.url, allow_reconnect=False)
    there = await nats.connect(third.url, allow_reconnect=False)
    try:
        subs = [await nc.subscribe(f"{INBOX}.*") for nc in (here, there, pub)]
        for nc in (here, there):
            await nc.flush()

        def both_peers() -> bool:
            routes = routez(leader)["routes"]
            wanting = {
                r.get("remote_id")
                for r in routes
                if INBOX_ALL in (r.get("subscriptions_list") or [])
            }
            return len(wanting) == 2

        await asyncio.to_thread(poll, both_peers, "the inbox from both peers at the leader")
        await pub.publish(SUBJECT, b"again", reply=f"{INBOX}.again")
        for sub in subs:
            ack = await sub.next_msg(timeout=5)
            assert (ack.subject, json.loads(ack.data)["seq"]) == (f"{INBOX}.again", 302)
    finally:
        await here.close()
        await there.close()


async def test_a_followers_client_keeps_publishing_while_the_lead_moves_to_its_server_and_back(
    kind: str, tmp_path: Path
) -> None:
    """A follower's client publishing in runs: its server learns to hand the runs to the
    leader's route whole. The lead then moves to that server (its own replica takes the
    runs) and on to the third (they cross a route again): every acknowledged message is
    stored once, in order, with none lost at either move."""
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("ORDERS", [SUBJECT])
        leader = await c.leader("ORDERS")
        follower = next(s for s in c.servers if server_name(s) != server_name(leader))
        third = next(s for s in c.servers if s is not leader and s is not follower)
        pub = await nats.connect(follower.url, allow_reconnect=False)
        js = pub.jetstream(timeout=10)
        sent = 0
        try:
            for where in (leader, follower, third):
                await c.lead_on("ORDERS", where)
                futures = [await js.publish_async(SUBJECT, b"%d" % (sent + i)) for i in range(200)]
                acks = await asyncio.gather(*futures)
                assert [a.seq for a in acks] == list(range(sent + 1, sent + 201)), where
                sent += 200
            info = await c.js.stream_info("ORDERS")
            assert (info.state.messages, info.state.last_seq) == (sent, sent)
            got = await c.js.get_msg("ORDERS", sent)
            assert got.data == b"%d" % (sent - 1)
        finally:
            await pub.close()


async def test_a_fetch_from_a_follower_gets_each_message_once_as_stored(
    kind: str, tmp_path: Path
) -> None:
    """A pull consumer fetched by a client on another server than the leader: the
    leader routes each batch to the client's inbox as one run over the route, and takes
    the acks the route brings together in runs. Every message arrives once, in order,
    under its own subject with its headers, and every ack, one at a time or together,
    is taken."""
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("ORDERS", [f"{SUBJECT}.>"])
        leader = await c.leader("ORDERS")
        follower = next(s for s in c.servers if server_name(s) != server_name(leader))
        for i in range(150):
            headers = {"N": str(i)} if i % 3 == 0 else None
            await c.js.publish(f"{SUBJECT}.{i % 4}", b"%d" % i, headers=headers)
        nc = await nats.connect(follower.url, allow_reconnect=False)
        try:
            js = nc.jetstream(timeout=10)
            sub = await js.pull_subscribe(f"{SUBJECT}.>", "puller", stream="ORDERS")
            got = []
            while len(got) < 150:
                for msg in await sub.fetch(50, timeout=10):
                    got.append(msg)
                    if len(got) <= 50:
                        await msg.ack_sync()  # one at a time
                    else:
                        await msg.ack()  # together: the leader takes them in runs
                await nc.flush()
            assert [m.data for m in got] == [b"%d" % i for i in range(150)]
            assert [m.subject for m in got] == [f"{SUBJECT}.{i % 4}" for i in range(150)]
            assert [(m.headers or {}).get("N") for m in got] == [
                str(i) if i % 3 == 0 else None for i in range(150)
            ]

            async def settled() -> bool:
                info = await js.consumer_info("ORDERS", "puller")
                return (info.num_pending, info.num_ack_pending) == (0, 0)

            await eventually(settled, "every message acknowledged")
        finally:
            await nc.close()


async def test_a_peers_deliveries_reach_every_subscriber_of_the_inbox(
    kind: str, tmp_path: Path
) -> None:
    """Deliveries a consumer on another server routes to an inbox are taken in runs only
    where one plain subscription here takes them: with a second subscription on the
    inbox both get every message, each under its stored subject; alone again, the one
    left gets the next batch whole and in order."""
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("ORDERS", [f"{SUBJECT}.>"])
        leader = await c.leader("ORDERS")
        follower = next(s for s in c.servers if server_name(s) != server_name(leader))
        await c.js.add_consumer("ORDERS", durable_name="pull", ack_policy="none")
        for i in range(40):
            await c.js.publish(f"{SUBJECT}.{i % 2}", b"%d" % i)
        nc = await nats.connect(follower.url, allow_reconnect=False)
        try:
            inbox, watch = await nc.subscribe(INBOX_ALL), await nc.subscribe(f"{INBOX}.>")
            await nc.flush()
            await asyncio.to_thread(
                poll, lambda: has_route_interest(leader, INBOX_ALL), "the inbox at the leader"
            )
            next_msg = "$JS.API.CONSUMER.MSG.NEXT.ORDERS.pull"
            batch = json.dumps({"batch": 20, "no_wait": True}).encode()
            await nc.publish(next_msg, batch, reply=f"{INBOX}.1")
            for sub in (inbox, watch):
                got = [await sub.next_msg(timeout=5) for _ in range(20)]
                assert [(m.subject, m.data) for m in got] == [
                    (f"{SUBJECT}.{i % 2}", b"%d" % i) for i in range(20)
                ]
            await watch.unsubscribe()
            await nc.flush()
            await nc.publish(next_msg, batch, reply=f"{INBOX}.2")
            got = [await inbox.next_msg(timeout=5) for _ in range(20)]
            assert [(m.subject, m.data) for m in got] == [
                (f"{SUBJECT}.{i % 2}", b"%d" % i) for i in range(20, 40)
            ]
        finally:
            await nc.close()
