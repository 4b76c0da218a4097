"""A stream snapshot brings a replica's real file store to the leader's: bounds, interior
deletes, retired rows the lake still wants, erasures, and consumer files; copied over the
wire format, in small answers, idempotently."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from log.consumers.ops import encode_create
from log.consumers.replicated import ConsumerFiles
from log.consumers.store import Saved
from log.segments.api import MsgStore, NewMsg
from log.segments.filestore import FileStore, SegmentConfig
from log.streams.snapshot import (
    GAP_SUBJECT,
    Ask,
    Rows,
    SnapshotError,
    bring,
    decode,
    decode_rows,
    encode_rows,
    rows_for,
    take,
)

SMALL = SegmentConfig(max_msgs=40, reclaim_live_ratio=0.9)


def _msgs(n: int, start: int = 0) -> list[NewMsg]:
    return [
        NewMsg(f"s.{i % 7}", b"NATS/1.0\r\nk: v\r\n\r\n" if i % 3 else None, b"x" * (i % 50), i)
        for i in range(start, start + n)
    ]


def _server(store: MsgStore, max_bytes: int, asked: list[Ask]):  # type: ignore[no-untyped-def]
    """A peer's answers, through the bytes they cross the routes as."""

    async def fetch(ask: Ask) -> Rows:
        asked.append(ask)
        return decode_rows(encode_rows(rows_for(store, ask, max_bytes)), "T")

    return fetch


def _same(a: MsgStore, b: MsgStore) -> None:
    sa, sb = a.state(with_deleted=True), b.state(with_deleted=True)
    assert (sa.first_seq, sa.last_seq, sa.msgs, sa.bytes, sa.deleted) == (
        sb.first_seq,
        sb.last_seq,
        sb.msgs,
        sb.bytes,
        sb.deleted,
    )
    assert a.subjects() == b.subjects()
    assert a.load_many(range(1, sa.last_seq + 1)) == b.load_many(range(1, sb.last_seq + 1))


def test_a_far_behind_replica_copies_rows_and_deletes_to_match(tmp_path: Path) -> None:
    leader = FileStore(tmp_path / "leader", name="T", config=SMALL)
    replica = FileStore(tmp_path / "replica", name="T", config=SMALL)
    batch = _msgs(30)
    leader.append(batch)
    replica.append(batch)  # the replica saw the first 30, then went away
    leader.append(_msgs(270, 30))
    rng = random.Random(7)
    for seq in rng.sample(range(1, 300), 40):
        leader.remove(seq, explicit=seq % 2 == 0)
    leader.purge("s.3", upto_seq=120, explicit=True)
    leader.purge(">", upto_seq=20)  # a limit retired the oldest
    leader.hold_for_lake(50)  # the lake has up to 50: rows after it are kept for it
    snap = decode(take(leader, []), "T")
    asked: list[Ask] = []
    copied = asyncio.run(bring(replica, snap, _server(leader, 2000, asked), "T"))
    _same(leader, replica)
    assert copied > 200 and len(asked) > 3  # small answers: many round trips
    assert replica.load_next(0, GAP_SUBJECT) is None
    # what clients erased reached the replica's log for its own lake, byte for byte
    size = leader.explicit_size()
    assert size > 0 and replica.explicit_log(0, size + 1) == leader.explicit_log(0, size + 1)
    # again over a replica that holds it all: nothing to copy, nothing changes
    assert asyncio.run(bring(replica, snap, _server(leader, 2000, asked), "T")) == 0
    _same(leader, replica)
    replica.close()
    reopened = FileStore(tmp_path / "replica", name="T", config=SMALL)
    _same(leader, reopened)


def test_rows_the_peer_reclaimed_become_placeholders_deleted_at_once(tmp_path: Path) -> None:
    leader = FileStore(tmp_path / "leader", name="T", config=SMALL)
    replica = FileStore(tmp_path / "replica", name="T", config=SMALL)
    for start in range(0, 200, 40):  # a segment per 40
        leader.append(_msgs(40, start))
    leader.remove_many(range(41, 121))  # two whole segments deleted: their files go
    leader.append(_msgs(5, 200))
    kept, through = leader.retained(41, 120, 1 << 20)
    assert through == 120 and len(kept) < 80  # reclaimed: the copy has to fill in
    snap = decode(take(leader, []), "T")
    asked: list[Ask] = []
    asyncio.run(bring(replica, snap, _server(leader, 1 << 20, asked), "T"))
    _same(leader, replica)
    assert replica.subject_state(GAP_SUBJECT) is None


def test_a_replica_ahead_of_the_snapshot_keeps_its_newer_messages(tmp_path: Path) -> None:
    """A restart from its own snapshot: the store already went past it."""
    store = FileStore(tmp_path / "s", name="T")
    store.append(_msgs(50))
    store.remove(10)
    snap = decode(take(store, []), "T")
    store.append(_msgs(10, 50))
    store.remove(55)

    async def never(ask: Ask) -> Rows:
        raise AssertionError("nothing to fetch")

    asyncio.run(bring(store, snap, never, "T"))
    state = store.state(with_deleted=True)
    assert (state.last_seq, state.msgs, state.deleted) == (60, 58, [10, 55])


def test_a_peer_that_answers_nothing_new_is_an_error_naming_the_stream(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s", name="T")
    leader = FileStore(tmp_path / "l", name="T")
    leader.append(_msgs(10))
    snap = decode(take(leader, []), "T")

    async def stale(ask: Ask) -> Rows:
        return Rows([], ask.first - 1, b"")

    with pytest.raises(SnapshotError, match="stream T"):
        asyncio.run(bring(store, snap, stale, "T"))


def test_garbage_is_refused_with_the_stream_named() -> None:
    with pytest.raises(SnapshotError, match="stream X: not a stream snapshot"):
        decode(b"\x00garbage", "X")
    with pytest.raises(SnapshotError, match="stream X: not a rows reply"):
        decode_rows(b"\x00\x00\x00\x05{}", "X")


def test_consumer_files_follow_the_snapshot(tmp_path: Path) -> None:
    files = ConsumerFiles("T", tmp_path, sync_interval_ns=None)
    position = ("dseq", "sseq", "adflr", "asflr", "last_delivered", "last_acked")
    state = {"pending": [[3, 1, 5]], "redelivered": [], **dict.fromkeys(position, 4)}
    keep = Saved("KEEP", {"durable_name": "KEEP"}, "2026-01-01T00:00:00Z", state)
    files("GONE", encode_create({"durable_name": "GONE"}, "2026-01-01T00:00:00Z", state))
    files("KEEP", encode_create({"durable_name": "KEEP"}, "2025-01-01T00:00:00Z", {**state}))
    files.restore([keep])
    [saved] = files.saved()
    assert saved.name == "KEEP" and saved.created == keep.created
    assert saved.state is not None and saved.state["pending"] == [[3, 1, 5]]
    snap = decode(take(FileStore(tmp_path / "store", name="T"), files.saved()), "T")
    assert snap.consumers == [saved]
    files.close()
