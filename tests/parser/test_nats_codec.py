"""The client-protocol codec: ops, the reference's error handling, and split-anywhere parsing."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.parser import nats
from ingest.parser.nats import Connect, Ping, Pong, Pub, ServerCodec, Sub, Unsub, Violation


def parse(data: bytes, **kw: int) -> list[nats.Op]:
    return ServerCodec(**kw).receive(data)


def test_pipelined_ops() -> None:
    ops = parse(
        b'CONNECT {"verbose":false,"headers":true}\r\nSUB foo q 1\r\nPUB foo r 2\r\nhi\r\n'
        b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nyo\r\nUNSUB 1 5\r\nPING\r\nPONG\r\n"
    )
    assert ops == [
        Connect({"verbose": False, "headers": True}),
        Sub("foo", "q", b"1"),
        Pub(b"foo", b"r", None, b"hi"),
        Pub(b"foo", b"", b"NATS/1.0\r\n\r\n", b"yo"),
        Unsub(b"1", 5),
        Ping(),
        Pong(),
    ]


def test_case_whitespace_and_bare_newline_are_accepted() -> None:
    assert parse(b"pub\tfoo   1\nx\r\nping\n") == [Pub(b"foo", b"", None, b"x"), Ping()]


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"FOO bar\r\n", nats.ERR_UNKNOWN_OP),
        (b"\r\n", nats.ERR_UNKNOWN_OP),
        (b"PUB foo 3\r\nhi\r\nPING\r\n", nats.ERR_UNKNOWN_OP),  # wrong declared size
        (b"UNSUB\r\n", nats.ERR_UNKNOWN_OP),
        (b"PUB foo 2000000\r\n", nats.ERR_MAX_PAYLOAD),
        (b"PUB " + b"a" * 5000 + b" 1\r\n", nats.ERR_MAX_CONTROL_LINE),
        (b"PUB " + b"a" * 5000, nats.ERR_MAX_CONTROL_LINE),
        (b"PUB foo\r\n", None),  # arg errors close silently, as the reference does
        (b"PUB foo -1\r\n", None),
        (b"PUB foo +1\r\n", None),
        (b"PUB a b c 1\r\n", None),
        (b"SUB foo\r\n", None),
        (b"CONNECT {bad\r\n", None),
        (b"CONNECT []\r\n", None),
        (b"-ERR 'x'\r\n", None),
    ],
)
def test_violations_match_the_reference(data: bytes, error: str | None) -> None:
    ops = parse(data)
    assert ops[-1] == Violation(error)


def test_hpub_refused_until_headers_negotiated() -> None:
    hpub = b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    assert parse(hpub) == [Violation(None)]
    assert parse(b'CONNECT {"headers":false}\r\n' + hpub)[-1] == Violation(None)
    assert isinstance(parse(b'CONNECT {"headers":true}\r\n' + hpub)[-1], Pub)


def test_no_responders_needs_headers() -> None:
    ops = parse(b'CONNECT {"no_responders":true}\r\n')
    assert ops == [Violation("no responders requires headers support")]


def test_nothing_after_a_fatal_violation() -> None:
    codec = ServerCodec()
    codec.receive(b"BAD\r\n")
    assert codec.receive(b"PING\r\n") == []


def test_unparseable_unsub_max_means_reached() -> None:
    assert parse(b"UNSUB 1 x\r\n") == [Unsub(b"1", 0)]


def test_info_and_ok_from_clients_are_ignored() -> None:
    assert parse(b"INFO {}\r\n+OK\r\nPING\r\n") == [Ping()]


def test_encoders() -> None:
    assert nats.encode_msg(b"a", b"1", b"", b"xy") == b"MSG a 1 2\r\nxy\r\n"
    assert nats.encode_msg(b"a", b"1", b"r", b"") == b"MSG a 1 r 0\r\n\r\n"
    hdr = b"NATS/1.0\r\n\r\n"
    assert nats.encode_hmsg(b"a", b"1", b"", hdr, b"x") == b"HMSG a 1 12 13\r\n" + hdr + b"x\r\n"
    assert nats.encode_err("Stale Connection") == b"-ERR 'Stale Connection'\r\n"


VALID_STREAM = (
    b'CONNECT {"headers":true}\r\nSUB foo.* 7\r\nPUB foo.bar _INBOX.x 5\r\nhello\r\n'
    b"HPUB a 22 24\r\nNATS/1.0\r\nK: v\r\n\r\n\r\nok\r\nUNSUB 7\r\nPING\r\n"
)


@given(st.lists(st.integers(min_value=0, max_value=len(VALID_STREAM)), max_size=6))
def test_splitting_anywhere_yields_the_same_ops(cuts: list[int]) -> None:
    whole = parse(VALID_STREAM)
    codec = ServerCodec()
    ops: list[nats.Op] = []
    bounds = [0, *sorted(cuts), len(VALID_STREAM)]
    for a, b in itertools.pairwise(bounds):
        ops += codec.receive(VALID_STREAM[a:b])
    assert ops == whole


def test_every_single_split_point() -> None:
    whole = parse(VALID_STREAM)
    for i in range(len(VALID_STREAM) + 1):
        codec = ServerCodec()
        assert codec.receive(VALID_STREAM[:i]) + codec.receive(VALID_STREAM[i:]) == whole


@settings(max_examples=500)
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_any_bytes_parse_or_violate(chunks: list[bytes]) -> None:
    codec = ServerCodec(max_control_line=128, max_payload=256)
    for chunk in chunks:
        for op in codec.receive(chunk):
            assert isinstance(op, Connect | Pub | Sub | Unsub | Ping | Pong | Violation)


@settings(max_examples=300)
@given(
    st.lists(
        st.sampled_from(
            [b"PUB a 1\r\nx\r\n", b"SUB a 1\r\n", b"PING\r\n", b"HPUB a 12 12\r\n", b"\r\n"]
        )
        | st.binary(max_size=16),
        max_size=10,
    )
)
def test_protocol_like_noise_parses_or_violates(parts: list[bytes]) -> None:
    codec = ServerCodec(max_control_line=64, max_payload=64)
    for op in codec.receive(b"".join(parts)):
        assert isinstance(op, Connect | Pub | Sub | Unsub | Ping | Pong | Violation)
