"""The compiled codec's ack runs against the PUBs the pure codec reads from the same bytes.

A plain ack to a consumer whose sink `Routes` learnt, before any other operation in
its read but a PING, PONG or UNSUB, must come out as part of an `AckRun` with the
numbers the consumer's own parse (`Runner._on_ack`) reads from the subject; every other
operation must come out as the pure codec gives it, in the same order. The model below
is the rule the Rust code implements, written from what the Python path does with such
a PUB.
"""

from __future__ import annotations

import itertools
from typing import Any

import jetlake_native
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.parser import nats

PREFIX = b"$JS.ACK.S.C."
NUMBER = st.integers(0, 10**20).map(lambda n: str(n).encode())
TOKEN = NUMBER | st.sampled_from([b"007", b"+5", b"", b"x", b"1_0", b"\xd9\xa3", b"*", b">"])
SUBJECT = st.lists(TOKEN, min_size=3, max_size=7).map(
    lambda t: PREFIX + b".".join(t)
) | st.sampled_from([b"$JS.ACK.S.D.1.2.3.4.5", b"$JS.ACK.S.1.2.3.4", b"$JS.ACK.S", b"a.b"])
BODY = st.sampled_from([b"", b"+ACK", b"+OK", b"+NAK", b" +ACK", b"-NAK", b"+ACK\n"])


REPLY = st.sampled_from([b"", b"", b"", b" _INBOX.r"])


@st.composite
def operation(
    draw: st.DrawFn,
    subjects: st.SearchStrategy[bytes] = SUBJECT,
    replies: st.SearchStrategy[bytes] = REPLY,
    bodies: st.SearchStrategy[bytes] = BODY,
) -> bytes:
    """A PUB, HPUB, PING, SUB or UNSUB, as a client sends it."""
    subject = draw(subjects)
    reply = draw(replies)
    body = draw(bodies)
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return b"PING\r\n"
    if kind == 1:
        return b"SUB x 1\r\n"
    if kind == 3:
        return b"UNSUB 1\r\n"
    if kind == 2:
        hdr = b"NATS/1.0\r\n\r\n"
        size = len(hdr) + len(body)
        return b"HPUB %b%b %d %d\r\n%b%b\r\n" % (subject, reply, len(hdr), size, hdr, body)
    return b"PUB %b%b %d\r\n%b\r\n" % (subject, reply, len(body), body)


def gathered(op: nats.Op) -> tuple[int, int, int] | None:
    """The numbers of a PUB the codec must gather, or None where it must hand over the PUB."""
    if type(op) is not nats.Pub or op.hdr is not None or op.reply:
        return None
    if op.payload not in (b"", b"+ACK", b"+OK") or not op.subject.startswith(PREFIX):
        return None
    tokens = op.subject[len(PREFIX) :].split(b".")
    if len(tokens) < 5 or b"" in tokens:
        return None  # the sublist matches no subject with an empty token
    numbers = tokens[:3]
    if not all(t.isdigit() and len(t) <= 19 for t in numbers):
        return None  # Python's int() reads "+5" and "1_0"; the codec leaves them to it
    seqs = op.subject[len(PREFIX) :].split(b".", 4)  # as `Runner._on_ack` reads them
    return int(seqs[0]), int(seqs[1]), int(seqs[2])


def expected(ops: list[nats.Op]) -> list[object]:
    """What one read must give: acks are gathered only before its first other operation
    but a PING, PONG or UNSUB, which Python must run first (a SUB may add a receiver of
    acks; an UNSUB only takes one away, and never a consumer's sink)."""
    out: list[object] = []
    open_ = True
    for op in ops:
        seqs = gathered(op) if open_ else None
        out.append(("ack", *seqs) if seqs else op)
        open_ = open_ and (seqs is not None or type(op) in (nats.Ping, nats.Pong, nats.Unsub))
    return out


def observed(ops: list[object], sink: object) -> list[object]:
    out: list[object] = []
    for op in ops:
        if type(op) is jetlake_native.AckRun:
            assert op.sink is sink
            assert op.seqs, "an empty run"
            out += [("ack", *op.seqs[i : i + 3]) for i in range(0, len(op.seqs), 3)]
        else:
            out.append(op)
    return out


def sizes(ops: list[nats.Op]) -> int:
    pairs = zip(ops, expected(ops), strict=True)
    return sum(len(op.payload) for op, e in pairs if type(e) is tuple)  # type: ignore[union-attr]


