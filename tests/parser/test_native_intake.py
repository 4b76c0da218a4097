"""The compiled codec's stream runs against the PUBs the pure codec reads from the same bytes.

A PUB without headers to a subject `Routes` learnt as a stream's intake must come out in a
`PubRun` (its reply and payload, in order) when it comes before the read's first
operation for Python other than a PING or PONG: runs follow one another from the read's
start, each taking what goes where it goes (the same intake and subject, or the same
consumer's plain acks). Acks also run past an UNSUB, which takes no receiver of theirs.
Every other operation must come out as the pure codec gives it, in the same order. The
model below is that rule.
"""

from __future__ import annotations

import jetlake_native
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.parser import nats
from tests.parser.test_native_acks import PREFIX, connected, operation, read_both
from tests.parser.test_native_acks import gathered as ack_seqs

INTAKES = {b"s.a": "A", b"s.b": "B", b"t": "A"}  # subject -> which stream takes it
TAIL = b"k"  # every `k.<token>` goes to stream B (a KV bucket's keys) but `k.slow`
SLOW = b"k.slow"  # learnt on its own: Python routes it
SUBJECT = st.sampled_from(
    [
        *INTAKES,
        b"s.c",
        b"s.*",
        PREFIX + b"1.2.3.4.5",
        b"k.x",
        b"k.y",
        b"k.*",
        b"k.>",
        SLOW,
        b"k.x.y",
    ]
)
BODY = st.sampled_from([b"", b"x", b"+ACK", b"hello world", b"\r\n\r\n"])


OPERATION = operation(SUBJECT, st.sampled_from([b"", b" _INBOX.r.1", b" _INBOX.r.2"]), BODY)


def stream_of(subject: bytes) -> str | None:
    """Which stream's intake takes the subject: its own entry, else its prefix's."""
    if subject in INTAKES:
        return INTAKES[subject]
    prefix, _, last = subject.rpartition(b".")
    return "B" if prefix == TAIL and subject != SLOW and last not in (b"*", b">") else None


def target(op: nats.Op) -> tuple[str, ...] | None:
    """Where a run would take the operation, or None if it is never gathered."""
    if type(op) is not nats.Pub or op.hdr is not None:
        return None
    stream = stream_of(op.subject)
    if stream is not None:
        return ("pub", stream, op.subject.decode())
    return ("ack", "C") if ack_seqs(op) else None


def expected(ops: list[nats.Op]) -> list[object]:
    out: list[object] = []
    open_ = acks_open = True
    for op in ops:
        where = target(op)
        if where is not None and not (open_ if where[0] == "pub" else acks_open):
            where = None
        if where is not None:
            if where[0] == "pub":
                out.append(("pub", op.subject, op.reply, op.payload))  # type: ignore[union-attr]
            else:
                out.append(("ack", *ack_seqs(op)))  # type: ignore[misc]
            continue
        open_ = open_ and type(op) in (nats.Ping, nats.Pong)
        acks_open = acks_open and type(op) in (nats.Ping, nats.Pong, nats.Unsub)
        out.append(op)
    return out


def observed(ops: list[object], sinks: dict[str, object]) -> list[object]:
    out: list[object] = []
    last: object = None  # where the run just before went
    for i, op in enumerate(ops):
        if type(op) in (jetlake_native.PubRun, jetlake_native.AckRun):
            before = (jetlake_native.PubRun, jetlake_native.AckRun, nats.Ping, nats.Pong)
            if type(op) is jetlake_native.AckRun:
                before += (nats.Unsub,)
            assert all(type(o) in before for o in ops[:i])
            where = (op.sink, getattr(op, "subject", None))
            assert where != last, "a run split where it should have gone on"
            last = where
        if type(op) is jetlake_native.PubRun:
            assert op.sink is sinks[stream_of(op.subject) or ""]
            assert op.payloads and len(op.replies) == len(op.payloads)
            assert op.size == sum(len(p) for p in op.payloads)
            out += [("pub", op.subject, r, p) for r, p in zip(op.replies, op.payloads, strict=True)]
        elif type(op) is jetlake_native.AckRun:
            assert op.sink is sinks["C"]
            out += [("ack", *op.seqs[i : i + 3]) for i in range(0, len(op.seqs), 3)]
        else:
            out.append(op)
            last = None
    return out


def codecs() -> tuple[nats.ServerCodec, object, dict[str, object]]:
    routes = jetlake_native.Routes()
    sinks = {"A": object(), "B": object(), "C": object()}
    for subject, stream in INTAKES.items():
        routes.learn_intake(subject, sinks[stream])
    routes.learn_intake_tail(TAIL, sinks["B"])
    routes.learn(SLOW, None)
    routes.learn_acks(PREFIX, sinks["C"])
    return *connected(routes), sinks


@settings(max_examples=1000)
@given(st.lists(OPERATION, max_size=20).map(b"".join), st.lists(st.integers(0), max_size=5))
def test_pubs_gathered_exactly_where_the_stream_would_take_them(
    data: bytes, cuts: list[int]
) -> None:
    pure, compiled, sinks = codecs()
    reads_pure, reads_compiled = read_both(pure, compiled, data, cuts)
    assert [observed(r, sinks) for r in reads_compiled] == [expected(r) for r in reads_pure]


def test_runs_follow_one_another_until_an_operation_for_python() -> None:
    _, compiled, sinks = codecs()
    pubs = b"PUB s.a _INBOX.r.1 2\r\nhi\r\nPUB s.a 0\r\n\r\nPUB s.a _INBOX.r.3 1\r\nx\r\n"
    data = pubs + b"PUB s.b 1\r\ny\r\n" + pubs + b"PUB s.c 0\r\n\r\n" + pubs
    ops = compiled.receive(data)  # type: ignore[attr-defined]
    assert [type(op) for op in ops] == [*[jetlake_native.PubRun] * 3, *[nats.Pub] * 4]
    for run in (ops[0], ops[2]):
        assert (run.sink, run.subject, run.size) == (sinks["A"], b"s.a", 3)
        assert run.replies == [b"_INBOX.r.1", b"", b"_INBOX.r.3"]
        assert run.payloads == [b"hi", b"", b"x"]
    assert (ops[1].sink, ops[1].subject, ops[1].payloads) == (sinks["B"], b"s.b", [b"y"])
    assert [op.subject for op in ops[3:]] == [b"s.c", b"s.a", b"s.a", b"s.a"]


def test_forgotten_with_the_routes() -> None:
    """Any SUB or UNSUB clears the table: the next PUB is Python's to route again."""
    _, compiled, _ = codecs()
    routes = jetlake_native.Routes()
    routes.learn_intake(b"s.a", object())
    routes.learn_intake_tail(TAIL, object())
    assert b"s.a" in routes and TAIL in routes
    routes.clear(acks=False)
    assert b"s.a" not in routes and TAIL not in routes
    compiled.route_with(routes, False)  # type: ignore[attr-defined]
    ops = compiled.receive(b"PUB s.a 1\r\nx\r\nPUB k.x 1\r\ny\r\n")  # type: ignore[attr-defined]
    assert [type(op) for op in ops] == [nats.Pub, nats.Pub]
