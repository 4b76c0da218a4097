"""A torn or corrupted tail of the active segment: the restarted server cuts it and serves.

jetlake only: the files are jetlake's own format; the reference has its own blocks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import nats
import nats.js.errors
import pytest

from tests.support.servers import ServerProcess, start_server

STREAM = "TORN"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = start_server("jetlake", "-js", "-sd", str(tmp_path / "store"), tmp_path=tmp_path)
    yield proc
    if proc.running:
        proc.stop()


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
    server: ServerProcess, tmp_path: Path, damage: str
) -> None:
    seqs = await publish_batches(server.url, 20)
    assert seqs == list(range(1, 21))
    server.stop()
    segment = active_segment(tmp_path / "store")
    data = bytearray(segment.read_bytes())
    if damage == "truncate":
        data = data[:-7]  # the last batch loses its end
    else:
        data[-20] ^= 0xFF  # one flipped byte inside the last batch
    segment.write_bytes(bytes(data))
    server.start(port=server.port)
    assert "cut the tail there" in server.log(), server.log()
    assert await stored(server.url, range(1, 21)) == {i + 1: f"m{i}".encode() for i in range(19)}
    # Seq 20 was acknowledged once: it is never handed out again, not even after a restart.
    assert await publish_one(server.url) == 21
    server.stop()
    server.start(port=server.port)
    assert await publish_one(server.url) == 22
    assert (await stored(server.url, range(20, 23)))[21] == b"after-restart"
