"""Sans-IO codec of MQTT 3.1.1: bytes in, packets out; packets in, bytes out.

`Decoder.receive` returns every whole packet in the bytes seen so far, or
raises `ProtocolError` once the stream is malformed; after an error it refuses
everything, since an MQTT stream cannot be resynchronised. The checks are the
ones the reference applies while parsing (fixed-header flags, lengths, string
rules, CONNECT ordering); what depends on server state (credentials, topic
mapping, sizes against `max_payload`) is the server's business.

A CONNECT the reference answers with a refusal code rather than by closing
comes out as `ConnectRefused`, so the server can send that CONNACK.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

PROTOCOL_LEVEL = 4
MAX_REMAINING_LENGTH = 268_435_455  # four bytes of variable-length integer

CONNECT = 1
CONNACK = 2
PUBLISH = 3
PUBACK = 4
PUBREC = 5
PUBREL = 6
PUBCOMP = 7
SUBSCRIBE = 8
SUBACK = 9
UNSUBSCRIBE = 10
UNSUBACK = 11
PINGREQ = 12
PINGRESP = 13
DISCONNECT = 14

# CONNACK return codes
ACCEPTED = 0
UNACCEPTABLE_PROTOCOL = 1
IDENTIFIER_REJECTED = 2
SERVER_UNAVAILABLE = 3
BAD_USER_OR_PASSWORD = 4
NOT_AUTHORIZED = 5
QOS2_WILL_REJECTED = 0x10  # not MQTT 3.1.1's: the reference's, under reject_qos2_publish

SUBACK_FAILURE = 0x80

# Packets a server receives; a client receives the rest.
SERVER_BOUND = frozenset(
    {CONNECT, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP, SUBSCRIBE, UNSUBSCRIBE, PINGREQ, DISCONNECT}
)
CLIENT_BOUND = frozenset(
    {CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK, UNSUBACK, PINGRESP}
)

# Client-id characters that could not be part of a NATS subject token.
_BAD_ID_CHARS = frozenset(" \t\r\n\f.*>")


class ProtocolError(Exception):
    """The peer broke the protocol; the connection must be closed (no reply is owed)."""


@dataclass(frozen=True, slots=True)
class Will:
    topic: bytes
    message: bytes
    qos: int
    retain: bool


@dataclass(frozen=True, slots=True)
class Connect:
    client_id: str  # empty: the server assigns one (clean sessions only)
    clean: bool
    keepalive: int  # seconds, 0: none
    will: Will | None = None
    username: str | None = None
    password: bytes | None = None


@dataclass(frozen=True, slots=True)
class ConnectRefused:
    """A CONNECT the server answers with CONNACK `code`, then closes."""

    code: int
    reason: str


@dataclass(frozen=True, slots=True)
class ConnAck:
    session_present: bool
    code: int


@dataclass(frozen=True, slots=True)
class Publish:
    topic: bytes
    payload: bytes
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int = 0  # 0 for QoS 0


@dataclass(frozen=True, slots=True)
class PubAck:
    packet_id: int


@dataclass(frozen=True, slots=True)
class PubRec:
    packet_id: int


@dataclass(frozen=True, slots=True)
class PubRel:
    packet_id: int


@dataclass(frozen=True, slots=True)
class PubComp:
    packet_id: int


@dataclass(frozen=True, slots=True)
class Subscribe:
    packet_id: int
    filters: tuple[tuple[bytes, int], ...]  # (filter, requested QoS)


@dataclass(frozen=True, slots=True)
class SubAck:
    packet_id: int
    codes: tuple[int, ...]  # granted QoS, or SUBACK_FAILURE


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    packet_id: int
    filters: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class UnsubAck:
    packet_id: int


@dataclass(frozen=True, slots=True)
class PingReq:
    pass


@dataclass(frozen=True, slots=True)
class PingResp:
    pass


@dataclass(frozen=True, slots=True)
class Disconnect:
    pass


Packet = (
    Connect
    | ConnectRefused
    | ConnAck
    | Publish
    | PubAck
    | PubRec
    | PubRel
    | PubComp
    | Subscribe
    | SubAck
    | Unsubscribe
    | UnsubAck
    | PingReq
    | PingResp
    | Disconnect
)

_ACKS: dict[int, type[PubAck | PubRec | PubRel | PubComp]] = {
    PUBACK: PubAck,
    PUBREC: PubRec,
    PUBREL: PubRel,
    PUBCOMP: PubComp,
}
# Fixed-header flags each packet must carry (PUBLISH's are its own).
_FLAGS = {PUBREL: 2, SUBSCRIBE: 2, UNSUBSCRIBE: 2}
_EMPTY = {PINGREQ: PingReq(), PINGRESP: PingResp(), DISCONNECT: Disconnect()}


# -- variable-length integers -------------------------------------------------------


_SHORT = tuple(bytes((value,)) for value in range(0x80))


def encode_varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _SHORT[value]  # acks and small packets: one byte, no loop
    if not 0 <= value <= MAX_REMAINING_LENGTH:
        raise ValueError(f"remaining length {value} out of range")
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | 0x80 if value else byte)
        if not value:
            return bytes(out)


def decode_varint(buf: bytes, pos: int) -> tuple[int, int] | None:
    """(value, position after it), or None when more bytes are needed."""
    value = shift = 0
    for i in range(4):
        if pos + i >= len(buf):
            return None
        byte = buf[pos + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + i + 1
        shift += 7
    raise ProtocolError("malformed variable int")


# -- decoding -----------------------------------------------------------------------


class _Reader:
    """Fields of one packet body; running past its end is a protocol error."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def byte(self, field: str) -> int:
        if self.pos >= len(self.buf):
            raise ProtocolError(f"error reading {field}: EOF")
        self.pos += 1
        return self.buf[self.pos - 1]

    def uint16(self, field: str) -> int:
        if len(self.buf) - self.pos < 2:
            raise ProtocolError(f"error reading {field}: unexpected EOF")
        self.pos += 2
        return (self.buf[self.pos - 2] << 8) | self.buf[self.pos - 1]

    def data(self, field: str) -> bytes:
        size = self.uint16(field)
        if self.pos + size > len(self.buf):
            raise ProtocolError(f"error reading {field}: unexpected EOF")
        self.pos += size
        return self.buf[self.pos - size : self.pos]

    def text(self, field: str) -> bytes:
        """A UTF-8 string field: valid UTF-8 without NUL ([MQTT-1.5.3])."""
        raw = self.data(field)
        check_text(raw, field)
        return raw

    def rest(self) -> bytes:
        return self.buf[self.pos :]

    @property
    def more(self) -> bool:
        return self.pos < len(self.buf)


