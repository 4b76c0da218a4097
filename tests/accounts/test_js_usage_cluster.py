"""An account's stored bytes on a JetStream cluster, the reference and jetlake alike:
every replica counts against `max_file`, a message counts once per replica, and
`$JS.API.INFO` reports the whole cluster's bytes to a client on any server. The servers
learn each other's bytes a moment after a change, so each step waits for the figures
to settle before the publish it checks."""

from __future__ import annotations

import json
from pathlib import Path

import nats
import pytest
from nats.js.errors import APIError

from tests.jscluster.support import eventually, js_cluster

FOOTPRINT = 22 + len("u") + 1000 + 8  # a 1000-byte message on `u` in a file store
CAP = int(3 * 10.5 * FOOTPRINT)  # room for ten messages of an R3 stream, not eleven
ACCOUNTS = f"""
accounts {{
  A {{ users [ {{user: a, password: a}} ]
      jetstream {{ max_file: {CAP} }} }}
}}
"""
PAYLOAD = b"x" * 1000


@pytest.mark.soak  # two three-server JetStream clusters: ~15 s; units in test_js_usage_units
@pytest.mark.timeout(90)
async def test_stored_bytes_counted_across_the_cluster(server_kind: str, tmp_path: Path) -> None:
    async with js_cluster(server_kind, tmp_path, config=ACCOUNTS, user="a", password="a") as c:
        await c.add_stream("U", ["u"], replicas=3)
        clients = [
            await nats.connect(f"nats://a:a@{s.host}:{s.port}", max_reconnect_attempts=0)
            for s in c.servers
        ]
        try:

            async def storage_everywhere(expected: int) -> bool:
                for nc in clients:
                    info = json.loads((await nc.request("$JS.API.INFO", b"", timeout=2)).data)
                    if info["storage"] != expected:
                        return False
                return True

            for _ in range(9):
                await c.js.publish("u", PAYLOAD)
            state = (await c.js.stream_info("U")).state
            assert (state.messages, state.bytes) == (9, 9 * FOOTPRINT)
            await eventually(lambda: storage_everywhere(27 * FOOTPRINT), "27 replicas counted")
            ack = await c.js.publish("u", PAYLOAD)  # 27 + 3 of 31.5 footprints
            assert ack.seq == 10
            await eventually(lambda: storage_everywhere(30 * FOOTPRINT), "30 replicas counted")
            with pytest.raises(APIError) as refused:  # 30 + 3: past the limit
                await c.js.publish("u", PAYLOAD)
            assert (refused.value.err_code, refused.value.description) == (
                10002,
                "resource limits exceeded for account",
            )
            assert (await c.js.stream_info("U")).state.messages == 10
            assert await storage_everywhere(30 * FOOTPRINT)
        finally:
            for nc in clients:
                await nc.close()
