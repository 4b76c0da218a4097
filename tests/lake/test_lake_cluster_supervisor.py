"""The lake supervisor over a replicated stream: who compacts, and what every replica holds.

No server and no Spark: the supervisor ticks over stand-ins for the engine and
its streams, with real segment stores and pins on disk.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ingest.server.lake import LakeSupervisor
from ingest.server.settings import LakeConfig
from log.compactor.layout import (
    REPLICA_FILE,
    STREAMS,
    StreamRef,
    describe_replica,
    lake_seq,
    stream_dirs,
    write_shared_pin,
)
from log.compactor.maintain import current_tables
from log.config import StreamConfig
from log.segments import FileStore, SegmentConfig, list_segments
from log.timefmt import rfc3339
from tests.segments.conftest import msgs


@dataclass
class Replica:
    """What the supervisor reads of a `log.streams.stream.Stream`."""

    config: StreamConfig
    store: FileStore
    accepting: bool
    created_ns: int = field(default_factory=time.time_ns)

    def snapshot_config(self) -> dict[str, Any]:
        return {"config": self.config.to_json(), "created": rfc3339(self.created_ns)}


@dataclass
class Engine:
    """What the supervisor reads of a `JetStream` engine."""

    store_dir: Path
    streams: dict[str, Replica]
    cluster: object | None
    account: str = "$G"

    def start_supervisor(self, sup: LakeSupervisor) -> None:
        sup.start(self.store_dir.parent, lambda: [self])  # type: ignore[list-item]


class Lake:
    def __init__(self, tmp_path: Path, *, clustered: bool, accepting: bool) -> None:
        store = tmp_path / "store"
        self.dir = store / STREAMS / "L"
        segments = FileStore(self.dir, name="L", config=SegmentConfig(max_msgs=10))
        segments.hold_for_lake(0)  # as the supervisor's store opener does
        self.stream = Replica(StreamConfig(name="L", subjects=("l.>",)), segments, accepting)
        self.engine = Engine(
            store / "jetstream", {"L": self.stream}, object() if clustered else None
        )
        self.lake_dir = tmp_path / "shared-lake"
        self.supervisor = LakeSupervisor(LakeConfig(enabled=True, dir=str(self.lake_dir)))
        self.wanted = 0  # how many ticks asked for a compactor

    def want(self) -> None:
        self.wanted += 1

    def ref(self) -> StreamRef:
        return StreamRef.load(self.dir)


@pytest.fixture
def follower(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lake]:
    lake = Lake(tmp_path, clustered=True, accepting=False)
    monkeypatch.setattr(lake.supervisor, "_ensure_compactor", lake.want)
    yield lake
    lake.stream.store.close()


async def test_a_follower_holds_reclaim_above_the_shared_pin_and_does_not_compact(
    follower: Lake,
) -> None:
    sup, store = follower.supervisor, follower.stream.store
    follower.engine.start_supervisor(sup)
    try:
        for count in (10, 10, 5):
            store.append(msgs(["l.x"] * count))
        sup.tick()
        ref = follower.ref()
        assert not ref.leads and ref.created == rfc3339(follower.stream.created_ns)
        ref.table_path(follower.lake_dir).mkdir()  # the leader's compactor
        write_shared_pin(ref, follower.lake_dir, 10)  # committed 1..10 to the table
        assert store.purge(">", upto_seq=21) == 20  # retention: the lake still lacks 11..20
        sup.tick()
        held = [s.first_seq for s in list_segments(follower.dir) if s.rows]
        assert held == [11, 21]  # 1..10 reclaimed: in the lake
        assert sup.status()["streams"]["L"]["lake_seq"] == 10
        assert follower.wanted == 0
        follower.stream.accepting = True  # elected, caught up
        sup.tick()
        assert follower.ref().leads and follower.wanted == 1
        follower.stream.accepting = False  # deposed
        sup.tick()
        assert not follower.ref().leads and follower.wanted == 1
    finally:
        await sup.stop()


async def test_a_deleted_and_recreated_replica_is_described_again(follower: Lake) -> None:
    sup = follower.supervisor
    follower.engine.start_supervisor(sup)
    try:
        sup.tick()
        (follower.dir / REPLICA_FILE).unlink()
        sup.tick()
        assert stream_dirs(follower.dir.parents[3]) == [follower.dir]
    finally:
        await sup.stop()


async def test_a_single_server_writes_no_replica_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = Lake(tmp_path, clustered=False, accepting=True)
    monkeypatch.setattr(lake.supervisor, "_ensure_compactor", lake.want)
    lake.engine.start_supervisor(lake.supervisor)
    try:
        lake.stream.store.append(msgs(["l.x"] * 5))
        lake.supervisor.tick()
        assert not (lake.dir / REPLICA_FILE).exists() and lake.wanted == 1
    finally:
        await lake.supervisor.stop()
        lake.stream.store.close()


def test_a_late_compactor_does_not_lower_the_shared_pin(follower: Lake) -> None:
    describe_replica(follower.dir, follower.stream.snapshot_config(), leader=False)
    ref = follower.ref()
    ref.table_path(follower.lake_dir).mkdir()
    write_shared_pin(ref, follower.lake_dir, 150)
    write_shared_pin(ref, follower.lake_dir, 100)  # the deposed leader's, after its last commit
    assert lake_seq(ref, follower.lake_dir) == 150


def test_only_the_leaders_server_maintains_the_shared_table(follower: Lake) -> None:
    describe_replica(follower.dir, follower.stream.snapshot_config(), leader=False)
    table = follower.ref().table_path(follower.lake_dir)
    (table / "_delta_log").mkdir()
    store = follower.dir.parents[3]
    assert current_tables(store, follower.lake_dir) == []
    describe_replica(follower.dir, follower.stream.snapshot_config(), leader=True)
    assert current_tables(store, follower.lake_dir) == [("L", table)]
