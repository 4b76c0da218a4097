"""The route codec: the reference's wire forms parse, anything else raises its error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.parser import routes
from ingest.parser.routes import (
    Connect,
    Err,
    Info,
    Ok,
    Ping,
    Pong,
    RMsg,
    RouteCodec,
    RouteProtocolError,
    RSub,
    RUnsub,
)

_OP_TYPES = (Info, Connect, RSub, RUnsub, RMsg, Ping, Pong, Ok, Err)


def parse(data: bytes, **limits: int) -> list[routes.RouteOp]:
    return RouteCodec(**limits).receive(data)


def test_interest_lines_as_the_reference_traces_them() -> None:
    ops = parse(b"RS+ $G foo\r\nRS+ $G bar qq 1\r\nRS- $G foo\r\nRS- $G bar qq\r\n")
    assert ops == [
        RSub("$G", "foo", None, 0),
        RSub("$G", "bar", "qq", 1),
        RUnsub("$G", "foo", None),
        RUnsub("$G", "bar", "qq"),
    ]


@pytest.mark.parametrize(
    ("line", "reply", "queues"),
    [
        (b"RMSG $G bar 5", b"", ()),
        (b"RMSG $G bar rep 5", b"rep", ()),
        (b"RMSG $G bar + rep2 qq 5", b"rep2", (b"qq",)),
        (b"RMSG $G bar | qq q2 5", b"", (b"qq", b"q2")),
    ],
)
def test_rmsg_forms(line: bytes, reply: bytes, queues: tuple[bytes, ...]) -> None:
    (op,) = parse(line + b"\r\nhello\r\n")
    assert op == RMsg("$G", b"bar", reply, queues, None, b"hello")


def test_hmsg_splits_header_and_payload() -> None:
    (op,) = parse(b"HMSG $G foo rep 18 20\r\nNATS/1.0\r\nX: 1\r\n\r\nhi\r\n")
    assert op == RMsg("$G", b"foo", b"rep", (), b"NATS/1.0\r\nX: 1\r\n\r\n", b"hi")


def test_payload_is_jumped_over_not_scanned() -> None:
    """A payload that looks like control lines stays payload."""
    body = b"RS+ $G x\r\nPING\r\n"
    (op, ping) = parse(b"RMSG $G s %d\r\n%b\r\nPING\r\n" % (len(body), body))
    assert isinstance(op, RMsg) and op.payload == body
    assert ping == Ping()


def test_split_anywhere_gives_the_same_ops() -> None:
    data = (
        b'INFO {"server_id":"A"}\r\nCONNECT {"name":"A"}\r\nPING\r\nPONG\r\n+OK\r\n'
        b"-ERR 'Unknown'\r\nHMSG $G foo + r q 3 5\r\nh\r\nab\r\nRS+ $G a.b\r\n"
    )
    whole = parse(data)
    assert whole == [
        Info({"server_id": "A"}),
        Connect({"name": "A"}),
        Ping(),
        Pong(),
        Ok(),
        Err("Unknown"),
        RMsg("$G", b"foo", b"r", (b"q",), b"h\r\n", b"ab"),
        RSub("$G", "a.b", None, 0),
    ]
    for cut in range(1, len(data)):
        codec = RouteCodec()
        assert codec.receive(data[:cut]) + codec.receive(data[cut:]) == whole


@pytest.mark.parametrize(
    "data",
    [
        b"HELLO\r\n",
        b"RS+ $G\r\n",
        b"RS+ $G a q 1 2\r\n",
        b"RS+ $G a q -1\r\n",
        b"RS- $G\r\n",
        b"RMSG $G 5\r\n",
        b"RMSG $G a b c 5\r\n",
        b"RMSG $G a -5\r\n",
        b"HMSG $G a 6 5\r\n",
        b"RMSG $G a + r 5\r\n",
        b"RMSG $G a | 5\r\n",
        b"RMSG $G a 2\r\nabc\r\n",
        b"INFO [1]\r\n",
        b"CONNECT {\r\n",
        b"INFO " + b"[" * 3000 + b"\r\n",
    ],
)
def test_malformed_input_raises(data: bytes) -> None:
    with pytest.raises(RouteProtocolError):
        parse(data)


def test_limits() -> None:
    with pytest.raises(RouteProtocolError, match="control line"):
        parse(b"RS+ $G " + b"a" * 100, max_control_line=64)
    with pytest.raises(RouteProtocolError, match="maximum payload"):
        parse(b"RMSG $G a 11\r\n", max_payload=10)


@pytest.mark.parametrize("hdr", [None, b"NATS/1.0\r\n\r\n"])
@pytest.mark.parametrize("reply", [b"", b"_INBOX.x"])
@pytest.mark.parametrize("queues", [(), (b"q",), (b"q1", b"q2")])
def test_encode_rmsg_round_trips(
    hdr: bytes | None, reply: bytes, queues: tuple[bytes, ...]
) -> None:
    data = routes.encode_rmsg(b"$G", b"a.b", reply, queues, hdr, b"payload")
    assert parse(data) == [RMsg("$G", b"a.b", reply, queues, hdr, b"payload")]


def test_encode_interest_and_connect_round_trip() -> None:
    data = (
        routes.encode_rsub("$G", "a.*", None, 0)
        + routes.encode_rsub("$G", "b", "workers", 3)
        + routes.encode_runsub("$G", "b", "workers")
        + routes.encode_connect({"name": "N", "cluster": "c"})
    )
    assert parse(data) == [
        RSub("$G", "a.*", None, 0),
        RSub("$G", "b", "workers", 3),
        RUnsub("$G", "b", "workers"),
        Connect({"name": "N", "cluster": "c"}),
    ]


_TOKENS = st.sampled_from(
    [
        *(b"RMSG", b"HMSG", b"RS+", b"RS-", b"INFO", b"CONNECT", b"PING", b"+", b"|", b"$G"),
        *(b"0", b"1", b"5", b"12", b"{}", b'{"a":1}', b"\r\n", b" ", b"\n", b"x"),
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_TOKENS, st.binary(max_size=12)), max_size=40), st.integers(1, 50))
def test_any_bytes_parse_or_raise(chunks: list[bytes], cut: int) -> None:
    """Fuzz: whatever a peer sends, the codec returns ops or raises its own error."""
    data = b"".join(chunks)
    codec = RouteCodec(max_control_line=256, max_payload=64)
    try:
        ops = codec.receive(data[:cut]) + codec.receive(data[cut:])
    except RouteProtocolError:
        return
    assert all(isinstance(op, _OP_TYPES) for op in ops)
