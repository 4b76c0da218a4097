"""Small JSON state files (peers.json, stream.json, a consumer's meta and state, the
lake's pins), framed with a checksum so damage is found at read, never trusted.

Layout: one header line, then the JSON document:

    JLSTATE1 <crc32 of the body, 8 hex digits> <body length in bytes>\\n<body>

The header is text so the file stays readable with `cat`. A file is replaced
whole (`replace_durably`: a temporary file, fsynced, renamed over the old one),
so a crash leaves the old file or the new one; what fails the check is a torn
copy (a disk that lied about a sync) or flipped bits, and `StateFileError`
names the file and the byte offset where it stops being trustworthy.

Files written before the framing (a plain JSON document, starting with `{` or
`[`) are still read, by parsing alone: a flip that still parses cannot be seen
in them, and the next write frames them.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

from consensus.durability import fsync_dir, sync_soon
from consensus.wal_recovery import replace_durably, replace_unsynced

MAGIC = b"JLSTATE1 "
_HEADER_MAX = 64  # magic, 8 hex digits, a length: far less than this before the newline
_HEX = b"0123456789abcdef"
DAMAGED_SUFFIX = ".damaged"


class StateFileError(Exception):
    """A state file failed its check; `path` and `offset` say where."""

    def __init__(self, path: Path, offset: int, reason: str) -> None:
        super().__init__(f"{path}: damaged at byte {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


def encode_state(doc: Any) -> bytes:
    body = json.dumps(doc, separators=(",", ":")).encode()
    return MAGIC + b"%08x %d\n" % (zlib.crc32(body), len(body)) + body


def decode_state(data: bytes, path: Path) -> Any:
    """The document, or `StateFileError`; `path` is only for the error."""
    if not data:
        raise StateFileError(path, 0, "empty file")
    if not data.startswith(MAGIC):
        return _legacy(data, path)
    end = data.find(b"\n", 0, _HEADER_MAX)
    words = data[len(MAGIC) : end].split(b" ") if end > 0 else []
    # Exactly as written (lowercase hex): a flip from `a` to `A` is damage too.
    if len(words) != 2 or len(words[0]) != 8 or words[0].strip(_HEX) or not words[1].isdigit():
        raise StateFileError(path, 0, "header unreadable")
    crc, size, body = int(words[0], 16), int(words[1]), data[end + 1 :]
    if len(body) < size:
        raise StateFileError(path, len(data), f"torn: {len(body)} of {size} bytes of JSON")
    if len(body) > size:
        raise StateFileError(path, end + 1 + size, "bytes after the document")
    if zlib.crc32(body) != crc:
        raise StateFileError(path, end + 1, f"checksum of the {size} bytes after it fails")
    try:
        return json.loads(body)
    except ValueError as exc:  # a writer's bug, not the disk's: the checksum held
        raise StateFileError(path, end + 1, f"not JSON: {exc}") from None


def _legacy(data: bytes, path: Path) -> Any:
    if data[:1] not in (b"{", b"["):
        raise StateFileError(path, 0, "neither a framed state file nor JSON")
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise StateFileError(path, exc.pos, f"unframed JSON unreadable: {exc.msg}") from None
    except ValueError as exc:  # not UTF-8
        raise StateFileError(path, 0, f"unframed JSON unreadable: {exc}") from None


def read_state(path: Path) -> Any:
    """The document in `path`; `FileNotFoundError` when there is none, `StateFileError`
    when it is damaged."""
    return decode_state(path.read_bytes(), path)


def write_state(path: Path, doc: Any, *, shared: bool = False) -> None:
    """Replace `path` durably. `shared`: other processes may replace the same file
    at once (the lake's shared pin), so each writes aside under its own name."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp") if shared else None
    replace_durably(path, encode_state(doc), tmp=tmp)


def write_new_state(path: Path, doc: Any, sync_interval_ns: int | None) -> None:
    """Write a file that replaces no older state (a stream's config at its create) with
    the durability `sync_interval` gives a message: under `always`, fsynced with its
    folder and the folder above (which names a new folder) before this returns; else in
    place now, so a kill -9 keeps it, and fsynced within the interval off the event
    loop. A power cut inside that interval loses the new file or leaves it torn, which
    its read reports (as it does a damaged one)."""
    if sync_interval_ns is None:
        replace_durably(path, encode_state(doc))
        fsync_dir(path.parent.parent)
        return
    replace_unsynced(path, encode_state(doc))
    sync_soon(sync_interval_ns, path, path.parent, path.parent.parent)


def set_aside(path: Path) -> Path:
    """Keep a damaged file for an operator under another name, out of every reader's way."""
    aside = path.with_name(path.name + DAMAGED_SUFFIX)
    os.replace(path, aside)
    return aside
