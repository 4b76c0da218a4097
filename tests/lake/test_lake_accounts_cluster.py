"""A named account's R3 stream in the lake of a three-server cluster: only the stream
leader's server compacts it, into the account's own table, every seq once; with the
lake in a shared folder and in a bucket of a real S3 server.

Three `jetlake serve` processes and the leader's compactor JVM: soak.
"""

from __future__ import annotations

from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig

from benchmarks.seaweed import SeaweedS3
from log.compactor.layout import StreamRef, streams_root
from log.compactor.location import Lake
from tests.jscluster.support import eventually, leader_of, server_name, start_js_cluster, urls
from tests.lake.test_lake_cluster_e2e import (
    TIMING,
    compacting,
    lake_conf,
    lake_reaches,
    lake_seqs,
    store_of,
)
from tests.support.servers import ServerError

pytestmark = [pytest.mark.soak, pytest.mark.timeout(600)]

ACCOUNTS = """
accounts {
  A { jetstream: enabled, users: [{user: a, password: a}] }
  B { jetstream: enabled, users: [{user: b, password: b}] }
}
"""


async def test_an_accounts_replicated_stream_reaches_its_own_table(tmp_path: Path) -> None:
    folder = tmp_path / "shared-lake"
    await _replicated(tmp_path, Lake.at(folder), lake_conf(folder))


async def test_the_same_with_the_lake_in_a_bucket(
    tmp_path: Path, seaweed: SeaweedS3, bucket_lake: Lake
) -> None:
    await _replicated(tmp_path, bucket_lake, seaweed.lake_config(bucket_lake.root, TIMING))


async def _replicated(tmp_path: Path, lake: Lake, config: str) -> None:
    servers = start_js_cluster("jetlake", tmp_path, config=config + ACCOUNTS)
    try:
        nc = await nats.connect(servers=urls(servers), user="a", password="a")
        js = nc.jetstream(timeout=2)
        await eventually(
            lambda: js.add_stream(StreamConfig(name="L", subjects=["l.>"], num_replicas=3)),
            "account A's R3 stream created",
        )
        acked = [(await js.publish(f"l.{i % 3}", b"%d" % i)).seq for i in range(300)]
        leader = leader_of(await js.stream_info("L"), servers)
        ref = StreamRef.load(streams_root(store_of(leader), "A") / "L")
        assert ref.qualified == "A.L"
        table = ref.table_path(lake)
        assert table.parent.name == "A.L"
        await lake_reaches(table, ref.app_id, acked[-1])
        assert lake_seqs(table) == acked
        assert compacting(servers) == [server_name(leader)]
        await nc.close()
    finally:
        for server in servers:
            if server.running:
                try:
                    server.stop(expect_code=None)
                except ServerError:
                    server.kill()
