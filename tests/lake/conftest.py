"""Fixtures of the lake tests: one Spark JVM for the whole session, jetlake servers with the lake.

Servers run with `compact_interval: 0`: they seal on a short timer and hold
reclaim for the lake, but start no compactor of their own, so the tests drive
compaction in-process on the shared session and decide when it happens. The
tests that are about the compactor process start it themselves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from log.compactor.compact import Compactor, Summary
from log.compactor.layout import STREAMS
from log.compactor.spark import build_session
from log.segments import list_segments
from sql.session import refresh
from tests.support.servers import ServerError, ServerProcess, start_server

LAKE_CONF = 'lake { seal_interval: "200ms", compact_interval: 0 }\n'
DEADLINE = 30.0


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session("jetlake-tests", master="local[2]")
    yield session
    session.stop()


class Lake:
    """A jetlake server with the lake on, its store, and the session to compact and query with."""

    def __init__(self, tmp_path: Path, spark: SparkSession) -> None:
        self.tmp_path = tmp_path
        self.store = tmp_path / "store"
        self.lake_dir = self.store / "lake"
        self.spark = spark
        self.servers: list[ServerProcess] = []

    def start(self, *args: str, config: str = LAKE_CONF) -> ServerProcess:
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
        )
        self.servers.append(server)
        return server

    def stream_dir(self, name: str) -> Path:
        return self.store / STREAMS / name

    async def sealed(self, name: str, last_seq: int) -> None:
        """Wait until the server has sealed every seq up to last_seq (its seal timer)."""
        await poll(
            lambda: any(
                s.sealed and s.last_seq >= last_seq for s in list_segments(self.stream_dir(name))
            ),
            f"stream {name} sealed up to {last_seq}",
        )

    def compact(self) -> Summary:
        summary = Compactor(self.spark, self.store, self.lake_dir).run_once()
        assert not summary.errors, summary.errors
        return summary

    def sql(self, query: str) -> list[Any]:
        refresh(self.spark, store_dir=self.store)
        return self.spark.sql(query).collect()

    def stop(self) -> None:
        for server in self.servers:
            if server.running:
                try:
                    server.stop(expect_code=None)
                except ServerError:
                    server.kill()


@pytest.fixture
def lake(tmp_path: Path, spark: SparkSession) -> Iterator[Lake]:
    env = Lake(tmp_path, spark)
    yield env
    env.stop()


async def poll(
    check: Callable[[], bool | Awaitable[bool]], what: str, deadline: float = DEADLINE
) -> None:
    """Poll until check() is true; fail naming what did not happen in time."""
    end = time.monotonic() + deadline
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline}s: {what}")
        await asyncio.sleep(0.05)
