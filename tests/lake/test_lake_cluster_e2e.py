"""An R3 stream's lake across a leader failover, on three real `jetlake serve` processes.

The servers share one lake dir and run their own compactor processes: only the
stream leader's server starts one. The leader is killed with SIGKILL while its
compactor is at work and messages are still being published; the new leader's
compactor continues from what the table holds. At the end the Delta table holds
every committed seq of the stream exactly once.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable
from nats.js.api import StreamConfig
from pyspark.sql import SparkSession

from benchmarks.seaweed import SeaweedS3
from log.compactor.compact import lake_progress
from log.compactor.layout import STREAMS, StreamRef
from log.compactor.location import Lake, LakePath
from sql.session import refresh
from tests.jscluster.support import (
    connect,
    eventually,
    jsz,
    leader_of,
    server_name,
    start_js_cluster,
    stream_messages,
)
from tests.support.servers import ServerError, ServerProcess

pytestmark = pytest.mark.timeout(300)

LAKE_DEADLINE = 240.0  # a compactor's JVM and first commits: seconds, minutes on a loaded machine


TIMING = 'seal_interval: "200ms", compact_interval: 1'


def lake_conf(lake_dir: Path) -> str:
    return f'lake {{ dir: "{lake_dir}", {TIMING} }}\n'


def store_of(server: ServerProcess) -> Path:
    return Path(server.args[server.args.index("-sd") + 1])


def compacting(servers: list[ServerProcess]) -> list[str]:
    """The servers whose lake compactor process runs now."""
    return [server_name(s) for s in servers if s.running and jsz(s)["lake"]["compactor"]["running"]]


def lake_seqs(table: LakePath) -> list[int]:
    opened = DeltaTable(table.uri, storage_options=table.delta_options)
    rows = opened.to_pyarrow_dataset().to_table(columns=["seq"])
    return sorted(rows.column("seq").to_pylist())


async def lake_reaches(table: LakePath, app_id: str, seq: int) -> None:
    await eventually(
        lambda: asyncio.sleep(0, lake_progress(table, app_id) >= seq),
        f"the lake holding seq {seq}",
        timeout=LAKE_DEADLINE,
    )


async def test_failover_keeps_every_committed_message_in_the_lake_once(
    tmp_path: Path, spark: SparkSession
) -> None:
    await failovers(tmp_path, spark, rounds=1, batch=100)


@pytest.mark.soak
@pytest.mark.timeout(900)
async def test_repeated_failovers_keep_the_lake_exact(tmp_path: Path, spark: SparkSession) -> None:
    await failovers(tmp_path, spark, rounds=4, batch=500)


@pytest.mark.soak  # three servers and their compactors' JVMs on a bucket
@pytest.mark.timeout(900)
async def test_failover_keeps_the_lake_in_a_bucket_exact(
    tmp_path: Path, spark: SparkSession, seaweed: SeaweedS3, bucket_lake: Lake
) -> None:
    config = seaweed.lake_config(bucket_lake.root, TIMING)
    await failovers(tmp_path, spark, rounds=1, batch=100, lake=(bucket_lake, config))


async def failovers(
    tmp_path: Path,
    spark: SparkSession,
    *,
    rounds: int,
    batch: int,
    lake: tuple[Lake, str] | None = None,
) -> None:
    """Publish, kill the stream leader with SIGKILL mid-way, publish on; `rounds` times (the
    killed server comes back between rounds, as a follower). Then check the lake, a shared
    folder unless `lake` names another and the servers' config for it."""
    folder = tmp_path / "shared-lake"
    lake_dir, config = lake or (Lake.at(folder), lake_conf(folder))
    servers = start_js_cluster("jetlake", tmp_path, config=config)
    try:
        nc = await connect(servers)
        js = nc.jetstream(timeout=2)
        await eventually(
            lambda: js.add_stream(StreamConfig(name="L", subjects=["l.>"], num_replicas=3)),
            "the R3 stream created",
        )
        acked = [(await js.publish(f"l.{i % 3}", b"%d" % i)).seq for i in range(batch)]
        leader = leader_of(await js.stream_info("L"), servers)
        ref = StreamRef.load(store_of(leader) / STREAMS / "L")
        table = ref.table_path(lake_dir)
        await lake_reaches(table, ref.app_id, 1)  # the leader's compactor is at work
        assert compacting(servers) == [server_name(leader)]
        sent = batch
        for round in range(rounds):
            leader = leader_of(await js.stream_info("L"), servers)
            acked += [(await js.publish("l.x", b"%d" % (sent + i))).seq for i in range(batch)]
            sent += batch
            leader.kill()
            killed_at = time.monotonic()
            for i in range(sent, sent + batch):  # retried through the election, deduplicated
                ack = await eventually(
                    lambda i=i: js.publish("l.x", b"%d" % i, headers={"Nats-Msg-Id": f"m{i}"}),
                    f"publish {i} after the failover",
                )
                acked.append(ack.seq)
            sent += batch
            if round < rounds - 1:
                leader.restart()
        info = await js.stream_info("L")
        new = leader_of(info, [s for s in servers if s.running])
        last = info.state.last_seq
        follower = next(s for s in servers if s.running and s is not new)
        await eventually(
            lambda: asyncio.sleep(0, stream_messages(follower, "L") == last),
            "the follower applied every committed message",
        )
        refresh(spark, store_dir=store_of(follower), lake_dir=lake_dir)
        union = sorted(r.seq for r in spark.sql("SELECT seq FROM L").collect())
        assert union == list(range(1, last + 1))  # lake + the follower's tail, each seq once
        await lake_reaches(table, ref.app_id, last)
        took = time.monotonic() - killed_at
        seqs = lake_seqs(table)
        assert len(seqs) == len(set(seqs)), "a seq is in the lake twice"
        assert seqs == list(range(1, last + 1))
        assert set(acked) <= set(seqs)
        assert compacting(servers) == [server_name(new)]
        print(f"lake complete {took:.1f}s after the last leader was killed")
        await nc.close()
    finally:
        for server in servers:
            if server.running:
                try:
                    server.stop(expect_code=None)  # SIGTERM: it stops its compactor too
                except ServerError:
                    server.kill()
