"""Raft frames gathered per peer: one routed message carries every frame of a turn.

With a thousand groups, every tick sends a heartbeat of each group a server leads
to each of its followers, and each follower answers: thousands of routed
messages a second, each paying the route's framing, parsing and dispatch, to
carry a few dozen bytes. The groups tick in the same turn of the event loop
(`consensus.ticker`), so what one turn sends to a peer is sent as one message:
a run of frames, each behind its length. A payload holds at most `MAX_BYTES`
(more starts another), and a frame longer than that goes alone.

A plain heartbeat or answer (no read round in it) is a beat: (group, type, term,
value), the value a heartbeat's commit or an answer's last index. A turn's beats to
one peer go as one compact frame (`pack_beats`) of fixed records behind the sender
and addressee, where each was a whole Raft message in a frame of its own: with 1,000
groups, decoding those messages and building each one's `Message` was most of a
heartbeat's cost. A compact frame opens with an empty group name, which no group frame
has (`raft_transport.frame`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from consensus.codec import CodecError
from consensus.types import MessageType, NodeId

MAX_BYTES = 1 << 20
_LEN = struct.Struct(">I")
BEATS_MARK = b"\x00\x00"  # an empty group name's length: what opens a compact frame
BEATS_VERSION = 1
_NAME = struct.Struct(">H")
_BEAT = struct.Struct(">BQQH")  # type, term, value, group name's length; then the name
_BEAT_TYPES = {t.value: t for t in (MessageType.HEARTBEAT, MessageType.HEARTBEAT_RESP)}
MAX_BEATS = 4096  # records in one compact frame: far under `MAX_BYTES` with any group name

Beat = tuple[str, MessageType, int, int]  # group, type, term, value


class Outbox:
    """Frames queued for each peer since the last `take`, in the order they were sent."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self._max = max_bytes
        self._queued: dict[str, list[list[bytes]]] = {}  # peer -> payloads, each its frames
        self._sizes: dict[str, int] = {}  # peer -> bytes in its last payload

    def __bool__(self) -> bool:
        return bool(self._queued)

    def add(self, peer: str, frame: bytes) -> None:
        size = _LEN.size + len(frame)
        payloads = self._queued.get(peer)
        if payloads is None or self._sizes[peer] + size > self._max:
            payloads = self._queued.setdefault(peer, [])
            payloads.append([frame])
            self._sizes[peer] = size
        else:
            payloads[-1].append(frame)
            self._sizes[peer] += size

    def take(self) -> Iterator[tuple[str, bytes]]:
        """Every queued payload as (peer, bytes), leaving the outbox empty."""
        queued, self._queued = self._queued, {}
        self._sizes = {}
        for peer, payloads in queued.items():
            for frames in payloads:
                yield peer, pack(frames)


def pack(frames: list[bytes]) -> bytes:
    return b"".join(_LEN.pack(len(f)) + f for f in frames)


def pack_one(frame: bytes) -> bytes:
    """`pack([frame])`, for a message that goes at once."""
    return _LEN.pack(len(frame)) + frame


def unpack(data: bytes) -> list[bytes]:
    """The frames of a payload built by `pack`; `CodecError` for anything else."""
    frames = []
    at, end = 0, len(data)
    while at < end:
        if end - at < _LEN.size:
            raise CodecError(f"raft batch: {end - at} bytes left, too few for a frame's length")
        (size,) = _LEN.unpack_from(data, at)
        at += _LEN.size
        if size > end - at:
            raise CodecError(f"raft batch: a frame of {size} bytes, {end - at} left")
        frames.append(data[at : at + size])
        at += size
    return frames


def pack_beats(src: NodeId, dst: NodeId, beats: list[Beat]) -> bytes:
    """One compact frame of `beats` from `src` to `dst` (at most `MAX_BEATS` of them);
    `CodecError` for a number or name that does not fit its field."""
    head = _BEAT.pack
    try:
        parts = [BEATS_MARK, bytes((BEATS_VERSION,)), _name(src), _name(dst)]
        for group, kind, term, value in beats:
            name = group.encode()
            parts.append(head(kind, term, value, len(name)))
            parts.append(name)
    except struct.error as exc:
        raise CodecError(f"beats to {dst}: {exc}") from None
    return b"".join(parts)


def _name(text: str) -> bytes:
    raw = text.encode()
    return _NAME.pack(len(raw)) + raw


def unpack_beats(data: bytes) -> tuple[NodeId, NodeId, list[Beat]]:
    """(src, dst, beats) of a frame built by `pack_beats`; `CodecError` for anything else,
    so a damaged frame is dropped whole, none of its beats taken."""
    end = len(data)
    if end < 3 or data[:2] != BEATS_MARK or data[2] != BEATS_VERSION:
        raise CodecError(f"beats frame: no mark and version {BEATS_VERSION} in front")
    src, at = _read_name(data, 3)
    dst, at = _read_name(data, at)
    beats: list[Beat] = []
    head, size, types = _BEAT.unpack_from, _BEAT.size, _BEAT_TYPES
    try:
        while at < end:
            if end - at < size:
                raise CodecError(f"beats frame: {end - at} bytes left, too few for a beat")
            kind, term, value, length = head(data, at)
            at += size
            if length == 0 or length > end - at:
                raise CodecError(f"beats frame: a group name of {length} bytes, {end - at} left")
            msg_type = types.get(kind)
            if msg_type is None:
                raise CodecError(f"beats frame: type {kind} is not a heartbeat or its answer")
            beats.append((data[at : at + length].decode(), msg_type, term, value))
            at += length
    except UnicodeDecodeError as exc:
        raise CodecError(f"beats frame: a group name is not UTF-8: {exc}") from None
    return src, dst, beats


def _read_name(data: bytes, at: int) -> tuple[str, int]:
    if len(data) - at < _NAME.size:
        raise CodecError("beats frame: truncated in a server name's length")
    (length,) = _NAME.unpack_from(data, at)
    at += _NAME.size
    if length == 0 or length > len(data) - at:
        raise CodecError(f"beats frame: a server name of {length} bytes, {len(data) - at} left")
    try:
        return data[at : at + length].decode(), at + length
    except UnicodeDecodeError as exc:
        raise CodecError(f"beats frame: a server name is not UTF-8: {exc}") from None
