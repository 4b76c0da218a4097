"""The SQL service over a lake in a bucket (SeaweedFS, a real S3 server): with no query
between, each commit of the server's compactor (a typed stream's new tables, a new field,
a KV bucket's rows) is warmed as on a local lake, its lake part cached and filled, and a
query then reads every row.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig

from benchmarks.seaweed import SeaweedS3
from sql.nats_door.client import query as nats_query
from tests.sql.test_service_e2e import (
    START_DEADLINE,
    _lake_cache,
    _wait_for_service,
    start_with_service,
)
from tests.support.cluster import free_port
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess

# A minute and a half of S3 server, jetlake and Spark: with the suite's other lake runs
# that is more than CI's time allows, so it runs with the soak runs.
pytestmark = [pytest.mark.soak, pytest.mark.timeout(START_DEADLINE + 240)]


@pytest.fixture
def bucket_service(tmp_path: Path) -> Iterator[ServerProcess]:
    seaweed = SeaweedS3(tmp_path / "seaweed").start()
    try:
        store = tmp_path / "store"
        timing = (
            'seal_interval: "200ms", compact_interval: "500ms",\n'
            f'  sql {{ listen: "127.0.0.1:{free_port()}", jdbc: off }}'
        )
        lake = seaweed.lake_config(f"s3://{seaweed.bucket()}/lake", timing)
        conf = f'jetstream {{ store_dir: "{store}" }}\n{lake}'
        server = start_with_service(config=conf, tmp_path=tmp_path)
        try:
            _wait_for_service(server, store)
            yield server
        finally:
            server.stop()
    finally:
        seaweed.stop()


async def _filled(nc: nats.NATS, name: str, files: int = 1) -> dict[str, dict[str, object]]:
    """The lake cache's entries under `name` once one holds `files` files, filled."""

    async def held() -> dict[str, dict[str, object]]:
        return {t: e for t, e in (await _lake_cache(nc)).items() if f"/{name}/" in t}

    return await poll_async(
        held,
        f"{name} filled with {files} files in the lake cache",
        120,
        until=lambda entries: {"files": files, "filled": True} in entries.values(),
        interval=0.2,
    )


async def test_a_bucket_lakes_commits_are_warmed_with_no_query_between(
    bucket_service: ServerProcess,
) -> None:
    nc = await nats.connect(bucket_service.url)
    try:
        js = nc.jetstream()
        typed = StreamConfig(
            name="ORDERS", subjects=["orders.>"], metadata={"jetlake.lake.format": "json"}
        )
        await js.add_stream(typed)
        for i in range(5):
            await js.publish("orders.new", json.dumps({"id": i}).encode())
        await js.publish("orders.new", b"{not json")  # its rejects table
        first = await _filled(nc, "ORDERS")
        assert len(first) >= 2, first  # the typed table and its rejects, each its own base
        for i in range(5, 8):  # a field the table does not have yet: a schema change
            await js.publish("orders.new", json.dumps({"id": i, "note": "n"}).encode())
        await _filled(nc, "ORDERS", files=2)
        kv = await js.create_key_value(bucket="cfg")
        await kv.put("a", b"1")
        await _filled(nc, "KV_cfg")
        rows = await nats_query(nc, "SELECT count(*) AS n, count(note) AS noted FROM ORDERS")
        assert rows.to_pylist() == [{"n": 8, "noted": 3}]
        assert (await nats_query(nc, "SELECT value FROM kv_cfg")).to_pylist() == [{"value": b"1"}]
    finally:
        await nc.close()
