"""`$JS.API.INFO` in a cluster: the account's streams and consumers wherever they live.

A named account beside a system account, an R3 stream with a byte limit and R1 streams
spread over the servers, each with a durable consumer. Asked through each server alone,
the answer counts every stream and consumer of the account, not only those on the
server that answers, and reserves each stream's `max_bytes` once, as the reference does.
"""

from __future__ import annotations

from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig

from tests.jscluster.support import APP_LOGIN, NAMED_ACCOUNTS, eventually, js_cluster, request
from tests.support.servers import enabled_kinds

pytestmark = [pytest.mark.timeout(180), pytest.mark.parametrize("kind", enabled_kinds())]

SINGLES = 5  # R1 streams: placed over the three servers, not all on the meta leader
LIMIT = 10_000


async def test_account_info_counts_the_whole_cluster(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, config=NAMED_ACCOUNTS, timeout=5, **APP_LOGIN) as c:
        r3 = StreamConfig(name="R3", subjects=["r3"], num_replicas=3, max_bytes=LIMIT)
        await eventually(lambda: c.js.add_stream(r3), "stream R3 created")
        await c.js.add_consumer("R3", durable_name="D")
        for i in range(SINGLES):
            await c.js.add_stream(StreamConfig(name=f"ONE{i}", subjects=[f"one.{i}"]))
            await c.js.add_consumer(f"ONE{i}", durable_name="D")
        for server in c.servers:
            nc = await nats.connect(server.url, **APP_LOGIN)
            try:
                info = await request(nc, "$JS.API.INFO")
            finally:
                await nc.close()
            counted = (info["streams"], info["consumers"], info["reserved_storage"])
            assert counted == (SINGLES + 1, SINGLES + 1, LIMIT), server.url
