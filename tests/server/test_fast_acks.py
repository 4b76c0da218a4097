"""A consumer's acks through the compiled codec's runs against the pure path.

The same server, JetStream on, fed the same bytes with the extension and without it
(`fast.native` None, as with `JETLAKE_NATIVE=0`): after a fetch, random acks of every
kind (plain, with a reply, +NAK, +WPI, +TERM, malformed), core PUBs and SUB/UNSUBs,
split at random places, must leave the consumer in the same state and send every
connection the same bytes. No sockets: the transports record what the server writes.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.parser import fast
from ingest.server.client import Client
from ingest.server.jetstream import JetStream
from ingest.server.options import parse_serve_args
from ingest.server.server import Server
from ingest.server.sublist import Sublist
from tests.server.test_fast_routing import Transport, chunks, connect, settle
from tests.support.poll import poll_async

COUNT = 12
ACK = re.compile(rb"MSG s\.\d+ 1 (\$JS\.ACK\.\S+) ")
STAMP = re.compile(rb"(\$JS\.ACK\.S\.C\.\d+\.\d+\.\d+\.)\d+")  # delivery times differ
BODY = st.sampled_from([b"", b"+ACK", b"+OK", b"+NAK", b"+WPI", b"+TERM", b"bogus", b" +ACK"])


async def served(store: Path) -> tuple[Server, JetStream, list[Transport], list[Client]]:
    """A server with JetStream on and two connected clients, no sockets."""
    server = Server(parse_serve_args(["-js", "--store_dir", str(store)]))
    server._loop = asyncio.get_running_loop()
    js = JetStream(server.opts.jetstream, server, server_id="S", server_name="S")
    server.jetstream = js
    await js.start()
    transports = [Transport(), Transport()]
    clients = []
    for cid, transport in enumerate(transports):
        client = Client(server, cid + 1)
        client.connection_made(transport)  # type: ignore[arg-type]
        client.data_received(connect(True))
        clients.append(client)
    return server, js, transports, clients


async def fetched(store: Path, plan: Any) -> tuple[dict[str, Any], list[bytes]]:
    """Serve one run: create, fill and fetch, then feed the plan's reads; the result."""
    random.seed(3)
    server, js, transports, clients = await served(store)
    pub, other = clients
    create = b'{"name":"S","subjects":["s.>"]}'
    durable = b'{"stream_name":"S","config":{"durable_name":"C","ack_policy":"explicit"}}'
    pub.data_received(b"SUB 1 1\r\nSUB r.> 2\r\n")
    pub.data_received(b"PUB $JS.API.STREAM.CREATE.S r.1 %d\r\n%b\r\n" % (len(create), create))
    await poll_async(lambda: js.streams.get("S") is not None, "stream S", 10, interval=0.005)
    pub.data_received(b"PUB $JS.API.CONSUMER.CREATE.S.C r.2 %d\r\n%b\r\n" % (len(durable), durable))
    for n in range(COUNT):
        pub.data_received(b"PUB s.%d 1\r\n%d\r\n" % (n, n % 10))
    stream = js.streams["S"]
    await poll_async(
        lambda: stream.committed_seq == COUNT, "12 messages committed", 10, interval=0.005
    )
    pub.data_received(b'PUB $JS.API.CONSUMER.MSG.NEXT.S.C 1 12\r\n{"batch":12}\r\n')
    out = transports[0].out
    await poll_async(lambda: len(ACK.findall(out)) == COUNT, "12 deliveries", 10, interval=0.005)
    acks = ACK.findall(out)
    for t in transports:
        del t.out[:]
    before = (server.in_msgs, server.out_msgs)  # bytes: advisories carry timestamps
    for cid, data in plan(acks):
        clients[cid].data_received(data)
        await settle()
    runner = js.consumers._consumer("S", "C")
    c = runner.consumer
    state = {
        "pending": sorted(c.pending),
        "floor": (c.adflr, c.asflr),
        "redelivered": dict(c.redelivered),
        "queued": list(c._rdq),
        "counts": [(x.in_msgs, x.in_bytes, x.out_msgs) for x in clients],
        "server": (server.in_msgs - before[0], server.out_msgs - before[1]),
    }
    await js.stop()
    for client in (pub, other):
        client.close_with("done")
    return state, [STAMP.sub(rb"\1T", bytes(t.out)) for t in transports]


