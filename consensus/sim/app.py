"""The replicated state machine the simulator runs: a set of client values.

Client values carry their own checksum, so applying a damaged entry is caught
where it happens; the state keeps a digest chained over every applied entry,
so two nodes (or a node and a snapshot) agree on a prefix exactly when their
digests at its last index are equal.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass, field

from consensus.types import Entry, EntryKind, Snapshot


def make_value(client: int, seq: int) -> bytes:
    body = f"c{client}-{seq}"
    return f"{body}:{zlib.crc32(body.encode()):08x}".encode()


def value_ok(data: bytes) -> bool:
    body, sep, crc = data.decode(errors="replace").rpartition(":")
    return bool(sep) and crc == f"{zlib.crc32(body.encode()):08x}"


def chain(digest: bytes, entry: Entry) -> bytes:
    h = hashlib.blake2b(digest, digest_size=16)
    h.update(f"{entry.term}/{entry.index}/{int(entry.kind)}/".encode())
    h.update(entry.data)
    return h.digest()


@dataclass(slots=True)
class StateMachine:
    index: int = 0  # the last entry applied
    digest: bytes = b""
    values: set[bytes] = field(default_factory=set)

    def apply(self, entry: Entry) -> None:
        self.index = entry.index
        self.digest = chain(self.digest, entry)
        if entry.kind is EntryKind.NORMAL:
            self.values.add(entry.data)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "index": self.index,
                "digest": self.digest.hex(),
                "values": sorted(map(bytes.decode, self.values)),
            }
        ).encode()

    @classmethod
    def restore(cls, snapshot: Snapshot) -> StateMachine:
        doc = json.loads(snapshot.data)
        return cls(doc["index"], bytes.fromhex(doc["digest"]), {v.encode() for v in doc["values"]})
