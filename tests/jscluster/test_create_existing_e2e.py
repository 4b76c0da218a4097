"""Creating a stream that exists: the same config is answered with the stream's info
through any server (clients and the MQTT layer create idempotently at start), a
different one with the reference's error; both kinds alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.jscluster.support import connect, js_cluster, request, server_name
from tests.support.servers import enabled_kinds

pytestmark = [pytest.mark.timeout(120), pytest.mark.parametrize("kind", enabled_kinds())]


async def test_a_repeated_create_is_answered_through_every_server(
    kind: str, tmp_path: Path
) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("EXISTS", ["exists.>"])
        await c.js.publish("exists.one", b"x")
        config = {"name": "EXISTS", "subjects": ["exists.>"], "num_replicas": 3}
        config |= {"storage": "file", "retention": "limits"}
        for server in c.servers:
            nc = await connect([server])
            try:
                again = await request(
                    nc, "$JS.API.STREAM.CREATE.EXISTS", json.dumps(config).encode()
                )
                assert "error" not in again, (server_name(server), again)
                assert again["config"]["name"] == "EXISTS", server_name(server)
                assert again["state"]["messages"] == 1, server_name(server)
                other = {**config, "subjects": ["elsewhere"]}
                refused = await request(
                    nc, "$JS.API.STREAM.CREATE.EXISTS", json.dumps(other).encode()
                )
                assert refused["error"]["err_code"] == 10058, (server_name(server), refused)
            finally:
                await nc.close()
