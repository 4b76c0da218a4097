"""A stream's publishes through the compiled codec's runs against the pure path.

The same server, JetStream on, fed the same bytes with the extension and without it
(`fast.native` None, as with `JETLAKE_NATIVE=0`): random publishes to the stream (with
and without a reply, with headers, duplicates by `Nats-Msg-Id`, over a `discard: new`
limit), core PUBs and SUB/UNSUBs that make the stream's subject shared or sole again,
split at random places, must store the same messages and answer every connection with
the same messages. No sockets: the transports record what the server writes.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.parser import fast
from ingest.server.client import Client
from tests.server.test_fast_acks import served
from tests.server.test_fast_routing import chunks, settle
from tests.support.poll import poll_async

FRAME = re.compile(rb"(H?MSG) (\S+) (\d+) (?:(\S+) )?(?:(\d+) )?(\d+)\r\n")


def frames(sent: bytes) -> list[tuple[bytes, ...]]:
    """The messages in what a connection was sent, sorted: a refusal is answered when the
    rules run and a PubAck when its batch commits, so their order depends on where the
    reads were cut (on either path), while the set does not."""
    out = []
    pos = 0
    while (m := FRAME.search(sent, pos)) is not None:
        kind, subject, sid, reply, _, total = m.groups()
        end = m.end() + int(total)
        out.append((kind, subject, sid, reply or b"", sent[m.end() : end]))
        pos = end + 2
    return sorted(out)


async def published(store: Path, rules: bytes, plan: list[tuple[int, bytes]]) -> dict[str, Any]:
    """Serve one run: create the stream, feed the plan's reads, wait for every commit."""
    server, js, transports, clients = await served(store)
    create = b'{"name":"S","subjects":["s.>"]%b}' % rules
    clients[0].data_received(b"SUB r.> 1\r\n")
    clients[0].data_received(
        b"PUB $JS.API.STREAM.CREATE.S r.0 %d\r\n%b\r\n" % (len(create), create)
    )
    await poll_async(lambda: js.streams.get("S") is not None, "stream S", 10, interval=0.005)
    stream = js.streams["S"]
    await settle()
    del transports[0].out[:]  # the create response carries a timestamp
    before = (server.in_msgs, server.in_bytes, server.out_msgs, server.out_bytes)
    for cid, data in plan:
        clients[cid].data_received(data)
        await settle()
    await poll_async(
        lambda: stream.committed_seq == stream.proposed.last_seq, "every commit", 10, interval=0.005
    )
    await settle()
    last = stream.committed_seq
    stored = [stream.store.load(seq) for seq in range(1, last + 1)]
    result = {
        "stored": [(m.seq, m.subject, m.hdr, m.data) for m in stored if m is not None],
        "sent": [frames(bytes(t.out)) for t in transports],
        "counts": [(c.in_msgs, c.in_bytes) for c in clients],
        "server": [
            now - then
            for now, then in zip(
                (server.in_msgs, server.in_bytes, server.out_msgs, server.out_bytes),
                before,
                strict=True,
            )
        ],
    }
    await js.stop()
    for client in clients:
        client.close_with("done")
    return result


@st.composite
def plans(draw: st.DrawFn) -> list[tuple[int, bytes]]:
    """Publishes of every kind, core traffic and interest changes, cut into reads."""
    out: list[bytes] = []
    for n in range(draw(st.integers(1, 40))):
        kind = draw(st.integers(0, 12))
        subject = draw(st.sampled_from([b"s.1", b"s.1", b"s.2"]))
        reply = draw(st.sampled_from([b" r.%d" % n, b" r.%d" % n, b""]))
        body = b"m%d" % n
        if kind == 0:
            out.append(b"PUB core.%d 2\r\nhi\r\n" % n)
        elif kind == 1:
            out.append(draw(st.sampled_from([b"SUB s.1 7\r\n", b"UNSUB 7\r\n", b"SUB s.* 8\r\n"])))
        elif kind == 2:
            hdr = b"NATS/1.0\r\nNats-Msg-Id: d%d\r\n\r\n" % draw(st.integers(0, 2))
            size = len(hdr) + len(body)
            out.append(b"HPUB %b%b %d %d\r\n%b%b\r\n" % (subject, reply, len(hdr), size, hdr, body))
        else:
            out.append(b"PUB %b%b %d\r\n%b\r\n" % (subject, reply, len(body), body))
    cuts = draw(st.lists(st.integers(0), max_size=6))
    return [(1, b"SUB s.2 9\r\n"), *((0, chunk) for chunk in chunks(b"".join(out), cuts))]