def check_text(raw: bytes, field: str) -> None:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"invalid utf8 for {field} {raw!r}") from None
    if b"\x00" in raw:
        raise ProtocolError(f"invalid null character in {field} {raw!r}")


def _packet_id(r: _Reader) -> int:
    pid = r.uint16("packet identifier")
    if pid == 0:
        raise ProtocolError("packet identifier cannot be 0")
    return pid


def _connect(r: _Reader) -> Connect | ConnectRefused:
    name = r.data("protocol name")
    if name != b"MQTT":
        if name == b"MQIsdp":
            raise ProtocolError(f"older protocol {name!r} not supported")
        raise ProtocolError(f"expected connect packet with protocol name 'MQTT', got {name!r}")
    level = r.byte("protocol level")
    if level != PROTOCOL_LEVEL:
        return ConnectRefused(UNACCEPTABLE_PROTOCOL, f"unacceptable protocol version of {level}")
    flags = r.byte("flags")
    if flags & 0x01:
        raise ProtocolError("connect flags reserved bit not set to 0")
    has_will, will_qos, will_retain = bool(flags & 0x04), (flags >> 3) & 3, bool(flags & 0x20)
    if not has_will and (will_qos or will_retain):
        raise ProtocolError("Will QoS and Will Retain must be 0 without a Will")
    if will_qos == 3:
        raise ProtocolError("Will QoS can be 0, 1 or 2, got 3")
    has_user, has_password = bool(flags & 0x80), bool(flags & 0x40)
    if has_password and not has_user:
        raise ProtocolError("password flag set but username flag is not")
    clean = bool(flags & 0x02)
    keepalive = r.uint16("keep alive")
    client_id = r.text("client ID").decode()
    if not client_id and not clean:
        return ConnectRefused(
            IDENTIFIER_REJECTED, "when client ID is empty, clean session flag must be set to 1"
        )
    if not _BAD_ID_CHARS.isdisjoint(client_id):
        return ConnectRefused(IDENTIFIER_REJECTED, f"invalid character in client ID {client_id!r}")
    will = None
    if has_will:
        topic = r.text("Will topic")
        if not topic:
            raise ProtocolError("empty Will topic not allowed")
        will = Will(topic, r.data("Will message"), will_qos, will_retain)
    username = password = None
    if has_user:
        username = r.text("user name").decode()
        if not username:
            return ConnectRefused(BAD_USER_OR_PASSWORD, "empty user name not allowed")
    if has_password:
        password = r.data("password")
    if r.more:
        raise ProtocolError("unexpected bytes after CONNECT payload")
    return Connect(client_id, clean, keepalive, will, username, password)


