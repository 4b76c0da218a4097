"""The S2 stream codec of compressed links, without I/O: the pure codec and the compiled
one, each against the other and against streams nats-server's own S2 writers produced
(klauspost/compress v1.20.4 `s2.NewWriter` at the fast, better and best levels, which
use repeat offsets, of `_reference_input()`); then blocks and chunks crafted to be
corrupt or truncated."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import jetlake_native
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.parser import s2

DATA = Path(__file__).parent / "data" / "s2"

Reader = Callable[[], s2.Reader]
READERS = [
    pytest.param(s2.StreamReader, id="pure"),
    pytest.param(jetlake_native.S2Reader, id="compiled"),
]
ENCODERS = [
    pytest.param(s2.encode_stream, id="pure"),
    pytest.param(jetlake_native.s2_encode_stream, id="compiled"),
]
DECODE_BLOCK = [
    pytest.param(s2.decode_block, id="pure"),
    pytest.param(jetlake_native.s2_decode_block, id="compiled"),
]


def _reference_input() -> bytes:
    """What the golden streams hold: LMSG-like lines, a pseudo-random run, a long repeat."""
    lines = [
        f'LMSG sensors.{i % 7}.temp 12\r\n{{"t":{i},"v":{i * 37 % 101}}}\r\n' for i in range(1500)
    ]
    x, noise = 12345, bytearray()
    for _ in range(2000):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        noise.append((x >> 16) & 0xFF)
    return "".join(lines).encode() + bytes(noise) + b"abcabcabd" * 9000


def _feed_in_pieces(reader: s2.Reader, stream: bytes, size: int) -> bytes:
    return b"".join(reader.feed(stream[i : i + size]) for i in range(0, len(stream), size))


def _chunk(kind: int, body: bytes, crc: int | None = None) -> bytes:
    """A data chunk (CRC of `body` decoded, unless given) or any other chunk as is."""
    header = bytes((kind,)) + (len(body) + (4 if kind <= 1 else 0)).to_bytes(3, "little")
    if kind > 1:
        return header + body
    return header + struct.pack("<I", 0 if crc is None else crc) + body


# ---- the reference's streams ------------------------------------------------------------


@pytest.mark.parametrize("level", ["fast", "better", "best"])
@pytest.mark.parametrize("make", READERS)
def test_reads_what_the_reference_writes(make: Reader, level: str) -> None:
    stream = (DATA / f"{level}.s2").read_bytes()
    expected = _reference_input()
    assert _feed_in_pieces(make(), stream, len(stream)) == expected
    assert _feed_in_pieces(make(), stream, 997) == expected  # chunks split across reads


@pytest.mark.parametrize("make", READERS)
def test_a_split_anywhere_gives_the_same_bytes(make: Reader) -> None:
    stream = s2.encode_stream(b"hello hello hello hello, leaf " * 20)
    whole = make().feed(stream)
    for cut in range(1, len(stream)):
        reader = make()
        assert reader.feed(stream[:cut]) + reader.feed(stream[cut:]) == whole


# ---- round trips -------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=3000),
        st.lists(st.sampled_from([b"LMSG a.b 5\r\nhello\r\n", b"PING\r\n", b"x" * 70])).map(
            b"".join
        ),
    ),
    st.booleans(),
)
def test_round_trips_across_both_codecs(data: bytes, compress: bool) -> None:
    for encode in (s2.encode_stream, jetlake_native.s2_encode_stream):
        stream = encode(data, compress)
        assert s2.StreamReader().feed(stream) == data
        assert jetlake_native.S2Reader().feed(stream) == data


@pytest.mark.parametrize("encode", ENCODERS)
def test_large_payloads_span_blocks_and_compress(encode: Callable[..., bytes]) -> None:
    data = _reference_input() * 3  # ~450 KB: several 64 KiB blocks
    stream = encode(data, True)
    assert len(stream) < len(data) // 4
    assert jetlake_native.S2Reader().feed(stream) == data
    stored = encode(data, False)  # s2_uncompressed: stored chunks only
    assert len(stored) > len(data) and jetlake_native.S2Reader().feed(stored) == data


def test_blocks_are_snappy_compatible() -> None:
    """No repeat codes from either encoder: only literals and non-zero offsets."""
    data = b"abcd" * 500 + bytes(range(256)) * 4
    for block in (s2.encode_block(data), jetlake_native.s2_encode_block(data)):
        assert s2.decode_block(block) == data
        assert not any(
            tag & 3 == 1 and (tag & 0xE0) << 3 | block[i + 1] == 0
            for i, tag in _tags(block)  # a 1-byte-offset copy of offset 0 is S2's repeat
        )


def _tags(block: bytes) -> list[tuple[int, int]]:
    _, at = s2._block_len(block)
    found = []
    while at < len(block):
        tag = block[at]
        found.append((at, tag))
        if tag & 3 == 0:
            x = tag >> 2
            width = 0 if x < 60 else x - 59
            at += 1 + width + int.from_bytes(block[at + 1 : at + 1 + width], "little") + 1
            if x < 60:
                at += x
        else:
            at += (0, 2, 3, 5)[tag & 3]
    return found


# ---- crafted blocks: S2's extensions and corruption --------------------------------------


@pytest.mark.parametrize("decode", DECODE_BLOCK)
@pytest.mark.parametrize(
    ("code", "extra", "length"),
    [(0, b"", 4), (4, b"", 8), (5, b"\x10", 24), (6, b"\x01\x02", 0x0201 + 260),
     (7, b"\x01\x00\x01", 0x010001 + 65540)],
)  # fmt: skip
def test_repeat_offsets(
    decode: Callable[[bytes], bytes], code: int, extra: bytes, length: int
) -> None:
    """A 1-byte-offset copy of offset 0 repeats the last offset, with S2's length codes."""
    seed = b"0123456789"
    copy = bytes((1 | (6 << 2), 10))  # copy1: offset 10, length 10
    repeat = bytes((1 | (code << 2), 0)) + extra
    out_len = 10 + 10 + length
    block = s2._varint(out_len) + bytes((9 << 2,)) + seed + copy + repeat
    assert decode(block) == (seed * (out_len // 10 + 1))[:out_len]


@pytest.mark.parametrize("decode", DECODE_BLOCK)
def test_four_byte_offsets_and_long_literals(decode: Callable[[bytes], bytes]) -> None:
    lit = bytes(range(256)) * 300  # 76,800 bytes: a 3-byte literal length
    tail = bytes((3 | (15 << 2),)) + struct.pack("<I", 70000)  # copy4: 16 bytes from 70000 back
    block = s2._varint(len(lit) + 16) + bytes((62 << 2,)) + (len(lit) - 1).to_bytes(3, "little")
    assert decode(block + lit + tail) == lit + lit[len(lit) - 70000 : len(lit) - 70000 + 16]


@pytest.mark.parametrize("decode", DECODE_BLOCK)
@pytest.mark.parametrize(
    ("block", "why"),
    [
        (b"\x05" + bytes((1 << 2,)) + b"ab" + bytes((1, 0)), "before the block"),  # repeat first
        (b"\x08" + bytes((1 << 2,)) + b"ab" + bytes((2 | (5 << 2), 9, 0)), "before the block"),
        (b"\x03" + bytes((4 << 2,)) + b"abcde", "past the block"),  # literal longer than said
        (b"\x09" + bytes((1 << 2,)) + b"ab", "shorter than it says"),
        (b"\x05" + bytes((1 << 2,)) + b"ab" + bytes((2,)), "ends inside"),  # truncated copy
        (b"\xff\xff\xff\xff\xff", "varint"),
        (b"\xff\xff\xff\xff\x0f", "larger than the maximum"),
    ],
)
def test_corrupt_blocks_are_refused(
    decode: Callable[[bytes], bytes], block: bytes, why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        decode(block)


# ---- crafted streams ---------------------------------------------------------------------


@pytest.mark.parametrize("make", READERS)
@pytest.mark.parametrize(
    ("stream", "why"),
    [
        (_chunk(1, b"hi", s2.masked_crc(b"hi")), "not its identifier"),
        (b"\xff\x06\x00\x00NoPeNo", "bad stream identifier"),
        (s2.MAGIC + _chunk(1, b"hi", 12345), "checksum mismatch"),
        (s2.MAGIC + _chunk(0, b"\x02\x04ab", 1), "checksum mismatch"),
        (s2.MAGIC + _chunk(0, b"\x05\x04ab", s2.masked_crc(b"ab")), "corrupt compressed chunk"),
        (s2.MAGIC + _chunk(0x02, b"x"), "unsupported chunk type 0x02"),
        (s2.MAGIC + b"\x00\x02\x00\x00xy", "out of range"),
        (s2.MAGIC + b"\x01\xff\xff\xff", "out of range"),
    ],
)
def test_corrupt_streams_are_refused(make: Reader, stream: bytes, why: str) -> None:
    reader = make()
    with pytest.raises(ValueError, match=why):
        reader.feed(stream)
    with pytest.raises(ValueError, match="already failed"):  # the link is done for
        reader.feed(s2.MAGIC)


@pytest.mark.parametrize("make", READERS)
def test_skippable_padding_and_snappy_chunks(make: Reader) -> None:
    snappy = b"\xff\x06\x00\x00sNaPpY"
    stream = (
        s2.MAGIC
        + _chunk(0x80, b"skip me" * 10)
        + _chunk(0xFE, b"\x00" * 5)
        + _chunk(1, b"one", s2.masked_crc(b"one"))
        + snappy
        + _chunk(1, b"two", s2.masked_crc(b"two"))
    )
    assert _feed_in_pieces(make(), stream, 3) == b"onetwo"


@pytest.mark.parametrize("make", READERS)
def test_a_truncated_chunk_waits_for_the_rest(make: Reader) -> None:
    stream = s2.encode_stream(b"payload " * 1000)
    reader = make()
    assert reader.feed(stream[:-1]) == b""
    assert reader.feed(stream[-1:]) == b"payload " * 1000


def test_masked_crc_matches_the_framing_format() -> None:
    """CRC-32C of "123456789" is 0xE3069283 (RFC 3720); masked as Snappy's framing does."""
    c = 0xE3069283
    assert s2.masked_crc(b"123456789") == (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.integers(min_value=0, max_value=400), st.binary(max_size=8))
def test_damaged_streams_decode_or_fail_cleanly(noise: bytes, at: int, patch: bytes) -> None:
    """Garbage after the identifier, or a valid stream with bytes overwritten: both
    readers give the same bytes or both refuse it with ValueError, never anything else."""
    valid = s2.encode_stream(b"LMSG a.b 12\r\nhello, world\r\n" * 30)
    for stream in (s2.MAGIC + noise, valid[:at] + patch + valid[at + len(patch) :]):
        results = []
        for make in (s2.StreamReader, jetlake_native.S2Reader):
            try:
                results.append(make().feed(stream))
            except ValueError:
                results.append(None)
        assert results[0] == results[1]
