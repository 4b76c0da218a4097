"""The compiled fast path (routing and MSG framing in the codec) against the pure server path.

The same connections send the same bytes, split at the same places, to a server
built with the extension and to one built without it (`fast.native` None, as with
`JETLAKE_NATIVE=0`); every connection must be sent the same bytes, and the counters
monitoring reports must agree. Random subscription sets mix wildcards, queue groups
(the same random seed picks the same member), headers, replies, auto-unsubscribe
limits and SUB/UNSUB in the middle of a publisher's stream. No sockets: the
transports record what the server writes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
from typing import Any

import jetlake_native
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.parser import fast
from ingest.server.client import Client
from ingest.server.options import parse_serve_args
from ingest.server.server import Server
from tests.support.poll import poll_async

TOKENS = ("a", "b")  # few subjects, so they repeat and get learnt
LITERAL = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=3).map(".".join)
PATTERN = (
    st.lists(st.sampled_from([*TOKENS, "*"]), min_size=1, max_size=3).map(lambda t: ".".join(t))
    | LITERAL.map(lambda s: s + ".>")
    | st.just(">")
)


class Transport:
    """What the server wrote; never pushes back."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.out += data

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 4222) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    abort = close


def connect(headers: bool) -> bytes:
    flag = "true" if headers else "false"
    return b'CONNECT {"verbose":false,"pedantic":false,"headers":%b}\r\n' % flag.encode()


@st.composite
def subscriptions(draw: st.DrawFn, sid0: int) -> bytes:
    """SUBs, some in queue groups, some with an auto-unsubscribe limit."""
    out = []
    for sid in range(sid0, sid0 + draw(st.integers(0, 4))):
        queue = draw(st.sampled_from([b"", b"", b" q1", b" q2"]))
        out.append(b"SUB %b%b %d\r\n" % (draw(PATTERN).encode(), queue, sid))
        if draw(st.integers(0, 3)) == 0:
            out.append(b"UNSUB %d %d\r\n" % (sid, draw(st.integers(1, 6))))
    return b"".join(out)


@st.composite
def publishes(draw: st.DrawFn) -> bytes:
    """A publisher's stream: PUB/HPUB on few subjects (so they repeat and get learnt),
    replies, PINGs, and now and then a SUB or UNSUB of its own."""
    out = []
    for i in range(draw(st.integers(1, 40))):
        kind = draw(st.integers(0, 19))
        if kind == 0:
            out.append(b"PING\r\n")
            continue
        if kind == 1:
            out.append(b"SUB %b %d\r\n" % (draw(PATTERN).encode(), 100 + i))
            continue
        if kind == 2:
            out.append(b"UNSUB %d\r\n" % draw(st.integers(1, 110)))
            continue
        subject = draw(LITERAL).encode()
        reply = draw(st.sampled_from([b"", b"", b" _INBOX.r"]))
        payload = draw(st.binary(max_size=20))
        if draw(st.booleans()):
            hdr = b"NATS/1.0\r\nN: %d\r\n\r\n" % i
            size = len(hdr) + len(payload)
            out.append(
                b"HPUB %b%b %d %d\r\n%b%b\r\n" % (subject, reply, len(hdr), size, hdr, payload)
            )
        else:
            out.append(b"PUB %b%b %d\r\n%b\r\n" % (subject, reply, len(payload), payload))
    return b"".join(out)


def chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


async def settle() -> None:
    """Run what the loop has scheduled: deliveries, second halves, flushes."""
    for _ in range(6):
        await asyncio.sleep(0)


async def serve(reads: list[tuple[int, bytes]], conns: int, headers: list[bool]) -> dict[str, Any]:
    """Feed each (connection, bytes) read in turn; what each connection was sent, and counters."""
    random.seed(7)  # queue groups pick the same members on both paths
    server = Server(parse_serve_args([]))
    server._loop = asyncio.get_running_loop()
    transports = [Transport() for _ in range(conns)]
    clients = []
    for cid, transport in enumerate(transports):
        client = Client(server, cid + 1)
        client.connection_made(transport)  # type: ignore[arg-type]
        del transport.out[:]  # the INFO names a random server id
        client.data_received(connect(headers[cid]))
        clients.append(client)
    await settle()
    for cid, data in reads:
        clients[cid].data_received(data)
        await settle()
    subs = [(c.cid, sid, s.delivered) for c in clients for sid, s in sorted(c.subs.items())]
    counts = [(c.in_msgs, c.in_bytes, c.out_msgs, c.out_bytes) for c in clients]
    for client in clients:
        client.close_with("done")
    return {
        "sent": [bytes(t.out) for t in transports],
        "subs": subs,
        "clients": counts,
        "server": (server.in_msgs, server.in_bytes, server.out_msgs, server.out_bytes),
    }