def _publish(flags: int, r: _Reader) -> Publish:
    qos = (flags >> 1) & 3
    if qos == 3:
        raise ProtocolError("QoS=3 is invalid in MQTT")
    topic = r.text("topic")
    if not topic:
        raise ProtocolError("topic cannot be empty")
    if b"+" in topic or b"#" in topic:
        raise ProtocolError(f"wildcards not allowed in publish's topic: {topic!r}")
    pid = _packet_id(r) if qos else 0
    return Publish(topic, r.rest(), qos, bool(flags & 1), bool(flags & 8), pid)


def _filters(r: _Reader, *, with_qos: bool) -> list[tuple[bytes, int]]:
    found: list[tuple[bytes, int]] = []
    while r.more:
        topic = r.text("topic filter")
        if not topic:
            raise ProtocolError("topic filter cannot be empty")
        qos = 0
        if with_qos:
            qos = r.byte("QoS")
            if qos > 2:
                raise ProtocolError(f"subscribe QoS value must be 0, 1 or 2, got {qos}")
        found.append((topic, qos))
    if not found:
        raise ProtocolError("(un)subscribe must contain at least 1 topic filter")
    return found


def parse_packet(kind: int, flags: int, body: bytes) -> Packet:
    """One whole packet from its fixed header's type and flags and its body."""
    if kind != PUBLISH and flags != _FLAGS.get(kind, 0):
        raise ProtocolError(f"invalid fixed header flags {flags:x} for packet type {kind}")
    r = _Reader(body)
    if kind == PUBLISH:
        return _publish(flags, r)
    if kind in _ACKS:
        if len(body) != 2:
            raise ProtocolError(f"invalid remaining length {len(body)} for packet type {kind}")
        return _ACKS[kind](r.uint16("packet identifier"))
    if kind in _EMPTY:
        if body:
            raise ProtocolError(f"invalid remaining length {len(body)} for packet type {kind}")
        return _EMPTY[kind]
    if kind == CONNECT:
        return _connect(r)
    if kind == SUBSCRIBE:
        pid = _packet_id(r)
        return Subscribe(pid, tuple(_filters(r, with_qos=True)))
    if kind == UNSUBSCRIBE:
        pid = _packet_id(r)
        return Unsubscribe(pid, tuple(f for f, _ in _filters(r, with_qos=False)))
    if kind == CONNACK:
        if len(body) != 2 or body[0] > 1:
            raise ProtocolError("malformed CONNACK")
        return ConnAck(bool(body[0]), body[1])
    if kind == SUBACK:
        pid = r.uint16("packet identifier")
        codes = tuple(r.rest())
        if not codes or any(c not in (0, 1, 2, SUBACK_FAILURE) for c in codes):
            raise ProtocolError("malformed SUBACK")
        return SubAck(pid, codes)
    if kind == UNSUBACK:
        if len(body) != 2:
            raise ProtocolError("malformed UNSUBACK")
        return UnsubAck(r.uint16("packet identifier"))
    raise ProtocolError(f"received unknown packet type {kind}")


class Decoder:
    """Splits a byte stream into packets, enforcing who sends what and CONNECT first.

    `max_packet` bounds a whole packet (fixed header included) before CONNECT, as
    the reference bounds it by `max_payload`; after it, larger packets are the
    server's to judge (a PUBLISH's payload against `max_payload`).
    """

    __slots__ = ("_buf", "_dead", "accept", "connected", "max_packet", "server")

    def __init__(self, *, server: bool = True, max_packet: int = MAX_REMAINING_LENGTH) -> None:
        self.server = server
        self.accept = SERVER_BOUND if server else CLIENT_BOUND
        self.max_packet = max_packet
        self.connected = not server  # a client's stream has no CONNECT in it
        self._buf = b""
        self._dead = False

    def receive(self, data: bytes) -> list[Packet]:
        if self._dead:
            raise ProtocolError("connection already failed")
        buf = self._buf + data if self._buf else data
        packets: list[Packet] = []
        pos, end = 0, len(buf)
        try:
            while pos < end:
                first = buf[pos]
                kind, flags = first >> 4, first & 0x0F
                if not self.connected and kind != CONNECT:
                    raise ProtocolError(f"the first packet should be a CONNECT, got {kind}")
                if kind not in self.accept:
                    raise ProtocolError(f"received unknown packet type {kind}")
                header = decode_varint(buf, pos + 1)
                if header is None:
                    break
                length, start = header
                if not self.connected and start - pos + length > self.max_packet:
                    raise ProtocolError("maximum payload exceeded")
                if start + length > end:
                    break
                packet = parse_packet(kind, flags, buf[start : start + length])
                pos = start + length
                if kind == CONNECT:
                    if self.connected:
                        raise ProtocolError("received a second CONNECT packet")
                    self.connected = True
                packets.append(packet)
        except ProtocolError:
            self._dead = True
            self._buf = b""
            raise
        self._buf = buf[pos:] if pos < end else b""
        return packets


