"""An account's JetStream limits on a JetStream cluster, the reference and jetlake alike:
the meta leader checks them against the account's streams on every server, a stream's
`max_bytes` reserved once per replica."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.jscluster.support import eventually, js_cluster, request

ACCOUNTS = """
accounts {
  A { users [ {user: a, password: a} ]
      jetstream { max_file: 2MB, max_streams: 2 } }
}
"""
MB = 1024 * 1024


@pytest.mark.soak  # two three-server JetStream clusters: ~15 s
async def test_limits_on_a_cluster(server_kind: str, tmp_path: Path) -> None:
    async with js_cluster(server_kind, tmp_path, config=ACCOUNTS, user="a", password="a") as c:

        async def create(name: str, **config: Any) -> Any:
            body = {"name": name, "subjects": [name.lower()], "storage": "file", **config}
            return await request(c.nc, f"$JS.API.STREAM.CREATE.{name}", json.dumps(body).encode())

        async def first() -> Any:  # the meta group elects its leader on its own time
            answer = await create("R1", num_replicas=1, max_bytes=MB)
            return answer if answer.get("error", {}).get("code") != 503 else None

        assert "error" not in await eventually(first, "a meta leader")
        # Three replicas of 512 KiB reserve 1.5 MiB: past the 1 MiB left.
        too_big = await create("R3", num_replicas=3, max_bytes=MB // 2)
        assert too_big["error"] == {
            "code": 500,
            "err_code": 10047,
            "description": "insufficient storage resources available",
        }
        assert "error" not in await create("R3", num_replicas=3, max_bytes=MB // 4)
        third = await create("MORE", num_replicas=1)
        assert third["error"]["err_code"] == 10027
