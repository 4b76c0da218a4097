"""Raft messages as bytes: length-prefixed frames, encoded and decoded without I/O.

The same frames travel over the loopback TCP transport now and over the
cluster's route connections later, so nothing here knows about sockets: a
`FrameDecoder` is fed whatever bytes arrived and hands back whole messages.
Peers are not trusted to be well-formed (a bug, a version skew, a stray
client on the port): any malformed frame raises `CodecError`, after which
the decoder refuses further input, because the byte stream has lost its
framing and the connection must be dropped.

Layout (big-endian): a frame is a u32 payload length, then the payload:
  u8 version, u8 type, u8 flags (bit 0: reject, bit 1: has snapshot, bit 2: held),
  u64 term, log_term, index, commit, reject_hint,
  str src, str dst, blob context,
  u32 entry count, then per entry: u64 term, u64 index, u8 kind, blob data;
  the snapshot if flagged: u64 index, u64 term, u16 voter count + strs,
  u16 learner count + strs, blob data.
A str is a u16 length and UTF-8; a blob a u32 length and bytes.

A frame is read by the compiled extension when it is installed (`decode_raft` in
native/src/raft_codec.rs, chosen as the client protocol's codec is:
`ingest.parser.fast`): one call where the reader below makes a dozen, which each
follower pays per APPEND and a leader per answer. The reader stays the reference and
reads whatever the extension hands back (a snapshot, a malformed frame), so the error
named is always its own.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from consensus.types import (
    ConfState,
    Entry,
    EntryKind,
    Message,
    MessageType,
    Snapshot,
    SnapshotMeta,
)
from ingest.parser.fast import native

VERSION = 1
MAX_FRAME = 64 << 20  # one APPEND of max_append_entries large entries fits; garbage does not

_LEN = struct.Struct(">I")
_HEAD = struct.Struct(">BBBQQQQQ")
_ENTRY = struct.Struct(">QQBI")
_SNAP = struct.Struct(">QQ")
_U16 = struct.Struct(">H")
_REJECT = 1
_KINDS = {kind.value: kind for kind in EntryKind}
_TYPES = {kind.value: kind for kind in MessageType}
# Each enum's members by value, for the compiled reader (values are 0, 1, 2...).
_KIND_LIST = tuple(_KINDS[value] for value in range(len(_KINDS)))
_TYPE_LIST = tuple(_TYPES[value] for value in range(len(_TYPES)))
_HAS_SNAPSHOT = 2
_HELD = 4
# A frame without a snapshot, a context or entries: its length and head, the names, then
# an empty context and an entry count of 0.
_FRAME_HEAD = struct.Struct(">IBBBQQQQQ")
_NO_CONTEXT_NO_ENTRIES = b"\0" * 8
_PLAIN_SIZE = _HEAD.size + len(_NO_CONTEXT_NO_ENTRIES)  # the payload's, besides the names
_NAMES: dict[str, bytes] = {}
_MAX_NAMES = 1024  # node ids are few; a stray flood of names is encoded each time


class CodecError(ValueError):
    """Bytes that are not a well-formed frame (or a message that cannot become one)."""


def encode(msg: Message) -> bytes:
    """One frame: the length prefix and the payload."""
    try:
        if not msg.entries and msg.snapshot is None and not msg.context:
            return _bare(msg)
        payload = _payload(msg)
    except struct.error as exc:  # a negative or oversized number
        raise CodecError(f"cannot encode {msg.type.name} to {msg.dst}: {exc}") from exc
    if len(payload) > MAX_FRAME:
        raise CodecError(f"message to {msg.dst} is {len(payload)} bytes, over {MAX_FRAME}")
    return _LEN.pack(len(payload)) + payload


def _bare(msg: Message) -> bytes:
    """The frame of a message that is its head and names alone (an answer, a vote, a
    heartbeat): the same bytes as `_payload`'s behind their length, packed with it in
    one call. Every hop of a replicated publish sends one, and Python's per-call cost
    is most of a hop: so its fields are spelled out here rather than taken from
    `_fields` (0.5 µs an answer instead of 0.7), and a snapshot flag cannot be set."""
    src, dst = _name(msg.src), _name(msg.dst)
    size = _PLAIN_SIZE + len(src) + len(dst)
    flags = (_REJECT if msg.reject else 0) | (_HELD if msg.held else 0)
    head = _FRAME_HEAD.pack(
        size,
        VERSION,
        msg.type,
        flags,
        msg.term,
        msg.log_term,
        msg.index,
        msg.commit,
        msg.reject_hint,
    )
    return head + src + dst + _NO_CONTEXT_NO_ENTRIES


def _fields(msg: Message) -> tuple[int, ...]:
    """The head's fields after the version, in `_HEAD`'s order."""
    flags = (
        (_REJECT if msg.reject else 0)
        | (_HAS_SNAPSHOT if msg.snapshot else 0)
        | (_HELD if msg.held else 0)
    )
    return (msg.type, flags, msg.term, msg.log_term, msg.index, msg.commit, msg.reject_hint)


def _add_entries(parts: list[bytes], entries: Sequence[Entry]) -> None:
    parts.append(_LEN.pack(len(entries)))
    for entry in entries:
        parts.append(_ENTRY.pack(entry.term, entry.index, entry.kind, len(entry.data)))
        parts.append(entry.data)


def _name(node: str) -> bytes:
    """A node id as a str field; the few a server talks to are kept encoded."""
    raw = _NAMES.get(node)
    if raw is None:
        raw = _str(node)
        if len(_NAMES) < _MAX_NAMES:
            _NAMES[node] = raw
    return raw


def _payload(msg: Message) -> bytes:
    parts = [_HEAD.pack(VERSION, *_fields(msg)), _name(msg.src), _name(msg.dst), _blob(msg.context)]
    _add_entries(parts, msg.entries)
    if msg.snapshot is not None:
        meta = msg.snapshot.meta
        parts.append(_SNAP.pack(meta.index, meta.term))
        for members in (meta.conf.voters, meta.conf.learners):
            parts.append(_U16.pack(len(members)))
            parts.extend(_str(node) for node in sorted(members))
        parts.append(_blob(msg.snapshot.data))
    return b"".join(parts)


def _str(text: str) -> bytes:
    raw = text.encode()
    return _U16.pack(len(raw)) + raw


def _blob(data: bytes) -> bytes:
    return _LEN.pack(len(data)) + data


def decode(frame: bytes) -> Message:
    """One whole frame (length prefix included) to its message."""
    if len(frame) < _LEN.size or _LEN.unpack_from(frame)[0] != len(frame) - _LEN.size:
        raise CodecError("frame length does not match its prefix")
    data = bytes(frame)
    return _read(data, _LEN.size, len(data))


def _read(data: bytes, at: int, end: int) -> Message:
    """The message in data[at:end]: the compiled reader's, else the reference's."""
    if native is not None:
        msg: Message | None = native.decode_raft(
            data, at, end, Message, Entry, _TYPE_LIST, _KIND_LIST
        )
        if msg is not None:
            return msg
    return _Reader(data, at, end).message()


class FrameDecoder:
    """Sans-IO: feed bytes as they arrive, get back every message they complete."""

    def __init__(self, *, max_frame: int = MAX_FRAME) -> None:
        self._buffer = bytearray()
        self._max = max_frame
        self._broken: CodecError | None = None

    def feed(self, data: bytes) -> list[Message]:
        if self._broken is not None:
            raise self._broken
        buffer = self._buffer
        buffer += data
        messages: list[Message] = []
        start = 0
        try:
            end = self._frame_end(buffer, 0)
            if not end or end > len(buffer):
                return messages  # no whole frame yet: no copy either
            held = bytes(buffer)  # one copy per feed, however many frames it completes
            while end and end <= len(held):
                messages.append(_read(held, start + _LEN.size, end))
                start = end
                end = self._frame_end(held, start)
        except CodecError as exc:
            self._broken = exc
            raise
        finally:
            del buffer[:start]
        return messages

    def _frame_end(self, data: bytes | bytearray, start: int) -> int:
        """Where the frame at `start` ends; 0 while its length prefix is incomplete."""
        if len(data) - start < _LEN.size:
            return 0
        (size,) = _LEN.unpack_from(data, start)
        if size > self._max:
            raise CodecError(f"frame of {size} bytes announced, limit {self._max}")
        return start + _LEN.size + size

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held back."""
        return len(self._buffer)


