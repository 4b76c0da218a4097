"""jetlake's stream backup archive: the bytes `STREAM.SNAPSHOT` streams out and
`STREAM.RESTORE` takes back.

Only jetlake restores what jetlake backed up, so the archive is jetlake's own,
made of the pieces a replica already exchanges when it catches up from a peer
(`log.streams.snapshot`): the store's shape and its consumers' state, then the
rows by seq range with the log of erasures. Restoring is that same catch-up
with the archive as the peer, so a restored stream keeps its seqs, gaps,
timestamps and headers. Frames are length-prefixed after a magic header, and
the whole is wrapped in the Snappy framing format, because natscli (jsm.go)
decodes every backup with its S2 reader, which reads Snappy frames, to count
the bytes it received; its CRC-32C per chunk also guards the file a user keeps.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import Any, BinaryIO

import cramjam

from log.consumers.store import Saved
from log.segments.api import MsgStore
from log.streams.snapshot import (
    Ask,
    Rows,
    SnapshotError,
    StreamSnapshot,
    bring,
    decode,
    decode_rows,
    encode_rows,
    rows_for,
    take,
)

MAGIC = b"JETLAKE-BACKUP/1"
ROWS_BYTES = 1 << 20  # rows per frame: one frame is read and compressed per loop turn
_LEN = struct.Struct(">I")
_CHUNK_HEAD = 4  # Snappy framing: type byte, 24-bit little-endian length
_IDENT = b"\xff\x06\x00\x00sNaPpY"
_DATA_CHUNKS = (0x00, 0x01)  # compressed, uncompressed (each with a CRC-32C)


class BackupError(ValueError):
    """Bytes that are not a jetlake backup of the stream named in the message."""


class ArchiveWriter:
    """A stream's archive, produced piece by piece (`read`) as a sender's window allows.

    The shape (bounds, deletes, consumers) is taken at construction, in one turn; rows
    are read later, up to that shape's last seq and erasure-log size. A message deleted
    meanwhile becomes a gap, so what is restored is the stream as it was at the start
    less what was deleted while the backup ran, never a message it did not hold then."""

    def __init__(
        self,
        store: MsgStore,
        *,
        config: dict[str, Any],
        consumers: Sequence[Saved],
        name: str,
    ) -> None:
        shape = take(store, consumers)
        self._store = store
        self._name = name
        self._snap = decode(shape, name)
        self._next_seq = max(self._snap.keep_from, 1)
        self._log_at = 0
        self._codec = cramjam.snappy.Compressor()
        meta = json.dumps({"config": config}).encode()  # for a reader of the file; unused
        self._codec.compress(MAGIC + _frame(meta) + _frame(shape))
        self.done = False

    def read(self) -> bytes:
        """The next compressed piece; after the last one `done` is set."""
        if self.done:
            return b""
        snap = self._snap
        if self._next_seq > snap.last_seq and self._log_at >= snap.explicit_size:
            self.done = True
            return bytes(self._codec.finish())
        ask = Ask(self._next_seq, snap.last_seq, self._log_at, snap.explicit_size)
        rows = rows_for(self._store, ask, ROWS_BYTES)
        if not rows.helps(ask):
            raise BackupError(f"stream {self._name}: seq {ask.first} vanished during the backup")
        self._next_seq = max(rows.through, self._next_seq - 1) + 1
        self._log_at += len(rows.explicit)
        self._codec.compress(_frame(encode_rows(rows)))
        return bytes(self._codec.flush())


class ArchiveReader:
    """An archive file read back frame by frame, each Snappy chunk checked by its CRC."""

    def __init__(self, file: BinaryIO, name: str) -> None:
        self._file = file
        self._name = name
        self._buf = bytearray()
        if self._take(len(MAGIC)) != MAGIC:
            raise BackupError(f"stream {name}: not a jetlake backup (bad magic)")

    def header(self) -> StreamSnapshot:
        """The store's shape and consumers (the config frame before it is skipped: the
        restore request says which config the stream gets)."""
        self._next_frame()
        try:
            return decode(self._next_frame(), self._name)
        except SnapshotError as exc:
            raise BackupError(str(exc)) from None

    async def fetch(self, ask: Ask) -> Rows:
        """The archive's next rows frame, as a peer answers a catch-up's ask."""
        try:
            return decode_rows(self._next_frame(), self._name)
        except SnapshotError as exc:
            raise BackupError(str(exc)) from None

    def _next_frame(self) -> bytes:
        (size,) = _LEN.unpack(self._take(_LEN.size))
        return self._take(size)

    def _take(self, size: int) -> bytes:
        while len(self._buf) < size:
            if not self._fill():
                raise BackupError(f"stream {self._name}: backup ends early (truncated)")
        out = bytes(self._buf[:size])
        del self._buf[:size]
        return out

    def _fill(self) -> bool:
        """Append the next data chunk's bytes to the buffer; False at the end of the file."""
        while True:
            head = self._file.read(_CHUNK_HEAD)
            if not head:
                return False
            if len(head) < _CHUNK_HEAD:
                raise BackupError(f"stream {self._name}: backup ends inside a chunk header")
            kind, size = head[0], int.from_bytes(head[1:], "little")
            body = self._file.read(size)
            if len(body) < size:
                raise BackupError(f"stream {self._name}: backup ends inside a chunk")
            if kind in _DATA_CHUNKS:
                try:  # decoded as a one-chunk stream, so the codec checks its CRC
                    self._buf += bytes(cramjam.snappy.decompress(_IDENT + head + body))
                except cramjam.DecompressionError as exc:
                    raise BackupError(f"stream {self._name}: corrupt backup chunk: {exc}") from None
                return True
            if kind == 0xFF:
                if body != _IDENT[_CHUNK_HEAD:]:
                    raise BackupError(f"stream {self._name}: not a Snappy-framed backup")
            elif kind < 0x80:
                raise BackupError(f"stream {self._name}: unknown backup chunk type {kind}")


async def restore_into(store: MsgStore, reader: ArchiveReader, name: str) -> StreamSnapshot:
    """Fill an empty store from an archive; the archive's shape (with its consumers)."""
    header = reader.header()
    try:
        await bring(store, header, reader.fetch, name)
    except SnapshotError as exc:
        raise BackupError(str(exc)) from None
    return header


def _frame(body: bytes) -> bytes:
    return _LEN.pack(len(body)) + body
