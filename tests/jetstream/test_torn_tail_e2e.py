"""A torn or corrupted tail of the active segment: the restarted server cuts it and serves.

jetlake only: the files are jetlake's own format; the reference has its own blocks.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import nats
import nats.js.errors
import pytest

from tests.support.servers import ServerProcess

STREAM = "TORN"


def active_segment(store: Path) -> Path:
    segments = sorted((store / "jetstream" / "$G" / "streams" / STREAM).glob("*.arrows"))
    assert segments, f"no segment files under {store}"
    return segments[-1]


async def publish_batches(url: str, batches: int) -> list[int]:
    """Publish one message per round trip, so each becomes its own batch on disk."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name=STREAM, subjects=["torn.>"])
    seqs = [(await js.publish(f"torn.{i % 3}", f"m{i}".encode())).seq for i in range(batches)]
    await nc.close()
    return seqs


async def stored(url: str, seqs: range) -> dict[int, bytes]:
    """What the server serves for each seq (missing ones left out)."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    out = {}
    for seq in seqs:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            out[seq] = (await js.get_msg(STREAM, seq)).data
    await nc.close()
    return out


async def publish_one(url: str) -> int:
    nc = await nats.connect(url)
    ack = await nc.jetstream().publish("torn.after", b"after-restart")
    await nc.close()
    return ack.seq


@pytest.mark.parametrize("damage", ["truncate", "flip"])
async def test_recovery_cuts_the_damaged_tail_and_serves(
    jetlake_js: ServerProcess, tmp_path: Path, damage: str
) -> None:
    seqs = await publish_batches(jetlake_js.url, 20)
    assert seqs == list(range(1, 21))
    jetlake_js.stop()
    segment = active_segment(tmp_path / "store")
    data = bytearray(segment.read_bytes())
    if damage == "truncate":
        data = data[:-7]  # the last batch loses its end
    else:
        data[-20] ^= 0xFF  # one flipped byte inside the last batch
    segment.write_bytes(bytes(data))
    jetlake_js.start(port=jetlake_js.port)
    assert "cut the tail there" in jetlake_js.log(), jetlake_js.log()
    survivors = {i + 1: f"m{i}".encode() for i in range(19)}
    assert await stored(jetlake_js.url, range(1, 21)) == survivors
    # Seq 20 was acknowledged once: it is never handed out again, not even after a restart.
    assert await publish_one(jetlake_js.url) == 21
    jetlake_js.stop()
    jetlake_js.start(port=jetlake_js.port)
    assert await publish_one(jetlake_js.url) == 22
    assert (await stored(jetlake_js.url, range(20, 23)))[21] == b"after-restart"