# -- encoding -----------------------------------------------------------------------

_U16 = struct.Struct(">H")


def _string(raw: bytes) -> bytes:
    return _U16.pack(len(raw)) + raw


def _frame(first: int, body: bytes) -> bytes:
    return bytes((first,)) + encode_varint(len(body)) + body


def encode_publish(
    topic: bytes,
    payload: bytes,
    *,
    qos: int = 0,
    retain: bool = False,
    dup: bool = False,
    packet_id: int = 0,
) -> bytes:
    """The hot path of delivery: one PUBLISH without building a `Publish` first."""
    first = 0x30 | (qos << 1) | (8 if dup else 0) | (1 if retain else 0)
    head = _U16.pack(len(topic)) + topic
    if qos:
        head += _U16.pack(packet_id)
    return bytes((first,)) + encode_varint(len(head) + len(payload)) + head + payload


def encode_ack(kind: int, packet_id: int) -> bytes:
    """PUBACK, PUBREC, PUBREL or PUBCOMP without building the packet: one per QoS 1 message."""
    return bytes(((kind << 4) | _FLAGS.get(kind, 0), 2)) + _U16.pack(packet_id)


def _encode_connect(p: Connect) -> bytes:
    flags = (2 if p.clean else 0) | (0x80 if p.username is not None else 0)
    flags |= 0x40 if p.password is not None else 0
    payload = _string(p.client_id.encode())
    if p.will is not None:
        flags |= 0x04 | (p.will.qos << 3) | (0x20 if p.will.retain else 0)
        payload += _string(p.will.topic) + _string(p.will.message)
    if p.username is not None:
        payload += _string(p.username.encode())
    if p.password is not None:
        payload += _string(p.password)
    body = _string(b"MQTT") + bytes((PROTOCOL_LEVEL, flags)) + _U16.pack(p.keepalive) + payload
    return _frame(0x10, body)


def encode(packet: Packet) -> bytes:
    """Any packet as bytes on the wire (`ConnectRefused` is the CONNACK it calls for)."""
    kind = type(packet)
    if kind is Publish:
        assert isinstance(packet, Publish)
        return encode_publish(
            packet.topic,
            packet.payload,
            qos=packet.qos,
            retain=packet.retain,
            dup=packet.dup,
            packet_id=packet.packet_id,
        )
    if isinstance(packet, PubAck | PubRec | PubRel | PubComp):
        code = {PubAck: PUBACK, PubRec: PUBREC, PubRel: PUBREL, PubComp: PUBCOMP}[type(packet)]
        return encode_ack(code, packet.packet_id)
    if isinstance(packet, ConnAck):
        return bytes((0x20, 2, int(packet.session_present), packet.code))
    if isinstance(packet, ConnectRefused):
        return bytes((0x20, 2, 0, packet.code))
    if isinstance(packet, Connect):
        return _encode_connect(packet)
    if isinstance(packet, Subscribe):
        body = _U16.pack(packet.packet_id)
        body += b"".join(_string(f) + bytes((q,)) for f, q in packet.filters)
        return _frame(0x82, body)
    if isinstance(packet, SubAck):
        return _frame(0x90, _U16.pack(packet.packet_id) + bytes(packet.codes))
    if isinstance(packet, Unsubscribe):
        body = _U16.pack(packet.packet_id) + b"".join(_string(f) for f in packet.filters)
        return _frame(0xA2, body)
    if isinstance(packet, UnsubAck):
        return bytes((0xB0, 2)) + _U16.pack(packet.packet_id)
    if isinstance(packet, PingReq):
        return b"\xc0\x00"
    if isinstance(packet, PingResp):
        return b"\xd0\x00"
    if isinstance(packet, Disconnect):
        return b"\xe0\x00"
    raise TypeError(f"not an MQTT packet: {packet!r}")
