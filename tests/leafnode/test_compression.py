"""Leafnode compression: the negotiation rules without I/O, the config as both servers
read it, and links between jetlake and the reference (each way, and jetlake on both
ends) that negotiate S2, carry large payloads both ways, and show the level on both
sides' /leafz; one side off leaves the link uncompressed. A leaf played by the test
sees the hub's S2 chunks on the wire; one whose S2 stream is corrupt loses its link
and nobody else notices."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from ingest.parser import s2
from ingest.server import compression as c
from ingest.server.options import load_config
from tests.leafnode.conftest import LINK_TIMEOUT, Link, leafz, linked
from tests.leafnode.test_config import refusal
from tests.support.clients import sync
from tests.support.cluster import free_port
from tests.support.poll import poll
from tests.support.servers import ServerProcess, start_server

TIMEOUT = 10.0
MS = 1_000_000

# ---- the rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ours", "theirs", "chosen"),
    [
        (c.S2_FAST, "", c.NOT_SUPPORTED),  # an older server says nothing
        (c.S2_FAST, c.NOT_SUPPORTED, c.NOT_SUPPORTED),
        (c.S2_BEST, c.OFF, c.OFF),
        (c.ACCEPT, c.ACCEPT, c.OFF),  # nobody starts it
        (c.S2_BETTER, c.ACCEPT, c.S2_BETTER),
        (c.ACCEPT, c.S2_AUTO, c.S2_FAST),
        (c.ACCEPT, c.S2_BEST, c.S2_BEST),
        (c.S2_AUTO, c.S2_FAST, c.S2_AUTO),  # each side writes at its own level
    ],
)
def test_selection(ours: str, theirs: str, chosen: str) -> None:
    assert c.select(ours, theirs) == chosen


def test_an_unknown_remote_mode_is_an_error() -> None:
    with pytest.raises(ValueError, match='unsupported route compression mode "zip"'):
        c.select(c.S2_FAST, "zip")


@pytest.mark.parametrize(
    ("rtt_ms", "thresholds", "level"),
    [
        (1, c.DEFAULT_RTT_THRESHOLDS, c.S2_UNCOMPRESSED),
        (10, c.DEFAULT_RTT_THRESHOLDS, c.S2_UNCOMPRESSED),
        (30, c.DEFAULT_RTT_THRESHOLDS, c.S2_FAST),
        (80, c.DEFAULT_RTT_THRESHOLDS, c.S2_BETTER),
        (500, c.DEFAULT_RTT_THRESHOLDS, c.S2_BEST),
        (5, (0, 0, 20 * MS), c.S2_BETTER),  # zeros switch levels off
        (500, (0, 20 * MS), c.S2_FAST),  # past the last: the last level named
    ],
)
def test_auto_level_follows_the_round_trip(
    rtt_ms: int, thresholds: tuple[int, ...], level: str
) -> None:
    assert c.auto_level(rtt_ms / 1000, thresholds) == level


def test_modes_are_normalised() -> None:
    assert c.normalise("Fast") == c.Compression(c.S2_FAST, ())
    assert c.normalise("on") == c.Compression(c.S2_AUTO, c.DEFAULT_RTT_THRESHOLDS)
    assert c.normalise("disabled").mode == c.OFF
    assert c.normalise("auto", (5 * MS, 0, 0)) == c.Compression(c.S2_AUTO, (5 * MS,))


def test_config_is_read(tmp_path: Path) -> None:
    config = tmp_path / "leaf.conf"
    config.write_text(
        "leafnodes {\n  port: -1\n  compression: s2_best\n  remotes [\n"
        '    { url: "nats://hub:7422", compression: { mode: s2_auto, rtt_thresholds: '
        '["5ms", "20ms"] } }\n    { url: "nats://hub:7423", compression: false }\n'
        '    { url: "nats://hub:7424" }\n  ]\n}\n'
    )
    leaf = load_config(str(config)).leafnodes
    assert leaf is not None
    assert leaf.compression == c.Compression(c.S2_BEST, ())
    auto, off, default = (r.compression for r in leaf.remotes)
    assert auto == c.Compression(c.S2_AUTO, (5 * MS, 20 * MS))
    assert (off.mode, default) == (c.OFF, c.DEFAULT_COMPRESSION)


@pytest.mark.parametrize(
    "section",
    [
        "leafnodes { port: -1, compression: zip }",
        'leafnodes { port: -1, compression: { mode: s2_auto, rtt_thresholds: ["50ms", "5ms"] } }',
        pytest.param("leafnodes { port: -1, compression: 12 }", marks=pytest.mark.soak),
        pytest.param(
            'leafnodes { remotes [ { url: "nats://127.0.0.1:1", '
            "compression: { mode: x, y: 1 } } ] }",
            marks=pytest.mark.soak,
        ),
    ],
)
def test_bad_modes_are_refused_as_the_reference_does(tmp_path: Path, section: str) -> None:
    config = tmp_path / "bad.conf"
    config.write_text(section + "\n")
    assert refusal("jetlake", config) == refusal("nats-server", config)


# ---- links -------------------------------------------------------------------------------

PAIRS = [
    pytest.param(("nats-server", "jetlake"), id="ref-hub/jl-leaf"),
    pytest.param(("jetlake", "nats-server"), id="jl-hub/ref-leaf"),
    pytest.param(("jetlake", "jetlake"), id="jl-hub/jl-leaf"),
]


def _start(hub_kind: str, leaf_kind: str, tmp: Path, hub_mode: str, leaf_mode: str) -> Link:
    port = free_port()
    hub = start_server(
        hub_kind,
        "-m",
        "-1",
        config=f"server_name: hub\nleafnodes {{ listen: 127.0.0.1:{port}, {hub_mode} }}\n",
        tmp_path=tmp,
        name="hub",
    )
    try:
        leaf = start_server(
            leaf_kind,
            "-m",
            "-1",
            config=(
                "server_name: leaf\nleafnodes { reconnect: 1, remotes [ "
                f'{{ url: "nats://127.0.0.1:{port}", {leaf_mode} }} ] }}\n'
            ),
            tmp_path=tmp,
            name="leaf",
        )
    except BaseException:
        hub.stop(expect_code=None)
        raise
    poll(lambda: linked(hub) and linked(leaf), "the leafnode link", LINK_TIMEOUT)
    return Link(hub, leaf, port)


@pytest.fixture(scope="module", params=PAIRS)
def compressed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Link]:
    """The hub writes s2_fast, the leaf s2_better: each side selects its own level."""
    hub_kind, leaf_kind = request.param
    tmp = tmp_path_factory.mktemp("compressed")
    link = _start(hub_kind, leaf_kind, tmp, "compression: s2_fast", "compression: s2_better")
    yield link
    link.leaf.stop(expect_code=None)
    link.hub.stop(expect_code=None)


def _payloads() -> list[bytes]:
    text = b"".join(b'{"sensor":%d,"reading":%d,"unit":"C"}\n' % (i, i * 7) for i in range(20000))
    return [b"small", text[:900_000], os.urandom(300_000), b""]


async def test_compressed_link_carries_large_payloads_both_ways(compressed: Link) -> None:
    hub_leafz, leaf_leafz = leafz(compressed.hub)["leafs"][0], leafz(compressed.leaf)["leafs"][0]
    assert (hub_leafz["compression"], leaf_leafz["compression"]) == ("s2_fast", "s2_better")
    hub = await nats.connect(compressed.hub.url, allow_reconnect=False)
    leaf = await nats.connect(compressed.leaf.url, allow_reconnect=False)
    try:
        for sender, receiver, subject in ((leaf, hub, "up.data"), (hub, leaf, "down.data")):
            sub = await receiver.subscribe(subject)
            await sync(receiver)
            other = compressed.leaf if receiver is hub else compressed.hub
            await asyncio.to_thread(
                poll,
                lambda s=subject, o=other: _announced(o, s),
                f"interest in {subject}",
                LINK_TIMEOUT,
            )
            sent = _payloads()
            for payload in sent:
                await sender.publish(subject, payload, headers={"N": str(len(payload))})
            await sender.flush()
            got = [await sub.next_msg(TIMEOUT) for _ in sent]
            assert [m.data for m in got] == sent
            assert [m.headers for m in got] == [{"N": str(len(p))} for p in sent]
            await sub.unsubscribe()
    finally:
        await hub.close()
        await leaf.close()


def _announced(server: object, subject: str) -> bool:
    return any(subject in e.get("subscriptions_list", []) for e in leafz(server)["leafs"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("hub_mode", "leaf_mode"),
    [("compression: off", ""), ("", "compression: off")],
    ids=["hub-off", "leaf-off"],
)
@pytest.mark.parametrize("pair", PAIRS[:2])
async def test_one_side_off_runs_uncompressed(
    tmp_path: Path, pair: tuple[str, str], hub_mode: str, leaf_mode: str
) -> None:
    link = await asyncio.to_thread(_start, *pair, tmp_path, hub_mode, leaf_mode)
    try:
        hub_leafz, leaf_leafz = leafz(link.hub)["leafs"][0], leafz(link.leaf)["leafs"][0]
        assert hub_leafz["compression"] == leaf_leafz["compression"] == "off"
        hub = await nats.connect(link.hub.url, allow_reconnect=False)
        leaf = await nats.connect(link.leaf.url, allow_reconnect=False)
        sub = await hub.subscribe("plain.>")
        await sync(hub)
        await asyncio.to_thread(
            poll, lambda: _announced(link.leaf, "plain.>"), "interest", LINK_TIMEOUT
        )
        await leaf.publish("plain.x", b"y" * 100_000)
        assert (await sub.next_msg(TIMEOUT)).data == b"y" * 100_000
        await hub.close()
        await leaf.close()
    finally:
        link.leaf.stop(expect_code=None)
        link.hub.stop(expect_code=None)


# ---- a leaf played by the test: the S2 bytes on the wire ---------------------------------


@pytest.fixture(scope="module", params=["nats-server", "jetlake"])
def s2_hub(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, int]]:
    """A hub whose accepted links write s2_fast, and its leafnode port."""
    port = free_port()
    config = f"server_name: hub\nleafnodes {{ listen: 127.0.0.1:{port}, compression: s2_fast }}\n"
    tmp = tmp_path_factory.mktemp("s2hub")
    hub = start_server(request.param, "-m", "-1", config=config, tmp_path=tmp, name="hub")
    yield hub, port
    hub.stop(expect_code=None)


class FakeLeaf:
    """A leaf negotiating s2_fast by hand: its INFO, the hub's compressed INFO, CONNECT."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.inflate: s2.StreamReader | None = None
        self.buf = bytearray()
        self.wire = 0  # bytes read off the socket since compression started

    @classmethod
    async def login(cls, hub: ServerProcess, port: int) -> FakeLeaf:
        leaf = cls(*await asyncio.open_connection("127.0.0.1", port))
        greeting = json.loads((await leaf.line())[5:])
        assert greeting["compression"] == "s2_fast"
        info = {"server_id": "NFAKELEAF", "name": "fake-leaf", "compression": "s2_fast"}
        leaf.writer.write(b"INFO " + json.dumps(info).encode() + b"\r\n")
        leaf.inflate = s2.StreamReader()
        assert (await leaf.line()).startswith(b"INFO ")
        connect = {"server_id": "NFAKELEAF", "name": "fake-leaf", "headers": True,
                   "compress_mode": "s2_fast"}  # fmt: skip
        await leaf.send(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        while (line := await leaf.line()) != b"PONG":
            assert not line.startswith(b"-ERR"), line
        await asyncio.to_thread(
            poll, lambda: leafz(hub)["leafnodes"] == 1, "the fake leaf registered", LINK_TIMEOUT
        )
        return leaf

    async def send(self, data: bytes) -> None:
        self.writer.write(s2.encode_stream(data))
        await self.writer.drain()

    async def _more(self) -> None:
        data = await asyncio.wait_for(self.reader.read(65536), TIMEOUT)
        assert data, "the hub hung up"
        if self.inflate is None:
            self.buf += data
        else:
            self.wire += len(data)
            self.buf += self.inflate.feed(data)

    async def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            await self._more()
        line, _, rest = bytes(self.buf).partition(b"\r\n")
        self.buf[:] = rest
        return line

    async def message(self, subject: bytes, size: int) -> bytes:
        """The payload of the next LMSG on `subject`, skipping whatever comes before."""
        head = b"LMSG " + subject + b" %d\r\n" % size
        while (at := self.buf.find(head)) < 0 or len(self.buf) < at + len(head) + size + 2:
            await self._more()
        return bytes(self.buf[at + len(head) : at + len(head) + size])

    async def hang_up(self, hub: ServerProcess) -> None:
        self.writer.close()
        await asyncio.to_thread(
            poll, lambda: leafz(hub)["leafnodes"] == 0, "the link gone", LINK_TIMEOUT
        )


async def test_the_hub_compresses_what_it_sends(s2_hub: tuple[ServerProcess, int]) -> None:
    """The hub reads the test's S2 (LS+), and what it forwards comes as S2 chunks much
    smaller than the payload, which decode to the LMSG."""
    hub, port = s2_hub
    leaf = await FakeLeaf.login(hub, port)
    try:
        assert leafz(hub)["leafs"][0]["compression"] == "s2_fast"
        await leaf.send(b"LS+ wire.test\r\n")
        await asyncio.to_thread(
            poll, lambda: _announced(hub, "wire.test"), "the fake leaf's interest", LINK_TIMEOUT
        )
        payload = b"".join(b"reading %06d ok;" % i for i in range(12_500))  # 225,000 bytes
        client = await nats.connect(hub.url, allow_reconnect=False)
        leaf.wire = 0
        await client.publish("wire.test", payload)
        await client.flush()
        assert await leaf.message(b"wire.test", len(payload)) == payload
        assert leaf.wire < len(payload) // 3, f"{leaf.wire} bytes on the wire"  # both ~62,000
        await client.close()
    finally:
        await leaf.hang_up(hub)


async def test_a_corrupt_stream_closes_only_that_link(s2_hub: tuple[ServerProcess, int]) -> None:
    """A chunk whose checksum is wrong: the hub closes that link (jetlake saying which
    peer and why); its clients carry on."""
    hub, port = s2_hub
    leaf = await FakeLeaf.login(hub, port)
    client = await nats.connect(hub.url, allow_reconnect=False)
    sub = await client.subscribe("still.here")
    leaf.writer.write(s2.MAGIC + b"\x01\x06\x00\x00\x00\x00\x00\x00hi")  # a CRC of 0
    await leaf.writer.drain()
    with contextlib.suppress(ConnectionError):
        while await asyncio.wait_for(leaf.reader.read(65536), TIMEOUT):
            pass  # until the hub closes the link
    await leaf.hang_up(hub)
    await client.publish("still.here", b"ok")
    assert (await sub.next_msg(TIMEOUT)).data == b"ok"
    await client.close()
    if hub.kind == "jetlake":
        assert hub.find_log("Leafnode decompression error from fake-leaf: chunk checksum")
