"""An atomic batch torn on disk is cut whole: jetlake writes a batch as one Arrow record
batch with one checksum, so a power loss inside it cannot leave a prefix behind.

jetlake only: the files are jetlake's own format.
"""

from __future__ import annotations

from pathlib import Path

import nats

from tests.jetstream.test_torn_tail_e2e import STREAM, active_segment, stored
from tests.support.servers import ServerProcess

BATCH = 50


async def publish_then_batch(url: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name=STREAM, subjects=["torn.>"], allow_atomic=True)
    for i in range(3):
        await js.publish("torn.single", f"m{i}".encode())
    for seq in range(1, BATCH + 1):
        headers = {"Nats-Batch-Id": "b", "Nats-Batch-Sequence": str(seq)}
        if seq == BATCH:
            headers["Nats-Batch-Commit"] = "1"
        reply = await nc.request("torn.batch", b"batched %d" % seq, timeout=5, headers=headers)
    assert b'"count":50' in reply.data, reply.data
    await nc.close()


async def test_a_torn_batch_is_cut_whole(jetlake_js: ServerProcess, tmp_path: Path) -> None:
    await publish_then_batch(jetlake_js.url)
    jetlake_js.kill()
    segment = active_segment(tmp_path / "store")
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) - 100])  # the batch's record loses its end
    jetlake_js.start(port=jetlake_js.port)
    survivors = await stored(jetlake_js.url, range(1, BATCH + 4))
    assert survivors == {1: b"m0", 2: b"m1", 3: b"m2"}
