"""What a publisher reads through an R3 stream's leader right after its PubAck.

jetlake's leader sends the PubAck once the message committed on a quorum, before it
stores the message itself; the reference stores it first. Either way a read the ack
prompts must find it: a direct get and a `MSG.GET` by sequence and by subject, the
stream's info, a KV get after a put, and a pull consumer's next fetch (its wake-up
follows the store, not the ack). One publish at a time, the round trip this is about.
"""

from __future__ import annotations

from pathlib import Path

import nats
import pytest
from nats.js.api import ConsumerConfig, StreamConfig

from tests.jscluster.support import eventually, js_cluster
from tests.support.servers import enabled_kinds

pytestmark = [pytest.mark.timeout(180), pytest.mark.parametrize("kind", enabled_kinds())]

PUBLISHES = 10
GET_TIMEOUT = 5.0


async def test_reads_through_the_leader_right_after_a_puback_see_the_message(
    kind: str, tmp_path: Path
) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        stream = StreamConfig(name="RA", subjects=["ra.*"], num_replicas=3, allow_direct=True)
        await eventually(lambda: c.js.add_stream(stream), "stream RA created")
        await eventually(
            lambda: c.js.create_key_value(bucket="RAKV", replicas=3), "bucket RAKV created"
        )
        await reads_after_acks(await nats.connect((await c.leader("RA")).url))
        await kv_gets_after_puts(await nats.connect((await c.leader("KV_RAKV")).url))


async def reads_after_acks(nc: nats.NATS) -> None:
    try:
        js = nc.jetstream(timeout=GET_TIMEOUT)
        pull = await js.pull_subscribe("ra.*", "reader", config=ConsumerConfig())
        for i in range(PUBLISHES):
            subject, data = f"ra.{i % 3}", f"v{i}".encode()
            ack = await js.publish(subject, data)
            by_seq = await js.get_msg("RA", ack.seq, direct=True)
            assert (by_seq.subject, by_seq.data) == (subject, data)
            last = await js.get_msg("RA", subject=subject, direct=True)
            assert last.seq == ack.seq
            api = await js.get_msg("RA", ack.seq)
            assert api.data == data
            info = await js.stream_info("RA")
            assert (info.state.last_seq, info.state.messages) == (ack.seq, i + 1)
            [msg] = await pull.fetch(1, timeout=GET_TIMEOUT)
            assert (msg.metadata.sequence.stream, msg.data) == (ack.seq, data)
            await msg.ack()
    finally:
        await nc.close()


async def kv_gets_after_puts(nc: nats.NATS) -> None:
    try:
        kv = await nc.jetstream(timeout=GET_TIMEOUT).key_value("RAKV")
        for i in range(PUBLISHES):
            revision = await kv.put(f"k{i % 4}", f"v{i}".encode())
            got = await kv.get(f"k{i % 4}")
            assert (got.revision, got.value) == (revision, f"v{i}".encode())
    finally:
        await nc.close()
