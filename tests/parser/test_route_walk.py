"""The compiled walk over a route's input (`split_route`) against the pure codec:
messages without queue groups built by the walk, every other frame by the codec, the
same operations however the bytes are cut, and the same refusals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.parser import routes
from ingest.parser.fast import native
from ingest.parser.routes import RouteCodec, RouteProtocolError
from tests.parser.test_routes_codec import _TOKENS

pytestmark = pytest.mark.skipif(
    getattr(native, "split_route", None) is None, reason="the compiled extension is not built"
)

STREAM = (
    b"INFO {}\r\nRMSG $G a.b 3\r\nabc\r\nRMSG $G a.b 0\r\n\r\nrmsg $G a.b r.1 2\r\nxy\r\n"
    b"RMSG $SYS $NRG.X 1\r\nz\r\nRMSG $G a.c | g 1\r\nw\r\nRMSG $G a.c + r g 1\r\nv\r\nPING\r\n"
    b"HMSG $G a.c 3 5\r\nh\r\nxy\r\nRS+ $G foo\r\nRMSG $G\ta.c  2\r\nok\r\nRS- $G foo\r\n"
    b"RMSG \xff\xfe a.\xff 1\r\n!\r\nHMSG $G a.d r.2 3 5\r\nh\r\nxy\r\nHMSG $G a.d 0 0\r\n\r\n"
    b"HMSG $G a.d + r q 3 5\r\nh\r\nxy\r\n"
)


def outcome(chunks: list[bytes], walked: bool) -> object:
    codec = RouteCodec(max_control_line=256, max_payload=64)
    receive = codec.receive_walked if walked else codec.receive
    try:
        return [op for chunk in chunks for op in receive(chunk)]
    except RouteProtocolError as exc:
        return type(exc), str(exc)


def test_the_walk_gives_the_pure_codecs_operations_however_the_bytes_are_cut() -> None:
    expected = RouteCodec().receive(STREAM)
    assert len([op for op in expected if isinstance(op, routes.RMsg)]) == 12
    assert RouteCodec().receive_walked(STREAM) == expected
    for cut in range(1, len(STREAM)):
        codec = RouteCodec()
        ops = codec.receive_walked(STREAM[:cut]) + codec.receive_walked(STREAM[cut:])
        assert ops == expected, cut


@pytest.mark.parametrize(
    "data",
    [
        b"RMSG $G a x\r\nabc\r\n",
        b"HMSG $G a 6 5\r\nabcde\r\n",
        b"HMSG $G a x 5\r\nabcde\r\n",
        b"HMSG $G 5\r\nabcde\r\n",
        b"RMSG $G a 3\r\nabcd\r\n",
        b"RMSG $G a 99999999\r\n",
        b"RMSG $G " + b"a" * 5000,
        b"RMSG $G a\x0b 1\r\nz\r\n",
        b"RMSG $G a\x0c\rb 1\r\nz\r\n",
        b"RMSG\t$G a 1\r\nz\r\n",
    ],
)
def test_what_the_walk_cannot_read_the_pure_codec_reads(data: bytes) -> None:
    """Refused (a size, a CRLF, a limit) or read with Python's own rules (whitespace)."""
    stream = b"RMSG $G a 1\r\nz\r\n" + data
    assert outcome([stream], walked=True) == outcome([stream], walked=False)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_TOKENS, st.binary(max_size=12)), max_size=40), st.integers(1, 50))
def test_any_bytes_give_what_the_pure_codec_gives(chunks: list[bytes], cut: int) -> None:
    data = b"".join(chunks)
    parts = [data[:cut], data[cut:]]
    assert outcome(parts, walked=True) == outcome(parts, walked=False)