@st.composite
def plans(draw: st.DrawFn) -> Any:
    """Acks of random kinds and order, core traffic and interest changes between them."""
    order = draw(st.permutations(range(COUNT)))
    steps = []
    for n in order[: draw(st.integers(0, COUNT))]:
        steps.append(("ack", n, draw(BODY), draw(st.sampled_from([b"", b"", b" r.a"]))))
        if draw(st.integers(0, 5)) == 0:
            steps.append(("core", n, b"", b""))
        if draw(st.integers(0, 8)) == 0:  # an inbox keeps the consumer's sink, acks not
            steps.append(("sub", n, draw(st.sampled_from([b"core.>", b"$JS.ACK.S.>"])), b""))
    cuts = draw(st.lists(st.integers(0), max_size=6))

    def plan(acks: list[bytes]) -> list[tuple[int, bytes]]:
        out = []
        for kind, n, body, reply in steps:
            if kind == "ack":
                out.append(b"PUB %b%b %d\r\n%b\r\n" % (acks[n], reply, len(body), body))
            elif kind == "core":
                out.append(b"PUB core.%d 2\r\nhi\r\n" % n)
            else:
                out.append(b"SUB %b %d\r\n" % (body, 100 + n))
        data = b"".join(out)
        return [(1, b"SUB core.> 9\r\n"), *((0, chunk) for chunk in chunks(data, cuts))]

    return plan


def both(tmp: Path, plan: Any) -> tuple[Any, Any]:
    run = itertools.count()
    compiled = asyncio.run(fetched(tmp / str(next(run)), plan))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fast, "native", None)
        pure = asyncio.run(fetched(tmp / str(next(run)), plan))
    return compiled, pure


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plans())
def test_acks_leave_the_same_consumer_and_bytes(tmp_path_factory: Any, plan: Any) -> None:
    compiled, pure = both(tmp_path_factory.mktemp("acks"), plan)
    assert compiled == pure


def test_plain_acks_reach_the_consumer_as_runs(tmp_path: Path, monkeypatch: Any) -> None:
    """The property would hold with the runs never used: prove they are, and settle acks."""
    runs: list[int] = []
    real = Client._on_acks

    def counted(self: Client, run: Any) -> None:
        runs.append(len(run.seqs) // 3)
        real(self, run)

    monkeypatch.setattr(Client, "_on_acks", counted)

    def plan(acks: list[bytes]) -> list[tuple[int, bytes]]:
        first, *rest = (b"PUB %b 4\r\n+ACK\r\n" % a for a in acks)
        return [(0, first), (0, b"".join(rest))]

    state, _ = asyncio.run(fetched(tmp_path, plan))
    assert state["pending"] == [] and state["floor"] == (COUNT, COUNT)
    assert runs == [COUNT - 1]  # Python routes the first, which teaches the codec the sink
    assert state["counts"][0][0] >= COUNT  # counted as the PUBs they are


def test_an_inbox_keeps_the_consumers_sinks_and_an_ack_wildcard_drops_them() -> None:
    """Every fetch subscribes an inbox: that must not unlearn the consumer's acks, while a
    subscription that can match acks must (its subscriber gets them too)."""
    sublist: Sublist[str] = Sublist()
    routes: Any = sublist.routes
    routes.learn_acks(b"$JS.ACK.S.C.", object())
    sublist.insert("_INBOX.x.*", None, "inbox")
    sublist.remove("_INBOX.x.*", None, "inbox")
    assert b"$JS.ACK.S.C." in routes
    sublist.insert("*.ACK.>", None, "tap")
    assert b"$JS.ACK.S.C." not in routes
