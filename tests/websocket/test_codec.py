"""The sans-IO WebSocket layers, without sockets: frames, the upgrade, the config checks."""

from __future__ import annotations

import os
import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.parser.conf import ConfigError
from ingest.server.settings import Options
from ingest.server.websocket import frames, handshake
from ingest.server.websocket.settings import WebSocketConfig
from ingest.server.websocket.validate import check_websocket_options


def masked(opcode: int, payload: bytes, *, fin: bool = True, rsv1: bool = False) -> bytes:
    key = os.urandom(4)
    b0 = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
    n = len(payload)
    if n < 126:
        head = struct.pack(">BB", b0, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack(">BBH", b0, 0x80 | 126, n)
    else:
        head = struct.pack(">BBQ", b0, 0x80 | 127, n)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=6),
    st.integers(min_value=1, max_value=50),
)
def test_fragments_arrive_in_order_whatever_the_reads(parts: list[bytes], step: int) -> None:
    """A fragmented message, fed in reads of any size, comes out as its bytes in order."""
    wire = b"".join(
        masked(frames.BINARY if i == 0 else frames.CONTINUATION, p, fin=i == len(parts) - 1)
        for i, p in enumerate(parts)
    )
    decoder = frames.FrameDecoder(compressed=False, max_message=1 << 20)
    out = []
    for i in range(0, len(wire), step):
        out.extend(decoder.feed(wire[i : i + step]))
    assert decoder.error is None
    assert b"".join(e for e in out if isinstance(e, bytes)) == b"".join(parts)


def test_compressed_message_is_inflated_and_capped() -> None:
    body = b"PUB a 3\r\nabc\r\n" * 100
    deflater = zlib.compressobj(6, zlib.DEFLATED, -15)
    data = (deflater.compress(body) + deflater.flush(zlib.Z_SYNC_FLUSH))[:-4]
    decoder = frames.FrameDecoder(compressed=True, max_message=1 << 20)
    assert decoder.feed(masked(frames.BINARY, data, rsv1=True)) == [body]
    small = frames.FrameDecoder(compressed=True, max_message=100)
    small.feed(masked(frames.BINARY, data, rsv1=True))
    assert small.error is not None and small.error.code == frames.TOO_BIG


def test_events_before_a_violation_are_kept() -> None:
    decoder = frames.FrameDecoder(compressed=False, max_message=1 << 20)
    events = decoder.feed(masked(frames.BINARY, b"PING\r\n") + b"\x82\x05hello")
    assert events == [b"PING\r\n"]
    assert decoder.error is not None and str(decoder.error) == "mask bit missing"
    assert decoder.feed(masked(frames.BINARY, b"more")) == []  # nothing after the error


def test_control_frames() -> None:
    decoder = frames.FrameDecoder(compressed=False, max_message=1 << 20)
    assert decoder.feed(masked(frames.PING, b"hi") + masked(frames.CLOSE, b"")) == [
        frames.Ping(b"hi"),
        frames.Close(frames.NO_STATUS, ""),
    ]
    assert frames.close_frame(frames.NO_STATUS) == b"\x88\x00"
    assert frames.close_frame(1000, "x" * 200)[1] == 125  # the reason is cut to fit


def test_server_frames_round_trip() -> None:
    big = bytes(range(256)) * 300
    for payload in (b"", b"x" * 125, b"y" * 126, big):
        wire = frames.data_frame(payload, compress=False)
        assert wire[0] == 0x82 and wire.endswith(payload)
    compressed = frames.data_frame(big, compress=True)
    assert compressed[0] == 0xC2 and len(compressed) < len(big)


def request(extra: str = "", method: str = "GET", path: str = "/") -> handshake.Request:
    text = (
        f"{method} {path} HTTP/1.1\r\nHost: h:80\r\nUpgrade: websocket\r\n"
        "Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        f"Sec-WebSocket-Version: 13\r\n{extra}\r\n"
    )
    parsed = handshake.parse_request(text.encode())
    assert parsed is not None
    return parsed[0]


def test_upgrade_accept_key_and_path() -> None:
    options = dict(compression=True, same_origin=False, allowed_origins=(), tls=False)
    result = handshake.upgrade(request(path="/mqtt"), **options)
    assert result.accept == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455's example
    assert result.mqtt and not result.compress
    assert b"Sec-Websocket-Protocol: mqtt" in handshake.accepted(result)
    cookie = request("Cookie: a=1; jwt=abc\r\n")
    assert handshake.upgrade(cookie, **options).cookies == {"a": "1", "jwt": "abc"}


@pytest.mark.parametrize(
    ("origin", "same", "allowed", "problem"),
    [
        ("http://h", True, (), None),
        ("http://h:8080", True, (), "not same origin"),
        ("https://h", True, (), "not same origin"),
        ("http://a.example", False, ("http://a.example:80",), None),
        ("http://b.example", False, ("http://a.example",), "not in the allowed list"),
    ],
)
def test_origin_rules(origin: str, same: bool, allowed: tuple[str, ...], problem: str) -> None:
    req = request(f"Origin: {origin}\r\n")
    assert handshake.origin_problem(req, same, allowed, tls=False) == problem


def test_incomplete_and_oversized_requests() -> None:
    assert handshake.parse_request(b"GET / HTTP/1.1\r\nHost: x\r\n") is None
    with pytest.raises(handshake.HandshakeError) as refused:
        handshake.parse_request(b"X" * (handshake.MAX_REQUEST + 1))
    assert refused.value.status == 431


def test_jwt_cookie_needs_operators() -> None:
    opts = Options(websocket=WebSocketConfig(no_tls=True, jwt_cookie="jwt"))
    with pytest.raises(ConfigError, match='authentication via cookie "jwt"'):
        check_websocket_options(opts)
