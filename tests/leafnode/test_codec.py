"""The leafnode codec, without I/O: the forms the reference writes (captured from a
nats-server hub and leaf talking), round trips, and malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.parser import leafnodes as proto
from ingest.parser import routes

# What a nats-server 2.15 leaf and hub sent each other for a queue subscription on the
# hub and two publishes on the leaf (one with a header and a reply).
CAPTURED = (
    b"LS+ $JS.hub.API.STREAM.>\r\nLS+ $LDS.1D7rO02J6HfAuU78ZdHDer\r\nPING\r\n"
    b"LS+ foo q1 1\r\nLMSG foo | q1 2\r\nhi\r\n"
    b"HMSG foo + bar q1 18 20\r\nNATS/1.0\r\na: b\r\n\r\nhi\r\nLS- foo q1\r\n"
)


def test_captured_exchange() -> None:
    ops = proto.LeafCodec().receive(CAPTURED)
    assert ops == [
        proto.RSub("", "$JS.hub.API.STREAM.>", None, 0),
        proto.RSub("", "$LDS.1D7rO02J6HfAuU78ZdHDer", None, 0),
        proto.Ping(),
        proto.RSub("", "foo", "q1", 1),
        proto.RMsg("", b"foo", b"", (b"q1",), None, b"hi"),
        proto.RMsg("", b"foo", b"bar", (b"q1",), b"NATS/1.0\r\na: b\r\n\r\n", b"hi"),
        proto.RUnsub("", "foo", "q1"),
    ]


def test_split_anywhere_gives_the_same_ops() -> None:
    whole = proto.LeafCodec().receive(CAPTURED)
    for cut in range(1, len(CAPTURED)):
        codec = proto.LeafCodec()
        assert codec.receive(CAPTURED[:cut]) + codec.receive(CAPTURED[cut:]) == whole


@pytest.mark.parametrize(
    ("line", "reply", "queues"),
    [
        (b"LMSG a.b 2\r\nhi\r\n", b"", ()),
        (b"LMSG a.b _INBOX.x 2\r\nhi\r\n", b"_INBOX.x", ()),
        (b"LMSG a.b + _INBOX.x q1 q2 2\r\nhi\r\n", b"_INBOX.x", (b"q1", b"q2")),
        (b"LMSG a.b | q1 2\r\nhi\r\n", b"", (b"q1",)),
    ],
)
def test_lmsg_forms(line: bytes, reply: bytes, queues: tuple[bytes, ...]) -> None:
    (op,) = proto.LeafCodec().receive(line)
    assert op == proto.RMsg("", b"a.b", reply, queues, None, b"hi")
    assert proto.encode_lmsg(b"a.b", reply, queues, None, b"hi") == line


def test_interest_lines_round_trip() -> None:
    wire = proto.encode_lsub("a.*", None, 0) + proto.encode_lsub("a.b", "q", 3)
    wire += proto.encode_lunsub("a.*", None) + proto.encode_lunsub("a.b", "q")
    assert wire == b"LS+ a.*\r\nLS+ a.b q 3\r\nLS- a.*\r\nLS- a.b q\r\n"
    assert proto.LeafCodec().receive(wire) == [
        proto.RSub("", "a.*", None, 0),
        proto.RSub("", "a.b", "q", 3),
        proto.RUnsub("", "a.*", None),
        proto.RUnsub("", "a.b", "q"),
    ]


def test_handshake_lines() -> None:
    wire = b'INFO {"server_id":"N1","leafnode_urls":["h:7422"]}\r\n'
    wire += proto.encode_connect({"name": "leaf", "hub": False})
    wire += b"-ERR 'Loop detected for leafnode account=\"$G\".'\r\n+OK\r\nPONG\r\n"
    assert proto.LeafCodec().receive(wire) == [
        proto.Info({"server_id": "N1", "leafnode_urls": ["h:7422"]}),
        proto.Connect({"name": "leaf", "hub": False}),
        proto.Err('Loop detected for leafnode account="$G".'),
        proto.Ok(),
        proto.Pong(),
    ]


@pytest.mark.parametrize(
    "data",
    [
        b"LS+ a q\r\n",  # a queue without its weight
        b"LS+ a q x\r\n",
        b"LS+\r\n",
        b"LS- a q extra\r\n",
        b"LMSG a\r\n",
        b"LMSG a x\r\n",
        b"LMSG a + r 2\r\n",
        b"HMSG a 5 2\r\n",
        b"RMSG $G a 2\r\n",  # a route's message on a leaf connection
        b"RS+ $G a\r\n",
        b"SUB a 1\r\n",
        b"LMSG a 2\r\nhiX\r\n",
    ],
)
def test_malformed_input_raises(data: bytes) -> None:
    with pytest.raises(proto.LeafProtocolError):
        proto.LeafCodec().receive(data)


def test_limits() -> None:
    with pytest.raises(proto.PayloadTooLarge, match="maximum payload") as caught:
        proto.LeafCodec(max_payload=4).receive(b"LMSG a 5\r\n")
    assert (caught.value.size, caught.value.limit) == (5, 4)  # the reference logs both
    with pytest.raises(proto.LeafProtocolError, match="control line"):
        proto.LeafCodec(max_control_line=8).receive(b"LS+ " + b"a" * 20)


def test_route_encoding_still_matches() -> None:
    """The reply-and-queues part is shared with the route codec's encoder."""
    wire = routes.encode_rmsg(b"$G", b"a", b"r", [b"q"], None, b"x")
    assert wire == b"RMSG $G a + r q 1\r\nx\r\n"


@given(st.lists(st.binary(max_size=40), max_size=6))
def test_any_bytes_parse_or_raise(chunks: list[bytes]) -> None:
    codec = proto.LeafCodec()
    try:
        for chunk in chunks:
            codec.receive(chunk)
    except proto.LeafProtocolError:
        pass
