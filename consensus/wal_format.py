"""Byte formats of a Raft group's log on disk; pure functions over bytes, no I/O.

Entry frame (33 bytes of header, then the entry's data):
    magic 4 | length u32 | term u64 | index u64 | kind u8 | crc32(data) u32
    | crc32(the 29 bytes before) u32
The header's own checksum covers the data's, so the two chain into one check
over the whole frame. Why two and not one: after damage, a header that still
verifies tells for certain which index was written and where the next frame
starts, even when its data was hit; recovery uses that to learn how far the
log reached (`highest_index_after`) without trusting a single unverified byte.
The magic is how it finds the next header past damage: one search in C for
4 bytes with no zero among them (a zeroed or random 64 MiB stretch costs
milliseconds), each hit then checked by the header's checksum.

Hard-state slot (one of two, each `SLOT_SIZE` bytes apart, so a torn page
write can only reach one): seq u64 | term u64 | commit u64 | vote length + 1
u16 (0: no vote) | vote utf-8 | crc32 of all of it.

Snapshot file: magic | crc32 of the rest u32 | length of the rest u64 | index
u64 | term u64 | voters u32 | learners u32 | (name length u16, name)... | data.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, MutableSequence, Sequence
from typing import NamedTuple

from consensus.types import ConfState, Entry, EntryKind, HardState, Snapshot, SnapshotMeta

MAGIC = b"\xeaJLw"
_HEAD = struct.Struct("<4sIQQBI")  # magic, length, term, index, kind, crc32 of the data
_CRC = struct.Struct("<I")
_FRAME = struct.Struct("<4sIQQBII")  # the header and its checksum
FRAME_OVERHEAD = _FRAME.size


class FrameHead(NamedTuple):
    length: int
    term: int
    index: int
    kind: int
    data_crc: int


def encode_frames(entries: Sequence[Entry], offset: int, starts: MutableSequence[int]) -> bytes:
    """The frames of `entries` as one buffer (one write(2)); appends each frame's byte
    offset, counted from `offset`, to `starts`."""
    parts: list[bytes] = []
    pack, crc = _HEAD.pack, zlib.crc32
    for e in entries:
        data = e.data
        head = pack(MAGIC, len(data), e.term, e.index, e.kind, crc(data))
        parts += (head, crc(head).to_bytes(4, "little"), data)
        starts.append(offset)
        offset += FRAME_OVERHEAD + len(data)
    return b"".join(parts)


def read_head(data: bytes, off: int) -> FrameHead | None:
    """The header at `off` if it is whole and its checksum verifies (its data may not)."""
    if off + FRAME_OVERHEAD > len(data):
        return None
    raw = data[off : off + _HEAD.size]
    if zlib.crc32(raw) != _CRC.unpack_from(data, off + _HEAD.size)[0]:
        return None
    return FrameHead(*_HEAD.unpack(raw)[1:])


def decode_frame(data: bytes, off: int) -> tuple[Entry, int] | None:
    """The entry at `off` and the offset after it, or None: torn, damaged or unknown kind.

    The open of a log runs this once per entry (a 64 MiB file of small entries
    is ~400,000 calls), so it is `read_head` inlined, with one unpack."""
    body_at = off + FRAME_OVERHEAD
    if body_at > len(data):
        return None
    _, length, term, index, kind, data_crc, head_crc = _FRAME.unpack_from(data, off)
    if zlib.crc32(data[off : off + _HEAD.size]) != head_crc:
        return None
    end = body_at + length
    body = data[body_at:end]
    kind_ = _KINDS.get(kind)
    if end > len(data) or kind_ is None or zlib.crc32(body) != data_crc:
        return None
    return Entry(term, index, kind_, body), end


_KINDS = {int(k): k for k in EntryKind}


def headers(data: bytes, off: int) -> Iterator[tuple[int, FrameHead]]:
    """(offset, header) of every verified header at or after `off`: from one to the
    next by its length, past damage by a search for the next magic."""
    while 0 <= off < len(data):
        head = read_head(data, off)
        if head is not None:
            yield off, head
            off += FRAME_OVERHEAD + head.length
        else:
            off = data.find(MAGIC, off + 1)


def highest_index_after(data: bytes, off: int, known: int) -> int:
    """The highest index a verified header at or after `off` names (at least `known`):
    each was written, even where its data is torn or hit."""
    return max([known, *(head.index for _, head in headers(data, off))])


def locate(data: bytes, start: int, index: int) -> int | None:
    """The offset, at or after `start`, of the first verified header naming `index`."""
    return next((off for off, head in headers(data, start) if head.index == index), None)


# -- hard state -----------------------------------------------------------------------

SLOT_SIZE = 4096
_SLOT = struct.Struct("<QQQH")  # seq, term, commit, vote length + 1 (0: none)
MAX_VOTE_BYTES = 1024


def encode_slot(seq: int, hs: HardState) -> bytes:
    vote = b"" if hs.vote is None else hs.vote.encode()
    if len(vote) > MAX_VOTE_BYTES:
        raise ValueError(f"node id of {len(vote)} bytes is too long for a hard-state slot")
    body = _SLOT.pack(seq, hs.term, hs.commit, 0 if hs.vote is None else len(vote) + 1) + vote
    return body + _CRC.pack(zlib.crc32(body))


def decode_slot(raw: bytes) -> tuple[int, HardState] | None:
    """(seq, hard state) of a slot, or None when its checksum fails (torn or flipped)."""
    if len(raw) < _SLOT.size + _CRC.size:
        return None
    seq, term, commit, vote_len = _SLOT.unpack_from(raw)
    end = _SLOT.size + max(vote_len - 1, 0)
    if vote_len - 1 > MAX_VOTE_BYTES or end + _CRC.size > len(raw):
        return None
    if zlib.crc32(raw[:end]) != _CRC.unpack_from(raw, end)[0]:
        return None
    try:
        vote = raw[_SLOT.size : end].decode() if vote_len else None
    except UnicodeDecodeError:
        return None
    return seq, HardState(term, vote, commit)


# -- snapshots ------------------------------------------------------------------------

SNAP_MAGIC = b"JLSNAP1\n"
_SNAP_HEAD = struct.Struct("<IQ")  # crc32 of the rest, its length
_SNAP_META = struct.Struct("<QQII")  # index, term, voters, learners
_NAME = struct.Struct("<H")


def encode_snapshot(snapshot: Snapshot) -> bytes:
    meta = snapshot.meta
    voters, learners = sorted(meta.conf.voters), sorted(meta.conf.learners)
    parts = [_SNAP_META.pack(meta.index, meta.term, len(voters), len(learners))]
    for node in (*voters, *learners):
        raw = node.encode()
        parts += (_NAME.pack(len(raw)), raw)
    parts.append(snapshot.data)
    body = b"".join(parts)
    return SNAP_MAGIC + _SNAP_HEAD.pack(zlib.crc32(body), len(body)) + body


def decode_snapshot(raw: bytes) -> Snapshot | None:
    """The snapshot, or None when the file is torn, flipped or not a snapshot."""
    head_end = len(SNAP_MAGIC) + _SNAP_HEAD.size
    if len(raw) < head_end or not raw.startswith(SNAP_MAGIC):
        return None
    crc, length = _SNAP_HEAD.unpack_from(raw, len(SNAP_MAGIC))
    body = memoryview(raw)[head_end:]
    if length != len(body) or zlib.crc32(body) != crc:
        return None
    index, term, n_voters, n_learners = _SNAP_META.unpack_from(body)
    off = _SNAP_META.size
    names = []
    for _ in range(n_voters + n_learners):
        (size,) = _NAME.unpack_from(body, off)
        names.append(bytes(body[off + _NAME.size : off + _NAME.size + size]).decode())
        off += _NAME.size + size
    conf = ConfState(frozenset(names[:n_voters]), frozenset(names[n_voters:]))
    return Snapshot(SnapshotMeta(index, term, conf), bytes(body[off:]))
