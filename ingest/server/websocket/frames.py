"""RFC 6455 frames, sans-IO: a decoder fed raw bytes, encoders for what the server sends.

Data frames are handed on as their bytes arrive (unmasked), not once whole:
the protocol inside (NATS or MQTT) is a byte stream with its own size
limits, so a client announcing a frame of a terabyte costs no memory here;
the NATS parser refuses the oversized PUB inside it as it would over TCP.
Only compressed messages (RFC 7692, permessage-deflate) are held until
their last frame, and those are capped (`max_message`), as the reference
caps them at eight times max_payload (at most 64 MiB).

Every violation raises `FrameError` with the close code and the reason the
reference logs ("mask bit missing", "unknown opcode 3", …).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0, 1, 2, 8, 9, 10
FIN, RSV1, RSV23, MASK = 0x80, 0x40, 0x30, 0x80
MAX_CONTROL = 125
COMPRESS_THRESHOLD = 64  # smaller payloads go out plain, as on the reference

NORMAL, GOING_AWAY, PROTOCOL_ERROR, NO_STATUS = 1000, 1001, 1002, 1005
INVALID_DATA, POLICY, TOO_BIG, INTERNAL, TLS_FAILED = 1007, 1008, 1009, 1011, 1015
_TAIL = b"\x00\x00\xff\xff"  # what a compressed message's sender strips (RFC 7692 §7.2.1)


class FrameError(Exception):
    """The peer broke the framing rules: close with `code`, log `reason`."""

    def __init__(self, reason: str, code: int = PROTOCOL_ERROR) -> None:
        super().__init__(reason)
        self.code = code


@dataclass(frozen=True, slots=True)
class Ping:
    payload: bytes


@dataclass(frozen=True, slots=True)
class Pong:
    payload: bytes


@dataclass(frozen=True, slots=True)
class Close:
    code: int  # NO_STATUS when the frame carried none
    reason: str


Event = bytes | Ping | Pong | Close
"""bytes: the next piece of the data stream, already unmasked and inflated."""


def _valid_close_code(code: int) -> bool:
    return code in (1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011) or 3000 <= code <= 4999


def _unmask(data: bytes, key: bytes, offset: int) -> bytes:
    """XOR with the 4-byte key starting at key position `offset`, one big-int at a time."""
    if not data:
        return data
    n = len(data)
    rotated = key[offset % 4 :] + key[: offset % 4]
    pad = (rotated * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(pad, "little")).to_bytes(n, "little")


class FrameDecoder:
    """The client-to-server direction: masked frames, possibly fragmented or compressed."""

    def __init__(self, *, compressed: bool, max_message: int) -> None:
        self.compressed = compressed  # permessage-deflate was negotiated
        self.max_message = max_message
        self._buf = b""
        self._header: tuple[int, int, bytes] | None = None  # opcode, remaining, mask key
        self._done = 0  # payload bytes of the current frame already unmasked
        self._in_message = False  # a fragmented message awaits its final frame
        self._final = True
        self._inflating: list[bytes] | None = None  # a compressed message's frames
        self._inflated_size = 0
        self.error: FrameError | None = None

    def feed(self, data: bytes) -> list[Event]:
        """What `data` completes; after a violation, the events before it and `error` set
        (the bytes a client sent before its bad frame still count, as on the reference)."""
        events: list[Event] = []
        if self.error is not None:
            return events
        self._buf += data
        try:
            self._decode(events)
        except FrameError as exc:
            self.error = exc
            self._buf = b""
        return events

    def _decode(self, events: list[Event]) -> None:
        while True:
            if self._header is None and not self._read_header():
                return
            assert self._header is not None
            opcode, remaining, key = self._header
            if opcode >= CLOSE:  # control frames come whole
                if len(self._buf) < remaining:
                    return
                payload = _unmask(self._buf[:remaining], key, 0)
                self._buf = self._buf[remaining:]
                self._header = None
                events.append(self._control(opcode, payload))
                continue
            take = min(remaining, len(self._buf))
            if take == 0 and remaining:
                return
            chunk = _unmask(self._buf[:take], key, self._done)
            self._buf = self._buf[take:]
            self._done += take
            remaining -= take
            self._header = (opcode, remaining, key) if remaining else None
            if self._inflating is not None:
                self._inflated_size += take
                if self._inflated_size > self.max_message:
                    raise FrameError("maximum message size exceeded", TOO_BIG)
                self._inflating.append(chunk)
                if not remaining and self._final:
                    events.append(self._inflate())
            elif chunk:
                if events and type(events[-1]) is bytes:
                    events[-1] += chunk  # type: ignore[operator]  # one hand-over per read
                else:
                    events.append(chunk)
            if remaining:
                return

    def _read_header(self) -> bool:
        buf = self._buf
        if len(buf) < 2:
            return False
        b0, b1 = buf[0], buf[1]
        opcode, final, rsv1 = b0 & 0x0F, bool(b0 & FIN), bool(b0 & RSV1)
        if b0 & RSV23:
            raise FrameError("RSV2 and RSV3 must be clear")
        if rsv1 and not self.compressed:
            raise FrameError("compressed frame received without negotiated permessage-deflate")
        if not b1 & MASK:
            raise FrameError("mask bit missing")
        length = b1 & 0x7F
        if opcode in (CLOSE, PING, PONG):
            if length > MAX_CONTROL:
                raise FrameError(
                    f"control frame length bigger than maximum allowed of {MAX_CONTROL} bytes"
                )
            if not final:
                raise FrameError("control frame does not have final bit set")
            if rsv1:
                raise FrameError("control frame must not be compressed")
        elif opcode in (TEXT, BINARY):
            if self._in_message:
                raise FrameError(
                    "new message started before final frame for previous message was received"
                )
        elif opcode == CONTINUATION:
            if not self._in_message or rsv1:
                raise FrameError("invalid continuation frame")
        else:
            raise FrameError(f"unknown opcode {opcode}")
        pos = 2
        if length == 126:
            if len(buf) < 4:
                return False
            (length,) = struct.unpack_from(">H", buf, 2)
            pos = 4
        elif length == 127:
            if len(buf) < 10:
                return False
            (length,) = struct.unpack_from(">Q", buf, 2)
            if length >> 63:
                raise FrameError("invalid 64-bit payload length")
            pos = 10
        if len(buf) < pos + 4:
            return False
        key = buf[pos : pos + 4]
        self._buf = buf[pos + 4 :]
        self._header = (opcode, length, key)
        self._done = 0
        if opcode < CLOSE:
            self._in_message = not final
            self._final = final
            if opcode != CONTINUATION:
                self._inflating = [] if rsv1 else None
                self._inflated_size = 0
        return True

    def _inflate(self) -> bytes:
        assert self._inflating is not None
        data = b"".join(self._inflating) + _TAIL
        self._inflating = None
        inflater = zlib.decompressobj(-15)
        try:
            out = inflater.decompress(data, self.max_message + 1)
        except zlib.error as exc:
            raise FrameError(f"invalid compressed data: {exc}", INVALID_DATA) from None
        if len(out) > self.max_message:
            raise FrameError("maximum message size exceeded", TOO_BIG)
        return out

    def _control(self, opcode: int, payload: bytes) -> Event:
        if opcode == PING:
            return Ping(payload)
        if opcode == PONG:
            return Pong(payload)
        if len(payload) == 1:
            raise FrameError("close frame payload cannot be 1 byte")
        if not payload:
            return Close(NO_STATUS, "")
        (code,) = struct.unpack_from(">H", payload)
        if not _valid_close_code(code):
            raise FrameError(f"invalid close status code {code}")
        try:
            reason = payload[2:].decode()
        except UnicodeDecodeError:
            return Close(INVALID_DATA, "invalid utf8 body in close frame")
        return Close(code, reason)


def frame(opcode: int, payload: bytes, *, compressed: bool = False) -> bytes:
    """One unmasked final frame, as a server sends it."""
    b0 = FIN | opcode | (RSV1 if compressed else 0)
    n = len(payload)
    if n < 126:
        return bytes((b0, n)) + payload
    if n < 1 << 16:
        return struct.pack(">BBH", b0, 126, n) + payload
    return struct.pack(">BBQ", b0, 127, n) + payload


def data_frame(payload: bytes, *, compress: bool) -> bytes:
    """A binary message; deflated (no context kept between messages) when negotiated and
    worth it."""
    if compress and len(payload) > COMPRESS_THRESHOLD:
        deflater = zlib.compressobj(1, zlib.DEFLATED, -15)
        body = deflater.compress(payload) + deflater.flush(zlib.Z_SYNC_FLUSH)
        return frame(BINARY, body[:-4], compressed=True)
    return frame(BINARY, payload)


def close_frame(code: int, reason: str = "") -> bytes:
    """A close frame; the reason is cut to fit the 125 bytes a control frame may carry."""
    if code == NO_STATUS:
        return frame(CLOSE, b"")
    body = reason.encode()[: MAX_CONTROL - 2]
    return frame(CLOSE, struct.pack(">H", code) + body)
