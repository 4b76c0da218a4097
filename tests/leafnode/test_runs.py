"""Runs of plain LMSGs: the compiled walk (`split_leaf`) against the pure codec, and a
run crossing a link into a hub's client subscription through the compiled table."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest

from ingest.parser import leafnodes as proto
from ingest.parser.fast import native
from tests.leafnode.conftest import LINK_TIMEOUT, knows, start_link
from tests.support.http import _get

pytestmark = pytest.mark.skipif(
    getattr(native, "split_leaf", None) is None, reason="the compiled extension is not built"
)

STREAM = (
    b"INFO {}\r\nLMSG a.b 3\r\nabc\r\nLMSG a.b 0\r\n\r\nlmsg a.b 2\r\nxy\r\n"
    b"LMSG a.b r 1\r\nz\r\nLMSG a.c 1\r\nq\r\nLMSG a.c | g 1\r\nw\r\nPING\r\n"
    b"HMSG a.c 3 5\r\nh\r\nxy\r\nLS+ foo\r\nLMSG a.c 2\r\nok\r\nLS- foo\r\n"
)


def flattened(ops: list[object]) -> list[object]:
    """A run as the RMsgs the pure codec gives for it."""
    out: list[object] = []
    for op in ops:
        if isinstance(op, proto.LRun):
            out += [proto.RMsg("", op.subject, b"", (), None, p) for p in op.payloads]
        else:
            out.append(op)
    return out


def test_the_runs_are_the_pure_codecs_messages_however_the_bytes_are_cut() -> None:
    expected = proto.LeafCodec().receive(STREAM)
    whole = proto.LeafCodec().receive_runs(STREAM)
    assert [type(op).__name__ for op in whole].count("LRun") == 3
    assert flattened(whole) == expected
    for cut in range(1, len(STREAM)):
        codec = proto.LeafCodec()
        ops = codec.receive_runs(STREAM[:cut]) + codec.receive_runs(STREAM[cut:])
        assert flattened(ops) == expected, cut


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"LMSG a x\r\nabc\r\n", "malformed message size"),
        (b"LMSG a 3\r\nabcd\r\n", "not followed by CRLF"),
        (b"LMSG a 99999999\r\n", "exceeds the maximum payload"),
        (b"LMSG " + b"a" * 5000, "maximum control line"),
    ],
)
def test_what_the_walk_cannot_read_the_pure_codec_refuses(data: bytes, error: str) -> None:
    codec = proto.LeafCodec(max_payload=1024)
    with pytest.raises(proto.LeafProtocolError, match=error):
        codec.receive_runs(b"LMSG a 1\r\nz\r\n" + data)


@pytest.mark.parametrize("reply", ["", "r"], ids=["runs", "replies"])
async def test_a_burst_across_a_link_reaches_a_hub_client_in_order(
    tmp_path: Path, reply: str
) -> None:
    """A reference leaf forwards a publisher's burst as runs (as single messages when
    each has a reply); the jetlake hub frames them into its subscriber (the table learns
    the subject after its first message), every message once and in order however it
    splits the burst across turns of its loop, counted in /varz as routed ones are."""
    link = start_link("jetlake", "nats-server", tmp_path)
    try:
        hub_nc = await nats.connect(link.hub.url)
        leaf_nc = await nats.connect(link.leaf.url)
        sub = await hub_nc.subscribe("burst")
        await hub_nc.flush()
        await knows(link.leaf, "burst")
        before = _get(link.hub.http_url + "/varz").json()
        count = 3000
        for i in range(count):
            await leaf_nc.publish("burst", b"%d" % i, reply=reply and f"{reply}.{i}")
        await leaf_nc.flush()
        msgs = [await sub.next_msg(timeout=LINK_TIMEOUT) for _ in range(count)]
        assert [int(m.data) for m in msgs] == list(range(count))
        assert [m.reply for m in msgs] == [reply and f"{reply}.{i}" for i in range(count)]
        after = _get(link.hub.http_url + "/varz").json()
        assert after["in_msgs"] - before["in_msgs"] >= count
        assert after["out_msgs"] - before["out_msgs"] >= count
        await asyncio.gather(hub_nc.close(), leaf_nc.close())
    finally:
        link.leaf.stop(expect_code=None)
        link.hub.stop(expect_code=None)
