"""The server's own publishes to reply inboxes, framed by the compiled table, against the
pure path.

A message JetStream or a service publishes (a PubAck, an API response) goes to a
subject whose last token is one-off; once the sublist's walk showed that every
subject of that prefix and one more token goes to the same plain client
subscriptions, `Routes.deliver_tail` frames it without a match. Random subscription
sets (wildcards, queue groups, auto-unsubscribe limits, literal children beside a
`*`) and random internal publishes, alone or in runs (`Server.replies`, a stream run's
PubAcks), with SUB/UNSUB between them, must send every connection the same bytes and
move the same counters with the extension as without.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.parser import fast
from ingest.server.client import Client
from ingest.server.options import parse_serve_args
from ingest.server.server import Server
from tests.server.test_fast_routing import Transport, connect, settle, subscriptions

PREFIX = st.sampled_from(["a", "b", "a.b", "_INBOX.x"])
LAST = st.sampled_from(["1", "2", "b", "x9", "*", ">", ""]) | st.integers(10, 99).map(str)


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for i in range(draw(st.integers(1, 30))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            out.append(("read", (draw(st.integers(0, 2)), draw(subscriptions(200 + i * 5)))))
        elif kind == 1:
            out.append(
                ("read", (draw(st.integers(0, 2)), b"UNSUB %d\r\n" % draw(st.integers(1, 30))))
            )
        elif kind == 2:  # a stream run's PubAcks: framed together up to one Python routes
            size = draw(st.integers(1, 5))
            subjects = [f"{draw(PREFIX)}.{draw(LAST)}".encode() for _ in range(size)]
            out.append(("replies", [(s, b"%d.%d" % (i, n)) for n, s in enumerate(subjects)]))
        else:
            subject = f"{draw(PREFIX)}.{draw(LAST)}"
            hdr = b"NATS/1.0\r\nK: %d\r\n\r\n" % i if draw(st.booleans()) else None
            out.append(("publish", (subject, draw(st.sampled_from([None, "r.1"])), hdr, b"%d" % i)))
    return out


async def serve(setup: list[bytes], plan: list[tuple[str, Any]]) -> dict[str, Any]:
    random.seed(5)  # queue groups pick the same members on both paths
    server = Server(parse_serve_args([]))
    server._loop = asyncio.get_running_loop()
    transports = [Transport() for _ in range(3)]
    clients = []
    for cid, transport in enumerate(transports):
        client = Client(server, cid + 1)
        client.connection_made(transport)  # type: ignore[arg-type]
        del transport.out[:]
        client.data_received(connect(cid != 1))
        client.data_received(setup[cid])
        clients.append(client)
    await settle()
    for kind, arg in plan:
        if kind == "read":
            clients[arg[0]].data_received(arg[1])
        elif kind == "replies":
            server.replies(arg)
        else:
            server.publish(*arg)
        await settle()
    subs = [(c.cid, sid, s.delivered) for c in clients for sid, s in sorted(c.subs.items())]
    result = {
        "sent": [bytes(t.out) for t in transports],
        "subs": subs,
        "clients": [(c.out_msgs, c.out_bytes) for c in clients],
        "server": (server.in_msgs, server.in_bytes, server.out_msgs, server.out_bytes),
    }
    for client in clients:
        client.close_with("done")
    return result


def both(setup: list[bytes], plan: list[tuple[str, Any]]) -> tuple[Any, Any]:
    compiled = asyncio.run(serve(setup, plan))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fast, "native", None)
        pure = asyncio.run(serve(setup, plan))
    return compiled, pure


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_same_bytes_for_the_servers_own_publishes(data: st.DataObject) -> None:
    setup = [data.draw(subscriptions(1 + cid * 10)) for cid in range(3)]
    setup[0] += b"SUB _INBOX.x.* 99\r\n"  # a requester's inbox, as every client has
    compiled, pure = both(setup, data.draw(steps()))
    assert compiled == pure


def test_an_inbox_learnt_once_takes_every_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    """The property would hold with the table never used: prove replies skip the match."""
    plan = [("publish", (f"_INBOX.x.{n}", None, None, b"ok")) for n in range(5)]
    compiled, pure = both([b"SUB _INBOX.x.* 1\r\n", b"", b""], plan)
    assert compiled == pure
    assert compiled["sent"][0].count(b"MSG _INBOX.x.") == 5

    async def matched() -> int:
        server = Server(parse_serve_args([]))
        server._loop = asyncio.get_running_loop()
        client = Client(server, 1)
        client.connection_made(Transport())  # type: ignore[arg-type]
        client.data_received(connect(True) + b"SUB _INBOX.x.* 1\r\n")
        await settle()
        walks = 0
        real = server.sublist._collect

        def counted(*args: Any) -> Any:
            nonlocal walks
            walks += 1
            return real(*args)

        monkeypatch.setattr(server.sublist, "_collect", counted)
        for _, arg in plan:
            server.publish(*arg)
        return server.sublist.matches, walks

    matches, walks = asyncio.run(matched())
    assert (matches, walks) == (5, 1)  # one walk teaches the prefix; the rest skip match()