def both(reads: list[tuple[int, bytes]], conns: int, headers: list[bool]) -> tuple[Any, Any]:
    compiled = asyncio.run(serve(reads, conns, headers))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fast, "native", None)
        pure = asyncio.run(serve(reads, conns, headers))
    return compiled, pure


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.data(), min_size=1, max_size=1),
    st.lists(st.booleans(), min_size=3, max_size=3),
    st.lists(st.integers(min_value=0), max_size=6),
)
def test_same_bytes_to_every_connection(
    draws: list[st.DataObject], headers: list[bool], cuts: list[int]
) -> None:
    data = draws[0]
    reads: list[tuple[int, bytes]] = []
    for cid in range(3):
        reads.append((cid, data.draw(subscriptions(1 + cid * 10))))
    for _ in range(data.draw(st.integers(1, 3))):
        stream = data.draw(publishes())
        reads += [(0, chunk) for chunk in chunks(stream, cuts)]
        if data.draw(st.booleans()):
            reads.append((data.draw(st.integers(1, 2)), data.draw(subscriptions(50))))
    compiled, pure = both(reads, 3, headers)
    assert compiled == pure


def test_a_repeated_subject_is_routed_by_the_codec() -> None:
    """The property test would pass with the fast path never taken: prove it is taken."""
    pubs = b"PUB a.b 2\r\nhi\r\n" * 3
    reads = [(1, b"SUB a.* 1\r\nSUB a.b 2\r\n"), (0, pubs), (0, pubs), (0, pubs + b"PING\r\n")]

    async def run() -> int:
        server = Server(parse_serve_args([]))
        server._loop = asyncio.get_running_loop()
        clients = [Client(server, 1), Client(server, 2)]
        for client in clients:
            client.connection_made(Transport())  # type: ignore[arg-type]
            client.data_received(connect(True))
        learnt = 0
        for cid, data in reads:
            clients[cid].data_received(data)
            learnt = max(learnt, len(server.sublist.routes))
            await settle()
        return learnt

    assert fast.native is jetlake_native
    assert asyncio.run(run()) == 1
    compiled, pure = both(reads, 2, [True, True])
    assert compiled == pure
    assert compiled["server"][2] == 18  # 9 messages, two subscriptions each


def test_an_auto_unsubscribe_limit_holds_on_the_fast_path() -> None:
    pubs = b"PUB a 1\r\nx\r\n" * 4
    reads = [(1, b"SUB a 1\r\nSUB > 2\r\nUNSUB 1 6\r\n"), (0, pubs), (0, pubs), (0, pubs)]
    compiled, pure = both(reads, 2, [False, False])
    assert compiled == pure
    assert compiled["sent"][1].count(b"MSG a 1 ") == 6
    assert compiled["subs"] == [(2, b"2", 12)]


class Backlogged(Transport):
    """A transport whose unsent backlog the test sets, and that records reading pauses."""

    def __init__(self) -> None:
        super().__init__()
        self.backlog = 0
        self.reading = True

    def get_write_buffer_size(self) -> int:
        return self.backlog

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


@pytest.mark.parametrize("native", [True, False])
async def test_a_producer_waits_while_its_subscriber_is_backlogged(
    native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over half of max_pending, the subscriber is stalled: its producer stops reading for a
    few ms (as on the reference) instead of burying it; under, nothing waits."""
    if not native:
        monkeypatch.setattr(fast, "native", None)
    server = Server(dataclasses.replace(parse_serve_args([]), max_pending=1000))
    server._loop = asyncio.get_running_loop()
    pub_t, sub_t = Backlogged(), Backlogged()
    pub, sub = Client(server, 1), Client(server, 2)
    for client, transport in ((pub, pub_t), (sub, sub_t)):
        client.connection_made(transport)  # type: ignore[arg-type]
        client.data_received(connect(False))
    sub.data_received(b"SUB s 1\r\n")
    sub_t.backlog = 600
    pub.data_received(b"PUB s 1\r\nx\r\n")
    await settle()
    assert server.stalled == {sub}
    pub.data_received(b"PUB s 1\r\nx\r\n")
    assert not pub_t.reading
    await poll_async(lambda: pub_t.reading, "the publisher reading again", 1, interval=0.001)
    sub_t.backlog = 0
    sub.resume_writing()
    assert not server.stalled
    pub.data_received(b"PUB s 1\r\nx\r\n")
    assert pub_t.reading
    await settle()
    assert sub_t.out.count(b"MSG s 1 1\r\nx\r\n") == 3 and not sub.closed
