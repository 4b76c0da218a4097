"""jetlake's backup archive without a server: a round trip through memory stores, and
damage (a flipped byte, a cut file, a foreign file) refused with the stream's name."""

from __future__ import annotations

import asyncio
import io
import os

import pytest

from log.backup_archive import ArchiveReader, ArchiveWriter, BackupError, restore_into
from log.consumers.store import Saved
from log.segments.api import NewMsg
from log.segments.memstore import MemoryStore


def _store() -> MemoryStore:
    store = MemoryStore(name="S")
    store.append(
        [
            NewMsg(
                f"s.{i % 5}",
                b"NATS/1.0\r\nA: %d\r\n\r\n" % i if i % 2 else None,
                os.urandom(300),
                i,
            )
            for i in range(1, 2001)
        ]
    )
    store.remove_many([3, 4, 1500])
    store.purge(">", upto_seq=10)  # first seq 10
    return store


def _archive(store: MemoryStore, consumers: list[Saved] | None = None) -> bytes:
    writer = ArchiveWriter(store, config={"name": "S"}, consumers=consumers or [], name="S")
    out = bytearray()
    while not writer.done:
        out += writer.read()
    return bytes(out)


def _restore(data: bytes) -> tuple[MemoryStore, list[Saved]]:
    store = MemoryStore(name="S")
    shape = asyncio.run(restore_into(store, ArchiveReader(io.BytesIO(data), "S"), "S"))
    return store, shape.consumers


def test_round_trip_keeps_seqs_gaps_headers_and_consumers() -> None:
    store = _store()
    consumer = Saved("D", {"durable_name": "D"}, "2026-01-01T00:00:00Z", {"delivered": 12})
    data = _archive(store, [consumer])
    assert data.startswith(b"\xff\x06\x00\x00sNaPpY")  # what natscli's S2 reader decodes
    copy, consumers = _restore(data)
    assert copy.state(with_deleted=True) == store.state(with_deleted=True)
    assert [copy.load(seq) for seq in range(1, 2002)] == [store.load(seq) for seq in range(1, 2002)]
    assert consumers == [consumer]


def test_an_empty_stream_round_trips() -> None:
    copy, _ = _restore(_archive(MemoryStore(name="S")))
    assert copy.state().msgs == 0


def test_damage_is_refused_with_the_stream_name() -> None:
    data = _archive(_store())
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x40
    for bad, words in (
        (bytes(flipped), "stream S: "),
        (data[: len(data) // 2], "stream S: backup ends"),
        (b"\xff\x06\x00\x00sNaPpY" + b"\x01\x08\x00\x00" + b"abcdefgh", "stream S: "),
        (b"not a backup at all", "stream S: "),
    ):
        with pytest.raises(BackupError, match=words):
            _restore(bad)