def feed(codec: object, data: bytes, cuts: list[int]) -> list[list[object]]:
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    return [codec.receive(data[a:b]) for a, b in itertools.pairwise(bounds)]  # type: ignore[attr-defined]


def read_both(pure: object, compiled: object, data: bytes, cuts: list[int]) -> list[Any]:
    """Each codec's operations, read by read, from the same bytes cut the same way."""
    return [feed(codec, data, cuts) for codec in (pure, compiled)]


def connected(routes: object) -> tuple[nats.ServerCodec, object]:
    """A pure codec and a compiled one routing through `routes`, both past CONNECT."""
    connect = b'CONNECT {"headers":true,"verbose":false,"pedantic":false}\r\n'
    pure = nats.ServerCodec()
    compiled = jetlake_native.ServerCodec(nats.ServerCodec(), nats)
    compiled.route_with(routes, False)
    pure.receive(connect)
    compiled.receive(connect)
    return pure, compiled


def codecs() -> tuple[nats.ServerCodec, object, object]:
    routes = jetlake_native.Routes()
    sink = object()
    routes.learn_acks(PREFIX, sink)
    return *connected(routes), sink


@settings(max_examples=1000)
@given(st.lists(operation(), max_size=20).map(b"".join), st.lists(st.integers(0), max_size=5))
def test_acks_gathered_exactly_where_the_consumer_would_take_them(
    data: bytes, cuts: list[int]
) -> None:
    pure, compiled, sink = codecs()
    reads_pure, reads_compiled = read_both(pure, compiled, data, cuts)
    assert [observed(r, sink) for r in reads_compiled] == [expected(r) for r in reads_pure]
    runs = [op for r in reads_compiled for op in r if type(op) is jetlake_native.AckRun]
    assert sum(run.size for run in runs) == sum(sizes(r) for r in reads_pure)


def test_consecutive_acks_are_one_run_and_others_keep_their_place() -> None:
    _, compiled, _ = codecs()
    acks = b"".join(b"PUB $JS.ACK.S.C.1.%d.%d.0.0 4\r\n+ACK\r\n" % (n, n) for n in (1, 2, 3))
    data = acks + b"PING\r\n" + acks.replace(b"+ACK", b"+OK ")
    ops = compiled.receive(data)  # type: ignore[attr-defined]
    assert [type(op) for op in ops] == [
        jetlake_native.AckRun,
        nats.Ping,
        nats.Pub,
        nats.Pub,
        nats.Pub,
    ]
    assert ops[0].seqs == [1, 1, 1, 1, 2, 2, 1, 3, 3]
    assert ops[0].size == 12


def test_acks_after_an_unsub_are_still_gathered_but_a_publish_after_it_is_pythons() -> None:
    """A fetching client unsubscribes its batch's inbox before it acks the batch's last
    messages: those acks stay a run. PUBs to a stream's intake do not run past it (the
    UNSUB may take away a receiver the table frames for)."""
    routes = jetlake_native.Routes()
    sink, intake = object(), object()
    routes.learn_acks(PREFIX, sink)
    routes.learn_intake(b"orders", intake)
    _, compiled = connected(routes)
    ack = b"PUB $JS.ACK.S.C.1.%d.%d.0.0 0\r\n\r\n"
    data = b"UNSUB 7\r\n" + ack % (1, 1) + b"PUB orders 1\r\nx\r\n" + ack % (2, 2)
    ops = compiled.receive(data)  # type: ignore[attr-defined]
    assert [type(op) for op in ops] == [nats.Unsub, jetlake_native.AckRun, nats.Pub, nats.Pub]
    assert ops[1].sink is sink and ops[1].seqs == [1, 1, 1]


def test_forgotten_with_the_routes() -> None:
    """Any SUB or UNSUB clears the table; the next ack is a PUB for Python to route again."""
    _, compiled, _ = codecs()
    compiled.route_with(None, False)  # type: ignore[attr-defined]
    routes = jetlake_native.Routes()
    routes.learn_acks(PREFIX, object())
    routes.clear()
    compiled.route_with(routes, False)  # type: ignore[attr-defined]
    ops = compiled.receive(b"PUB $JS.ACK.S.C.1.1.1.0.0 0\r\n\r\n")  # type: ignore[attr-defined]
    assert [type(op) for op in ops] == [nats.Pub]
