"""jetlake refuses to hand leadership to a preferred server that is down.

The reference accepts it ("success") and the group then has no leader until an
election times out (its answers turn to 10008 meanwhile); jetlake answers as the
reference does when no connected member fits a placement, and keeps its leader.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.jscluster.support import eventually, js_cluster, request, server_name

pytestmark = pytest.mark.timeout(120)


async def test_an_offline_preferred_server_is_refused(tmp_path: Path) -> None:
    async with js_cluster("jetlake", tmp_path) as c:
        await c.add_stream("S", ["s.>"])
        leader = await c.leader("S")
        down = next(s for s in c.servers if s is not leader)
        down.kill()
        body = json.dumps({"placement": {"preferred": server_name(down)}}).encode()

        async def refused() -> dict[str, object] | None:
            doc = await request(c.nc, "$JS.API.STREAM.LEADER.STEPDOWN.S", body)
            return doc if "error" in doc else None  # until the route's loss is seen

        doc = await eventually(refused, "the stepdown refused")
        assert doc["error"] == {
            "code": 400,
            "err_code": 10005,
            "description": "no replacement peer connected",
        }
        info = await c.js.stream_info("S")
        assert info.cluster is not None and info.cluster.leader == server_name(leader)
