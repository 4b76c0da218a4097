"""The compiled codec (native/, Rust) against the pure one: same inputs, same ops and bytes.

`make` builds `jetlake_native`, so its absence fails here rather than skipping: the
server would silently run the slow path otherwise.
"""

from __future__ import annotations

import itertools

import jetlake_native
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.parser import fast, nats
from ingest.parser.outlet import Outlet

WS = st.sampled_from([b" ", b"  ", b"\t", b" \t ", b"\x0b", b"\x0c", b"\r"])
SIZE = st.sampled_from(
    [
        b"0",
        b"1",
        b"2",
        b"5",
        b"12",
        b"13",
        b"007",
        b"40",
        b"41",
        b"-1",
        b"+1",
        b"1x",
        b"",
        b"9" * 23,
    ]
) | st.integers(min_value=0, max_value=300).map(lambda n: str(n).encode())
WORD = st.sampled_from([b"foo", b"foo.bar", b"_INBOX.x", b"q", b"1", b"\xff\xfe", b"a" * 70])
VERBS = b"PUB pub Pub HPUB hpub SUB sub UNSUB unsub UNSUBX PING ping PONG PINGX INFO +OK +ok -ERR"
VERB = st.sampled_from([*VERBS.split(), b"FOO", b""])
CONNECT = st.sampled_from(
    [
        b'CONNECT {"headers":true}',
        b'connect {"headers":false,"verbose":false}',
        b'CONNECT {"no_responders":true}',
        b"CONNECT {bad",
        b"CONNECTX {}",
    ]
)
END = st.sampled_from([b"\r\n", b"\n", b"\r\n", b"\r\n"])


@st.composite
def pub(draw: st.DrawFn) -> bytes:
    """A PUB or HPUB line, arguments near the limits, then a payload of about its size."""
    verb = draw(st.sampled_from([b"PUB ", b"pub\t", b"HPUB ", b"hpub "]))
    args = [draw(WORD)]
    if draw(st.booleans()):
        args.append(draw(WORD))
    if verb.upper().startswith(b"H"):
        args.append(draw(SIZE))
    args.append(draw(SIZE))
    if draw(st.integers(0, 4)) == 0:
        args.append(draw(WORD | SIZE))
    text = verb + b"".join(draw(WS) + a for a in args)[1:] + draw(END)
    declared = args[-1].lstrip(b"0")
    size = int(declared) if declared.isdigit() and len(declared) < 4 else 0
    return text + b"p" * size + draw(st.sampled_from([b"\r\n", b"\r\n", b"", b"x\r\n"]))


@st.composite
def line(draw: st.DrawFn) -> bytes:
    """A control line, well-formed or not, sometimes followed by a payload of some size."""
    if draw(st.integers(0, 9)) == 0:
        return draw(CONNECT) + draw(END)
    parts = [draw(VERB)]
    for _ in range(draw(st.integers(0, 4))):
        parts += [draw(WS), draw(WORD | SIZE)]
    text = b"".join(parts) + draw(END)
    if draw(st.booleans()):
        body = draw(st.binary(max_size=20)) + draw(st.sampled_from([b"\r\n", b"", b"\r", b"x"]))
        text += body
    return text


STREAM = st.lists(pub() | line() | st.binary(max_size=12), max_size=12).map(b"".join)


def both(**limits: int) -> tuple[nats.ServerCodec, nats.ServerCodec]:
    pure = nats.ServerCodec(**limits)
    compiled = jetlake_native.ServerCodec(nats.ServerCodec(**limits), nats)
    return pure, compiled


def feed(codec: nats.ServerCodec, data: bytes, cuts: list[int]) -> list[list[nats.Op]]:
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    return [codec.receive(data[a:b]) for a, b in itertools.pairwise(bounds)]


@settings(max_examples=1500)
@given(STREAM, st.lists(st.integers(min_value=0), max_size=5), st.sampled_from([12, 40, 4096]))
def test_same_ops_for_any_protocol_like_stream(data: bytes, cuts: list[int], limit: int) -> None:
    pure, compiled = both(max_control_line=limit, max_payload=limit)
    assert feed(compiled, data, cuts) == feed(pure, data, cuts)
    assert compiled.headers == pure.headers


@settings(max_examples=500)
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_same_ops_for_any_bytes(chunks: list[bytes]) -> None:
    pure, compiled = both(max_control_line=128, max_payload=256)
    for chunk in chunks:
        assert compiled.receive(chunk) == pure.receive(chunk)


def test_a_payload_split_byte_by_byte() -> None:
    data = b'CONNECT {"headers":true}\r\nHPUB a r 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPUB b 3\r\nabc\r\n'
    pure, compiled = both()
    expected = pure.receive(data)
    got = [op for i in range(len(data)) for op in compiled.receive(data[i : i + 1])]
    assert got == expected
    assert [type(op) for op in got] == [nats.Connect, nats.Pub, nats.Pub]


