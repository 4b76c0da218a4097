"""Traffic over a leafnode link, the same for every pairing of hub and leaf (see conftest):
messages both ways, request/reply, queue groups spanning the link, unsubscribes
reaching the other end, the remote's deny rules, and /leafz.

Absence is checked with a sentinel: one link delivers in order, so once a subscriber
got the sentinel published after a message, that message would have arrived first.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from ingest.server.compression import S2_FAST, S2_UNCOMPRESSED
from tests.leafnode.conftest import Link, knows, leafz
from tests.support.clients import sync
from tests.support.http import _get
from tests.support.poll import poll_async

TIMEOUT = 5.0


@pytest.fixture
async def ends(link: Link) -> AsyncIterator[tuple[NATS, NATS]]:
    """A client on the hub and one on the leaf."""
    hub = await nats.connect(link.hub.url, allow_reconnect=False)
    leaf = await nats.connect(link.leaf.url, allow_reconnect=False)
    yield hub, leaf
    await hub.close()
    await leaf.close()


async def test_messages_cross_both_ways(link: Link, ends: tuple[NATS, NATS]) -> None:
    hub, leaf = ends
    at_hub = await hub.subscribe("up.*")
    at_leaf = await leaf.subscribe("down.>")
    await sync(hub)
    await sync(leaf)
    await knows(link.leaf, "up.*")
    await knows(link.hub, "down.>")
    await leaf.publish("up.one", b"from the leaf", headers={"K": "v"})
    await hub.publish("down.a.b", b"from the hub")
    up = await at_hub.next_msg(TIMEOUT)
    down = await at_leaf.next_msg(TIMEOUT)
    assert (up.subject, up.data, up.headers) == ("up.one", b"from the leaf", {"K": "v"})
    assert (down.subject, down.data) == ("down.a.b", b"from the hub")
    await at_hub.unsubscribe()
    await at_leaf.unsubscribe()


@pytest.mark.parametrize("served_at", ["hub", "leaf"])
async def test_request_reply_across(link: Link, ends: tuple[NATS, NATS], served_at: str) -> None:
    hub, leaf = ends
    server, client = (hub, leaf) if served_at == "hub" else (leaf, hub)
    subject = f"svc.{served_at}"

    async def answer(msg: Msg) -> None:
        await msg.respond(b"answered at " + served_at.encode() + b": " + msg.data)

    sub = await server.subscribe(subject, cb=answer)
    await sync(server)
    await knows(link.leaf if served_at == "hub" else link.hub, subject)
    reply = await client.request(subject, b"ping", timeout=TIMEOUT)
    assert reply.data == f"answered at {served_at}: ping".encode()
    await sub.unsubscribe()


async def test_unsubscribe_reaches_the_other_end(link: Link, ends: tuple[NATS, NATS]) -> None:
    """Once the hub's only responder leaves, the leaf's requester hears no responders:
    the leaf forgot the interest rather than sending into the void."""
    hub, leaf = ends

    async def answer(msg: Msg) -> None:
        await msg.respond(b"here")

    sub = await hub.subscribe("gone.svc", cb=answer)
    await sync(hub)
    await knows(link.leaf, "gone.svc")
    assert (await leaf.request("gone.svc", b"", timeout=TIMEOUT)).data == b"here"
    await sub.unsubscribe()
    await sync(hub)
    await knows(link.leaf, "gone.svc", present=False)
    with pytest.raises(NoRespondersError):
        await leaf.request("gone.svc", b"", timeout=TIMEOUT)


async def test_queue_group_spans_the_link(link: Link, ends: tuple[NATS, NATS]) -> None:
    """A group with members on both ends gets each message once, from the member on the
    end it was sent to (the other end's member only stands in); a group with a member
    on one end only gets what the other end sends."""
    hub, leaf = ends
    got: list[tuple[bytes, bytes]] = []  # (the member's end, the message)

    async def at_hub(msg: Msg) -> None:
        got.append((b"hub", msg.data))

    async def at_leaf(msg: Msg) -> None:
        got.append((b"leaf", msg.data))

    hub_q = await hub.subscribe("work", queue="workers", cb=at_hub)
    leaf_q = await leaf.subscribe("work", queue="workers", cb=at_leaf)
    only_hub = await hub.subscribe("solo", queue="one")  # a group on one end only
    await sync(hub)
    await sync(leaf)
    await knows(link.leaf, "solo")
    await knows(link.hub, "work")
    await knows(link.leaf, "work")
    sent = [f"{side}-{i}".encode() for side in ("hub", "leaf") for i in range(20)]
    for data in sent:
        await (hub if data.startswith(b"hub") else leaf).publish("work", data)
    await leaf.publish("solo", b"to the hub's only member")
    assert (await only_hub.next_msg(TIMEOUT)).data == b"to the hub's only member"
    await poll_async(
        lambda: len(got) >= len(sent),
        lambda: f"{len(sent)} messages on the queue members, not {len(got)}",
        TIMEOUT,
    )
    await sync(hub)
    await sync(leaf)
    assert sorted(data for _, data in got) == sorted(sent)  # each once, none twice
    assert all(data.startswith(end) for end, data in got)  # served where it was sent
    for sub in (hub_q, leaf_q, only_hub):
        await sub.unsubscribe()


async def test_deny_rules_of_the_remote(link: Link, ends: tuple[NATS, NATS]) -> None:
    """The leaf's remote denies exporting `private.>` and importing `local.>`."""
    hub, leaf = ends
    at_hub = await hub.subscribe("private.x")
    hub_fence = await hub.subscribe("fence.up")
    at_leaf = await leaf.subscribe("local.x")
    leaf_fence = await leaf.subscribe("fence.down")
    await sync(hub)
    await sync(leaf)
    await knows(link.leaf, "fence.up")
    await knows(link.hub, "fence.down")
    await leaf.publish("private.x", b"kept at the leaf")
    await leaf.publish("fence.up", b"")
    await hub.publish("local.x", b"kept at the hub")
    await hub.publish("fence.down", b"")
    await hub_fence.next_msg(TIMEOUT)
    await leaf_fence.next_msg(TIMEOUT)
    assert at_hub.pending_msgs == 0
    assert at_leaf.pending_msgs == 0
    assert "local.x" not in {s for s in _announced_by_leaf(link)}
    for sub in (at_hub, hub_fence, at_leaf, leaf_fence):
        await sub.unsubscribe()


def _announced_by_leaf(link: Link) -> set[str]:
    return {s for leaf in leafz(link.hub)["leafs"] for s in leaf.get("subscriptions_list", [])}


async def test_leafz_describes_the_link(link: Link) -> None:
    for server, spoke in ((link.hub, False), (link.leaf, True)):
        doc = leafz(server)
        assert doc["leafnodes"] == 1
        (entry,) = doc["leafs"]
        expected = {"leaf" if server is link.hub else "hub", spoke, "$G"}
        assert {entry["name"], entry["is_spoke"], entry["account"]} == expected
        for key in ("id", "ip", "port", "rtt", "in_msgs", "out_msgs", "in_bytes", "out_bytes"):
            assert key in entry, (server.kind, key)
        assert isinstance(entry["subscriptions"], int)
        assert any(s.startswith("$LDS.") for s in entry["subscriptions_list"])


async def test_leafz_entries_have_the_same_fields_on_both_ends(link: Link) -> None:
    """With the reference on one end, jetlake's entry has the reference's fields."""
    hub = leafz(link.hub)["leafs"][0]
    leaf = leafz(link.leaf)["leafs"][0]
    assert set(hub) == set(leaf)
    # Both ends default to s2_auto: each picks a level from the round trip it measured,
    # no compression on an idle loopback, s2_fast past 10 ms on a loaded machine.
    assert {hub["compression"], leaf["compression"]} <= {S2_UNCOMPRESSED, S2_FAST}


async def test_varz_counts_and_describes_the_links(link: Link) -> None:
    hub = _get(link.hub.http_url + "/varz").json()
    leaf = _get(link.leaf.http_url + "/varz").json()
    assert hub["leafnodes"] == leaf["leafnodes"] == 1
    assert (hub["leaf"]["host"], hub["leaf"]["port"]) == ("127.0.0.1", link.leaf_port)
    (remote,) = leaf["leaf"]["remotes"]
    assert remote == {
        "local_account": "$G",
        "urls": [f"127.0.0.1:{link.leaf_port}"],
        "deny": {"exports": ["private.>"], "imports": ["local.>"]},
    }


def test_a_client_on_the_leafnode_port_is_refused(link: Link) -> None:
    """A client (its CONNECT names a `lang`) dialled the hub's leafnode port."""
    with socket.create_connection(("127.0.0.1", link.leaf_port), timeout=TIMEOUT) as sock:
        lines = sock.makefile("rb")
        assert lines.readline().startswith(b"INFO ")
        sock.sendall(b'CONNECT {"lang":"python","verbose":false}\r\nPING\r\n')
        assert lines.readline() == b"-ERR 'attempted to connect to leaf node port'\r\n"


def test_interest_before_connect_is_refused(link: Link) -> None:
    with socket.create_connection(("127.0.0.1", link.leaf_port), timeout=TIMEOUT) as sock:
        lines = sock.makefile("rb")
        assert lines.readline().startswith(b"INFO ")
        sock.sendall(b"LS+ early.bird\r\n")
        assert lines.readline() == b"-ERR 'Authorization Violation'\r\n"