def both(tmp: Path, rules: bytes, plan: list[tuple[int, bytes]]) -> tuple[Any, Any]:
    run = itertools.count()
    compiled = asyncio.run(published(tmp / str(next(run)), rules, plan))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fast, "native", None)
        pure = asyncio.run(published(tmp / str(next(run)), rules, plan))
    return compiled, pure


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.sampled_from([b"", b',"max_msgs":12,"discard":"new"', b',"no_ack":true']), plans())
def test_publishes_store_and_answer_the_same(
    tmp_path_factory: Any, rules: bytes, plan: list[tuple[int, bytes]]
) -> None:
    compiled, pure = both(tmp_path_factory.mktemp("intake"), rules, plan)
    assert compiled == pure


def test_plain_publishes_reach_the_stream_as_runs(tmp_path: Path, monkeypatch: Any) -> None:
    """The property would hold with the runs never used: prove they are, and answer each."""
    runs: list[int] = []
    real = Client._on_pubs

    def counted(self: Client, run: Any) -> None:
        runs.append(len(run.payloads))
        real(self, run)

    monkeypatch.setattr(Client, "_on_pubs", counted)
    first, second, *rest = (b"PUB s.1 r.%d 1\r\n%d\r\n" % (n, n % 10) for n in range(20))
    plan = [(0, first), (0, second), (0, b"".join(rest))]
    result = asyncio.run(published(tmp_path, b"", plan))
    assert runs == [1, 18]  # Python routes the first; the stream alone takes `s.<token>`
    assert [m[0] for m in result["stored"]] == list(range(1, 21))
    acks = [f for f in result["sent"][0] if f[1].startswith(b"r.")]
    assert sorted(a[4] for a in acks) == sorted(
        b'{"stream":"S","seq":%d}' % n for n in range(1, 21)
    )
    assert result["counts"][0][0] >= 20  # counted as the PUBs they are


def test_subjects_seen_once_reach_the_stream_as_runs(tmp_path: Path, monkeypatch: Any) -> None:
    """A KV bucket's puts: every subject new, each `s.<token>` the stream's alone. After the
    first, Python never routes them, until a subscription to one of them shares it."""
    runs: list[bytes] = []
    real = Client._on_pubs

    def counted(self: Client, run: Any) -> None:
        runs.append(run.subject)
        real(self, run)

    monkeypatch.setattr(Client, "_on_pubs", counted)
    keys = [b"PUB s.k%d r.%d 1\r\n%d\r\n" % (n, n, n % 10) for n in range(12)]
    plan = [(0, keys[0]), (0, b"".join(keys[1:6])), (1, b"SUB s.k7 3\r\n"), (0, b"".join(keys[6:]))]
    result = asyncio.run(published(tmp_path, b"", plan))
    assert runs == [b"s.k%d" % n for n in (1, 2, 3, 4, 5)]  # a SUB makes Python route again
    assert [(m[0], m[1]) for m in result["stored"]] == [(n + 1, f"s.k{n}") for n in range(12)]
    assert [f[1] for f in result["sent"][1] if f[1].startswith(b"s.")] == [b"s.k7"]
    acks = [f for f in result["sent"][0] if f[1].startswith(b"r.")]
    assert len(acks) == 12


def test_a_no_ack_stream_stores_a_run_without_answering(tmp_path: Path) -> None:
    first, second, *rest = (b"PUB s.1 r.%d 1\r\n%d\r\n" % (n, n % 10) for n in range(20))
    plan = [(0, first), (0, second), (0, b"".join(rest))]
    result = asyncio.run(published(tmp_path, b',"no_ack":true', plan))
    assert [m[0] for m in result["stored"]] == list(range(1, 21))
    assert result["sent"][0] == []