class _Reader:
    """Reads one payload, data[at:end], front to back; every shortfall or bad value is a
    CodecError. Offsets into one bytes object: no view or copy per field."""

    def __init__(self, data: bytes, at: int, end: int) -> None:
        self._data = data
        self._at = at
        self._end = end

    def _take(self, size: int) -> bytes:
        at = self._at
        if at + size > self._end:
            raise CodecError(f"frame truncated at byte {at} (needed {size} more)")
        self._at = at + size
        return self._data[at : at + size]

    def _unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        at = self._at
        if at + fmt.size > self._end:
            raise CodecError(f"frame truncated at byte {at} (needed {fmt.size} more)")
        self._at = at + fmt.size
        return fmt.unpack_from(self._data, at)

    def _str(self) -> str:
        (size,) = self._unpack(_U16)
        try:
            return self._take(size).decode()
        except UnicodeDecodeError as exc:
            raise CodecError(f"node name is not UTF-8: {exc}") from exc

    def _names(self) -> frozenset[str]:
        (count,) = self._unpack(_U16)
        return frozenset(self._str() for _ in range(count))

    def _blob(self) -> bytes:
        (size,) = self._unpack(_LEN)
        return self._take(size)

    def message(self) -> Message:
        version, kind, flags, term, log_term, index, commit, hint = self._unpack(_HEAD)
        if version != VERSION:
            raise CodecError(f"frame version {version}, this node speaks {VERSION}")
        if flags & ~(_REJECT | _HAS_SNAPSHOT | _HELD):
            raise CodecError(f"unknown flags {flags:#x}")
        src, dst, context = self._str(), self._str(), self._blob()
        (count,) = self._unpack(_LEN)
        entries = self._entries(count) if count else ()
        snapshot = self._snapshot() if flags & _HAS_SNAPSHOT else None
        if self._at != self._end:
            raise CodecError(f"{self._end - self._at} stray bytes after the message")
        msg_type = _TYPES.get(kind)
        if msg_type is None:
            raise CodecError(f"unknown MessageType {kind}")
        return Message(
            msg_type,
            src,
            dst,
            term,
            log_term=log_term,
            index=index,
            entries=entries,
            commit=commit,
            reject=bool(flags & _REJECT),
            reject_hint=hint,
            context=context,
            snapshot=snapshot,
            held=bool(flags & _HELD),
        )

    def _entries(self, count: int) -> tuple[Entry, ...]:
        """The hot loop of a follower: inlined, since an APPEND carries hundreds."""
        data, at, end = self._data, self._at, self._end
        if count * _ENTRY.size > end - at:
            raise CodecError(f"{count} entries announced, the frame cannot hold them")
        unpack, head, kinds = _ENTRY.unpack_from, _ENTRY.size, _KINDS
        entries = []
        for _ in range(count):
            if at + head > end:
                raise CodecError(f"frame truncated at byte {at} (an entry header)")
            term, index, kind, size = unpack(data, at)
            at += head
            if at + size > end:
                raise CodecError(f"frame truncated at byte {at} (needed {size} more)")
            entry_kind = kinds.get(kind)
            if entry_kind is None:
                raise CodecError(f"unknown EntryKind {kind}")
            entries.append(Entry(term, index, entry_kind, data[at : at + size]))
            at += size
        self._at = at
        return tuple(entries)

    def _snapshot(self) -> Snapshot:
        index, term = self._unpack(_SNAP)
        voters = self._names()
        learners = self._names()
        return Snapshot(SnapshotMeta(index, term, ConfState(voters, learners)), self._blob())
