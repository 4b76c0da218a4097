"""Fixtures of the lake tests: one Spark JVM for the whole session, jetlake servers with the lake.

Servers run with `compact_interval: 0`: they seal on a short timer and hold
reclaim for the lake, but start no compactor of their own, so the tests drive
compaction in-process on the shared session and decide when it happens. The
tests that are about the compactor process start it themselves.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from benchmarks.seaweed import SeaweedS3, spark_shape
from log.compactor.compact import Compactor, Summary
from log.compactor.layout import GLOBAL, META_FILE, STREAMS, StreamRef, qualified, streams_root
from log.compactor.location import Lake as LakeAt
from log.compactor.spark import build_session
from log.segments import FileStore, NewMsg, list_segments
from log.timefmt import rfc3339
from sql.session import refresh
from tests.support.poll import poll_async
from tests.support.servers import ServerError, ServerProcess, start_server

LAKE_CONF = 'lake { seal_interval: "200ms", compact_interval: 0 }\n'
DEADLINE = 30.0


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session("jetlake-tests", master="local[2]", lake=spark_shape())
    yield session
    session.stop()


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    """One real S3-compatible server (SeaweedFS) for the tests of a worker; a bucket each."""
    server = SeaweedS3(tmp_path_factory.mktemp("seaweed")).start()
    yield server
    server.stop()


@pytest.fixture
def bucket_lake(seaweed: SeaweedS3, spark: SparkSession) -> LakeAt:
    """A lake in a new bucket of the test server, which the session's Spark can reach."""
    bucket = seaweed.bucket()
    seaweed.bind(spark, bucket)
    return seaweed.lake(bucket)


@pytest.fixture(params=["folder", "bucket"])
def shared_lake(request: pytest.FixtureRequest, tmp_path: Path) -> LakeAt:
    """The lake a test runs on: a folder, then a bucket of the test S3 server."""
    if request.param == "folder":
        return LakeAt.at(tmp_path / "lake")
    lake: LakeAt = request.getfixturevalue("bucket_lake")
    return lake


class Lake:
    """A jetlake server with the lake on, its store, and the session to compact and query with."""

    def __init__(self, tmp_path: Path, spark: SparkSession) -> None:
        self.tmp_path = tmp_path
        self.store = tmp_path / "store"
        self.lake_dir = LakeAt.at(self.store / "lake")
        self.spark = spark
        self.servers: list[ServerProcess] = []

    def start(
        self, *args: str, config: str = LAKE_CONF, wrapper: Sequence[str] = ()
    ) -> ServerProcess:
        server = start_server(
            "jetlake",
            "-js",
            "-sd",
            str(self.store),
            "-m",
            "-1",
            *args,
            config=config,
            tmp_path=self.tmp_path,
            name=f"jl{len(self.servers)}",
            wrapper=wrapper,
        )
        self.servers.append(server)
        return server

    def stream_dir(self, name: str, account: str = GLOBAL) -> Path:
        return streams_root(self.store, account) / name

    async def sealed(self, name: str, last_seq: int, account: str = GLOBAL) -> None:
        """Wait until the server has sealed every seq up to last_seq (its seal timer)."""
        folder = self.stream_dir(name, account)
        await poll_async(
            lambda: any(s.sealed and s.last_seq >= last_seq for s in list_segments(folder)),
            f"stream {qualified(account, name)} sealed up to {last_seq}",
            timeout=DEADLINE,
        )

    def compact(self) -> Summary:
        summary = Compactor(self.spark, self.store, self.lake_dir).run_once()
        assert not summary.errors, summary.errors
        return summary

    def sql(self, query: str) -> list[Any]:
        refresh(self.spark, store_dir=self.store, lake_dir=self.lake_dir)
        return self.spark.sql(query).collect()

    def stop(self) -> None:
        for server in self.servers:
            if server.running:
                try:
                    server.stop(expect_code=None)
                except ServerError:
                    server.kill()


class Folder:
    """A stream folder as the server leaves it, written through the segment store (no server)."""

    def __init__(self, store: Path, name: str) -> None:
        self.dir = store / STREAMS / name
        self.segments = FileStore(self.dir, name=name)
        doc = {"config": {"name": name, "subjects": ["s.>"], "storage": "file"}}
        doc["created"] = rfc3339(time.time_ns())
        (self.dir / META_FILE).write_text(json.dumps(doc))
        self.ref = StreamRef.load(self.dir)

    def publish(self, count: int, *, seal: bool = True) -> None:
        """`count` messages on four subjects; sealed (so the lake may take them) unless told."""
        now = time.time_ns()
        self.segments.append([NewMsg(f"s.{i % 4}", None, b"%d" % i, now) for i in range(count)])
        if seal:
            self.segments.seal(older_than_ns=time.time_ns())
        self.segments.sync()


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Folder]:
    """A stream `S` in `tmp_path / "store"`."""
    made = Folder(tmp_path / "store", "S")
    yield made
    made.segments.close()


@pytest.fixture
def lake(tmp_path: Path, spark: SparkSession) -> Iterator[Lake]:
    env = Lake(tmp_path, spark)
    yield env
    env.stop()
