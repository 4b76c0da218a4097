"""Sans-IO S2 stream codec: the compression nats-server runs on leafnode links
(klauspost/compress's S2, a Snappy extension).

A stream is chunks, each a 4-byte header (type, 24-bit little-endian length); data
chunks carry the masked CRC-32C of their decoded bytes, then a block (type 0x00) or
the bytes as they are (0x01). The stream opens with the identifier chunk
(`S2sTwO`, or Snappy's `sNaPpY`); chunk types 0x80-0xfe are skipped, 0x02-0x7f
refused. A block is its decoded length (varint) and elements: literals, copies with
1-, 2- or 4-byte offsets, and S2's repeat (a 1-byte-offset copy with offset 0 reuses
the last offset, with a longer length code).

This module is the reference and the fallback; `native/src/s2.rs` is the compiled
codec `writer()`/`reader()` hand out when installed. The encoder writes plain
Snappy-compatible blocks, which every S2 reader takes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Protocol

from ingest.parser.fast import native

MAGIC = b"\xff\x06\x00\x00S2sTwO"
BLOCK = 1 << 16  # what one chunk of this encoder holds: every offset fits 16 bits
MAX_BLOCK = 4 << 20  # the largest block an S2 stream may carry
_SNAPPY_MAX_BLOCK = 1 << 16
_MAX_CHUNK = 4 + MAX_BLOCK + MAX_BLOCK // 6 + 42


class S2Error(ValueError):
    """A corrupt or unsupported stream; the message says what is wrong."""


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC = _crc_table()


def masked_crc(data: bytes) -> int:
    """CRC-32C of `data`, masked as the framing format stores it."""
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _literal(out: bytearray, lit: bytes) -> None:
    n = len(lit) - 1
    if n < 60:
        out.append(n << 2)
    else:
        width = (n.bit_length() + 7) // 8
        out.append((59 + width) << 2)
        out += n.to_bytes(width, "little")
    out += lit


def _copy(out: bytearray, offset: int, length: int) -> None:
    """A match as Snappy spells it; never a 1-byte offset of 0 (S2 reads that as repeat)."""
    while length >= 68:
        out += bytes((2 | 63 << 2, offset & 0xFF, offset >> 8))
        length -= 64
    if length > 64:
        out += bytes((2 | 59 << 2, offset & 0xFF, offset >> 8))
        length -= 60
    if length < 12 and offset < 2048:
        out += bytes((1 | (length - 4) << 2 | (offset >> 8) << 5, offset & 0xFF))
    else:
        out += bytes((2 | (length - 1) << 2, offset & 0xFF, offset >> 8))


def encode_block(src: bytes) -> bytes:
    """A Snappy-compatible block of at most `BLOCK` bytes: greedy matches of four bytes
    or more, stepping faster through data that does not compress."""
    if len(src) > BLOCK:
        raise ValueError(f"a block holds at most {BLOCK} bytes")
    out = bytearray(_varint(len(src)))
    n = len(src)
    if n < 16:
        if n:
            _literal(out, src)
        return bytes(out)
    seen: dict[bytes, int] = {}
    limit = n - 4
    s, emitted = 1, 0
    while s <= limit:
        key = src[s : s + 4]
        candidate = seen.get(key)
        seen[key] = s
        if candidate is None:
            s += 1 + ((s - emitted) >> 5)
            continue
        if s > emitted:
            _literal(out, src[emitted:s])
        length = 4
        while s + length < n and src[candidate + length] == src[s + length]:
            length += 1
        _copy(out, s - candidate, length)
        s += length
        emitted = s
        if s - 1 <= limit:
            seen[src[s - 1 : s + 3]] = s - 1
    if emitted < n:
        _literal(out, src[emitted:])
    return bytes(out)


def _le(src: bytes, at: int, width: int) -> int:
    if at + width > len(src):
        raise S2Error("block ends inside an element")
    return int.from_bytes(src[at : at + width], "little")


def _block_len(src: bytes) -> tuple[int, int]:
    n = 0
    for i, b in enumerate(src[:5]):
        n |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            if n > 0xFFFFFFFF:
                raise S2Error("block length overflows")
            return n, i + 1
    raise S2Error("block length is not a valid varint")


def decode_block(src: bytes, limit: int = MAX_BLOCK) -> bytes:
    """One S2 block decoded; refused when it says it decodes past `limit`."""
    want, s = _block_len(src)
    if want > limit:
        raise S2Error("block decodes larger than the maximum block size")
    dst = bytearray()
    offset = 0
    while s < len(src):
        tag = src[s]
        kind = tag & 3
        if kind == 0:
            x = tag >> 2
            n, width = (x, 0) if x < 60 else (_le(src, s + 1, x - 59), x - 59)
            s += 1 + width
            n += 1
            if n > want - len(dst) or n > len(src) - s:
                raise S2Error("literal runs past the block")
            dst += src[s : s + n]
            s += n
            continue
        if kind == 1:
            near = (tag & 0xE0) << 3 | _le(src, s + 1, 1)
            code = (tag >> 2) & 7
            s += 2
            if near == 0:  # repeat: the last offset again
                widths = {5: (1, 4), 6: (2, 1 << 8), 7: (3, 1 << 16)}
                width, base = widths.get(code, (0, code))
                length = (_le(src, s, width) + base if width else base) + 4
                s += width
            else:
                offset, length = near, code + 4
        elif kind == 2:
            offset, length = _le(src, s + 1, 2), 1 + (tag >> 2)
            s += 3
        else:
            offset, length = _le(src, s + 1, 4), 1 + (tag >> 2)
            s += 5
        d = len(dst)
        if offset == 0 or offset > d:
            raise S2Error("copy from before the block's start")
        if length > want - d:
            raise S2Error("copy runs past the block")
        if offset >= length:
            dst += dst[d - offset : d - offset + length]
        else:
            for i in range(length):
                dst.append(dst[d - offset + i])
    if len(dst) != want:
        raise S2Error("block decodes shorter than it says")
    return bytes(dst)


def _chunk(kind: int, crc: int, body: bytes) -> bytes:
    return bytes((kind,)) + (len(body) + 4).to_bytes(3, "little") + crc.to_bytes(4, "little") + body


def encode_stream(data: bytes, compress: bool = True) -> bytes:
    """`data` as a stream of its own, identifier first (the reference's writer starts
    each flush so): compressed chunks where that saves, stored ones otherwise or when
    `compress` is off (the reference's `s2_uncompressed`)."""
    parts = [MAGIC]
    for at in range(0, len(data), BLOCK):
        piece = data[at : at + BLOCK]
        crc = masked_crc(piece)
        if compress:
            block = encode_block(piece)
            if len(block) < len(piece) - len(piece) // 8:
                parts.append(_chunk(0x00, crc, block))
                continue
        parts.append(_chunk(0x01, crc, piece))
    return b"".join(parts)


class StreamReader:
    """One direction of a link: chunks in any split, the decoded bytes of each complete
    one out. An error is final; the link closes."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._started = False
        self._snappy = False
        self._skip = 0
        self._failed = False

    def feed(self, data: bytes) -> bytes:
        if self._failed:
            raise S2Error("the stream already failed")
        try:
            return self._feed(data)
        except S2Error:
            self._failed = True
            raise

    def _feed(self, data: bytes) -> bytes:
        if self._skip:
            n = min(self._skip, len(data))
            self._skip -= n
            data = data[n:]
        buf = self._buf
        buf += data
        out = bytearray()
        at = 0
        try:
            while len(buf) - at >= 4:
                kind = buf[at]
                length = int.from_bytes(buf[at + 1 : at + 4], "little")
                if not self._started and kind != 0xFF:
                    raise S2Error(f"stream starts with chunk type {kind:#04x}, not its identifier")
                if 0x80 <= kind < 0xFF:  # padding and skippable chunks
                    have = min(len(buf) - at - 4, length)
                    at += 4 + have
                    self._skip = length - have
                    continue
                if 0x01 < kind < 0xFF:
                    raise S2Error(f"unsupported chunk type {kind:#04x}")
                if kind <= 0x01 and not 4 <= length <= _MAX_CHUNK:
                    raise S2Error(f"chunk length {length} is out of range")
                if len(buf) - at - 4 < length:
                    break
                body = bytes(buf[at + 4 : at + 4 + length])
                at += 4 + length
                if kind == 0xFF:
                    if body not in (b"S2sTwO", b"sNaPpY"):
                        raise S2Error("bad stream identifier")
                    self._started, self._snappy = True, body == b"sNaPpY"
                    continue
                limit = _SNAPPY_MAX_BLOCK if self._snappy else MAX_BLOCK
                if kind == 0x00:
                    try:
                        decoded = decode_block(body[4:], limit)
                    except S2Error as exc:
                        raise S2Error(f"corrupt compressed chunk: {exc}") from None
                elif len(body) - 4 > limit:
                    raise S2Error("uncompressed chunk larger than the maximum block size")
                else:
                    decoded = body[4:]
                if masked_crc(decoded) != int.from_bytes(body[:4], "little"):
                    raise S2Error("chunk checksum mismatch")
                out += decoded
        finally:
            del buf[:at]
        return bytes(out)


class Reader(Protocol):
    def feed(self, data: bytes, /) -> bytes: ...


def writer(compress: bool) -> Callable[[bytes], bytes]:
    """`encode_stream` at one level (compiled when the extension has it)."""
    compiled = getattr(native, "s2_encode_stream", None)
    return partial(compiled if compiled is not None else encode_stream, compress=compress)


def reader() -> Reader:
    """A `StreamReader`, compiled when the extension has it (its errors are ValueError)."""
    compiled = getattr(native, "S2Reader", None)
    return compiled() if compiled is not None else StreamReader()  # type: ignore[no-any-return]
