"""KV puts of a new key each time, from clients on the bucket leader's server and on a
follower's, before and after the leadership moves.

Each key (one token) is a subject seen once, which a server learns by its bucket's
prefix (the stream's intake here, or the leader's route on a follower's server): every
put must be stored once, in order, whichever server took it and wherever the leader is
by then.
"""

from __future__ import annotations

from pathlib import Path

import nats
import pytest

from tests.jscluster.support import eventually, js_cluster
from tests.support.servers import enabled_kinds

pytestmark = [pytest.mark.timeout(180), pytest.mark.parametrize("kind", enabled_kinds())]

ROUND = 40  # puts per client per leadership


async def test_new_keys_from_the_leaders_server_and_a_followers_are_all_stored(
    kind: str, tmp_path: Path
) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await eventually(lambda: c.js.create_key_value(bucket="KEYS", replicas=3), "bucket KEYS")
        first = await c.leader("KV_KEYS")
        other = next(s for s in c.servers if s is not first)
        on_first, on_other = await nats.connect(first.url), await nats.connect(other.url)
        try:
            kvs = [await nc.jetstream(timeout=5).key_value("KEYS") for nc in (on_first, on_other)]
            expected: dict[str, bytes] = {}
            revision = 0
            for led in range(2):
                if led:
                    await c.lead_on("KV_KEYS", other)  # the follower's server now leads
                for i in range(2 * ROUND):
                    key, value = f"k{led}x{i}", f"v{led}.{i}".encode()
                    revision += 1
                    assert await kvs[i % 2].put(key, value) == revision, key
                    expected[key] = value
            reader = await on_first.jetstream(timeout=5).key_value("KEYS")
            for key, value in expected.items():
                assert (await reader.get(key)).value == value, key
            info = await c.js.stream_info("KV_KEYS")
            assert (info.state.messages, info.state.last_seq) == (4 * ROUND, 4 * ROUND)
        finally:
            await on_first.close()
            await on_other.close()