def test_headers_set_from_outside_reach_the_reference() -> None:
    _, compiled = both()
    compiled.headers = True
    assert compiled.receive(b"HPUB a 12 12\r\nNATS/1.0\r\n\r\n\r\n") == [
        nats.Pub(b"a", b"", b"NATS/1.0\r\n\r\n", b"")
    ]


@settings(max_examples=500)
@given(WORD, WORD, st.sampled_from([b"", b"_INBOX.r"]), st.binary(max_size=40), st.binary())
def test_same_msg_framing(
    subject: bytes, sid: bytes, reply: bytes, hdr: bytes, payload: bytes
) -> None:
    assert jetlake_native.encode_msg(subject, sid, reply, payload) == nats.encode_msg(
        subject, sid, reply, payload
    )
    assert jetlake_native.encode_hmsg(subject, sid, reply, hdr, payload) == nats.encode_hmsg(
        subject, sid, reply, hdr, payload
    )


def test_other_buffers_frame_as_the_reference_frames_them() -> None:
    args = (b"a", bytearray(b"1"), memoryview(b"r"), b"NATS/1.0\r\n\r\n", bytearray(b"xy"))
    assert jetlake_native.encode_hmsg(*args) == nats.encode_hmsg(*args)
    assert jetlake_native.encode_msg(*args[:3], args[4]) == nats.encode_msg(*args[:3], args[4])


def test_the_server_uses_the_compiled_path() -> None:
    assert fast.native is jetlake_native
    assert type(fast.server_codec(max_control_line=4096, max_payload=1024)) is (
        jetlake_native.ServerCodec
    )


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(
            WORD, WORD, st.sampled_from([b"", b"_INBOX.r"]), st.none() | st.binary(max_size=30)
        )
        | st.binary(max_size=20),
        max_size=8,
    ),
    st.booleans(),
)
def test_outlets_queue_the_same_bytes(writes: list[object], headers: bool) -> None:
    """The compiled output buffer against `outlet.Outlet`: same bytes, counts and dirtiness."""
    pure, compiled = Outlet(), jetlake_native.Outlet()
    pure.headers = compiled.headers = headers
    for item in writes:
        if isinstance(item, bytes):
            assert compiled.write(item) == pure.write(item)
        else:
            subject, sid, reply, hdr = item
            payload = memoryview(b"payload")  # any buffer, as the reference takes
            assert compiled.msg(subject, sid, reply, hdr, payload) == pure.msg(
                subject, sid, reply, hdr, payload
            )
    assert len(compiled) == len(pure)
    assert (compiled.msgs, compiled.bytes) == (pure.msgs, pure.bytes)
    assert compiled.take() == pure.take()
    assert compiled.write(b"+OK\r\n") and pure.write(b"+OK\r\n")  # clean again after take


NUMBER = st.integers(min_value=0, max_value=2**63 - 1) | st.integers(
    min_value=-(2**63), max_value=-1
)


@settings(max_examples=300)
@given(
    st.lists(
        st.lists(
            st.tuples(
                WORD,
                st.none() | st.binary(max_size=30),
                st.binary(max_size=40),
                NUMBER,
                NUMBER,
                NUMBER,
                NUMBER,
                NUMBER,
            ),
            max_size=6,
        )
        | st.binary(max_size=20),
        max_size=6,
    ),
    st.sampled_from([b"$JS.ACK.S.c.", b"$JS.ACK.\xff.c.", b""]),
    st.booleans(),
)
def test_runs_frame_as_single_deliveries(items: list[object], prefix: bytes, headers: bool) -> None:
    """A consumer's run (JetStream deliveries whose `$JS.ACK` replies the outlet spells) in
    one call: compiled and pure outlets agree, and both equal framing each message alone."""
    pure, compiled, one_by_one = Outlet(), jetlake_native.Outlet(), Outlet()
    pure.headers = compiled.headers = one_by_one.headers = headers
    for item in items:
        if isinstance(item, bytes):
            assert compiled.write(item) == pure.write(item) == one_by_one.write(item)
            continue
        assert isinstance(item, list)
        size = sum(len(d) + len(h or b"") for _, h, d, *_ in item)
        clean = bool(item) and not pure.dirty
        assert compiled.run(b"7", prefix, item) == pure.run(b"7", prefix, item) == (clean, size)
        for subject, hdr, data, a, b, c, d, e in item:
            reply = prefix + b".".join(b"%d" % n for n in (a, b, c, d, e))
            one_by_one.msg(subject, b"7", reply, hdr, data)
    assert (compiled.msgs, compiled.bytes) == (pure.msgs, pure.bytes)
    assert (pure.msgs, pure.bytes) == (one_by_one.msgs, one_by_one.bytes)
    assert compiled.take() == pure.take() == one_by_one.take()
