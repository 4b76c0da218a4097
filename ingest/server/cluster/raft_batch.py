"""Raft frames gathered per peer: one routed message carries every frame of a turn.

With a thousand groups, every tick sends a heartbeat of each group a server leads
to each of its followers, and each follower answers: thousands of routed
messages a second, each paying the route's framing, parsing and dispatch, to
carry a few dozen bytes. The groups tick in the same turn of the event loop
(`consensus.ticker`), so what one turn sends to a peer is sent as one message:
a run of frames, each behind its length. A payload holds at most `MAX_BYTES`
(more starts another), and a frame longer than that goes alone.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from consensus.codec import CodecError

MAX_BYTES = 1 << 20
_LEN = struct.Struct(">I")


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
