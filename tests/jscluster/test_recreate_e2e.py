"""A replicated stream deleted and at once created again under the same name (the same
folder on every server): each server's new replica opens only after the old one's files
are gone, so every replica holds the new stream's messages and nothing of the old."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.jscluster.support import eventually, js_cluster, stream_messages
from tests.support.servers import enabled_kinds

pytestmark = [pytest.mark.timeout(120), pytest.mark.parametrize("kind", enabled_kinds())]


async def test_a_stream_created_again_at_once_is_whole_on_every_replica(
    kind: str, tmp_path: Path
) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("R", ["r.>"])
        for round_ in range(3):
            await asyncio.gather(*(c.js.publish("r.x", b"x" * 2000) for _ in range(300)))
            await c.js.delete_stream("R")
            await c.add_stream("R", ["r.>"])
            for i in range(round_ + 1):
                ack = await eventually(lambda: c.js.publish("r.y", b"new"), "a publish to R")
                assert ack.seq == i + 1
            for server in c.servers:
                await eventually(
                    lambda server=server, want=round_ + 1: asyncio.sleep(
                        0, stream_messages(server, "R") == want
                    ),
                    f"round {round_}: the replica on {server.url} holds the new stream's messages",
                )
