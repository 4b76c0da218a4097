"""A server whose state files were damaged while it was down says which file, recovers
from its peers, rejoins the cluster and serves the stream with nothing acknowledged lost.

jetlake's own files (the reference lays out its store differently): three real
server processes, one stopped, bits flipped in one kind of file read at start,
the server started again; it must lead the stream and deliver every message a
publisher had a PubAck for, and its consumer must resume past every ack.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from consensus.wal_format import SLOT_SIZE
from tests.jscluster.support import (
    Running,
    connect,
    eventually,
    js_cluster,
    request,
    server_name,
    stream_messages,
)
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.timeout(180)

PUBLISHED = 30
ACKED = 10
SLOT_TERM = 9  # a byte of the term in a hard-state slot


def store_of(server: ServerProcess) -> Path:
    return Path(server.args[server.args.index("-sd") + 1]) / "jetstream"


def only(paths: list[Path]) -> Path:
    assert len(paths) == 1, paths
    return paths[0]


def newest(paths: list[Path]) -> Path:
    assert paths, "no such file"
    return sorted(paths)[-1]


def peers_file(store: Path) -> Path:
    return store / "$SYS" / "_js_" / "_meta_" / "peers.json"


def consumer_file(name: str) -> Callable[[Path], Path]:
    return lambda store: store / "$G" / "streams" / "S" / "obs" / "C" / name


def stream_snapshot(store: Path) -> Path:
    return newest(list((store / "$SYS" / "_js_").glob("S-R3*/*.snap")))


def meta_snapshot(store: Path) -> Path:
    return newest(list((store / "$SYS" / "_js_" / "_meta_").glob("*.snap")))


def flip(path: Path, offset: int) -> None:
    """Flip two bits of one byte (at `offset`, from the end when negative)."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x22
    path.write_bytes(bytes(data))


# kind of file -> where it is, the byte flipped, what the restarted server's log says
CASES = {
    "peers.json": (peers_file, -3, r"peers\.json: damaged at byte \d+: checksum"),
    "consumer meta.json": (
        consumer_file("meta.json"),
        -3,
        r"obs/C/meta\.json: damaged at byte \d+: checksum",
    ),
    "consumer state.json": (
        consumer_file("state.json"),
        -3,
        r"obs/C/state\.json: damaged at byte \d+: checksum",
    ),
    "stream snapshot": (stream_snapshot, -5, r"damaged snapshot \S+\.snap"),
    "meta snapshot": (meta_snapshot, -5, r"damaged snapshot \S+_meta_/\S+\.snap"),
}
SNAPSHOTTED = {"stream snapshot", "meta snapshot"}


async def fill(c: Running) -> None:
    """PUBLISHED messages acknowledged by the stream, the first ACKED acked by C; and,
    for the snapshot cases, enough meta and stream entries for both logs to snapshot."""
    await c.add_stream("S", ["s.>"])
    await c.js.add_consumer("S", ConsumerConfig(durable_name="C", ack_policy=AckPolicy.EXPLICIT))
    for i in range(PUBLISHED):
        ack = await c.js.publish("s.x", f"m{i}".encode())
        assert ack.seq == i + 1
    sub = await c.js.pull_subscribe("s.>", durable="C", stream="S")
    for msg in await sub.fetch(ACKED, timeout=5):
        await msg.ack_sync()
    for i in range(12):  # meta entries: R1 streams, each an assignment
        await c.add_stream(f"E{i}", [f"e{i}"], replicas=1)


async def check_served(c: Running, server: ServerProcess) -> None:
    """`server` leads S, holds every acknowledged message, and C resumes after its acks."""
    await eventually(
        lambda: _is(stream_messages(server, "S"), PUBLISHED), "the replica refilled", 60
    )
    await c.lead_on("S", server)
    for seq in range(1, PUBLISHED + 1):
        msg = await eventually(lambda seq=seq: c.js.get_msg("S", seq), f"message {seq}")
        assert msg.data == f"m{seq - 1}".encode()
    info = await eventually(lambda: c.js.consumer_info("S", "C"), "consumer C")
    assert info.ack_floor.stream_seq == ACKED
    sub = await c.js.pull_subscribe("s.>", durable="C", stream="S")
    got: list[int] = []
    while len(got) < PUBLISHED - ACKED:
        for msg in await eventually(lambda: sub.fetch(PUBLISHED, timeout=5), "a fetch"):
            assert msg.metadata.sequence.stream not in got
            got.append(msg.metadata.sequence.stream)
            await msg.ack_sync()
    assert sorted(got) == list(range(ACKED + 1, PUBLISHED + 1))
    ack = await c.js.publish("s.x", b"after")
    assert ack.seq == PUBLISHED + 1


async def _is(value: int | None, wanted: int) -> bool:
    return value == wanted


@pytest.mark.parametrize("case", list(CASES))
async def test_damaged_state_file_is_named_and_recovered_from_peers(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where, offset, said = CASES[case]
    if case in SNAPSHOTTED:
        monkeypatch.setenv("JETLAKE_RAFT_SNAPSHOT_ENTRIES", "8")
    async with js_cluster("jetlake", tmp_path, timeout=5) as c:
        await fill(c)
        leader = await c.leader("S")
        victim = next(s for s in c.servers if s is not leader)
        victim.stop()
        flip(where(store_of(victim)), offset)
        victim.start(port=victim.port)
        await eventually(lambda: _found(victim, said), f"the log naming the file ({said})")
        await check_served(c, victim)
        assert "Traceback" not in victim.log()


async def _found(server: ServerProcess, pattern: str) -> bool:
    return server.find_log(re.compile(pattern)) is not None


async def test_damaged_peers_file_of_the_issue_is_no_longer_fatal(tmp_path: Path) -> None:
    """The 18-byte peers.json with flipped bits that made every restart die."""
    async with js_cluster("jetlake", tmp_path, timeout=5) as c:
        await c.add_stream("S", ["s.>"])
        victim = c.servers[2]
        victim.stop()
        path = peers_file(store_of(victim))
        assert len(path.read_bytes()) > 18  # framed now; the old form is 18 bytes
        path.write_bytes(b'["S0\x02,"S1","S2"]')  # the unframed form, one flip
        victim.start(port=victim.port)
        await eventually(lambda: _found(victim, r"\[ERR\].*peers\.json: damaged at byte 4"),
                         "the error naming peers.json")  # fmt: skip
        doc = await eventually(
            lambda: request(c.nc, "$JS.API.STREAM.INFO.S"), "stream info", timeout=30
        )
        assert doc["config"]["name"] == "S"
        assert (path.parent / "peers.json.damaged").is_file()
        # Written again once it has the group's founders: the others may answer first.
        await eventually(lambda: _exists(path), "peers.json written again")


async def test_a_stream_raft_state_beyond_repair_rejoins_its_group_afresh(tmp_path: Path) -> None:
    """Both slots of a stream group's term and vote damaged: the replica must not vote in
    that group again as it was (it could vote twice in a term), so the leader takes it out
    of the group and it joins again with nothing, caught up like a new member. The server
    stays up meanwhile; then it is a current replica, holds every acknowledged message,
    answers direct gets of each, and can lead the stream."""
    async with js_cluster("jetlake", tmp_path, timeout=5) as c:
        await fill(c)
        config = StreamConfig(name="S", subjects=["s.>"], num_replicas=3, allow_direct=True)
        await c.js.update_stream(config)
        leader = await c.leader("S")
        victim = next(s for s in c.servers if s is not leader)
        victim.stop()
        hardstate = only(list((store_of(victim) / "$SYS" / "_js_").glob("S-R3*/hardstate")))
        flip(hardstate, SLOT_TERM)  # both slots: nothing left to trust
        flip(hardstate, SLOT_SIZE + SLOT_TERM)
        victim.start(port=victim.port)
        said = r"\[ERR\].*stream '\$G > S' has no replica here: .*hardstate"
        await eventually(lambda: _found(victim, said), "the error naming the hardstate")
        await eventually(lambda: _found(victim, "joining it afresh"), "the replica back", 60)
        assert list(hardstate.parent.parent.glob("S-R3*.damaged/hardstate"))
        name = server_name(victim)
        await eventually(lambda: _current(c, name), f"{name} a current replica", 60)
        alone = await connect([victim])
        try:
            js = alone.jetstream(timeout=2)
            for seq in range(1, PUBLISHED + 1):
                msg = await js.get_msg("S", seq, direct=True)
                assert msg.data == f"m{seq - 1}".encode()
        finally:
            await alone.close()
        await check_served(c, victim)
        assert victim.running and "Traceback" not in victim.log()
        await c.js.delete_stream("S")  # and the set-aside state goes with the stream
        js_dir = hardstate.parent.parent
        await eventually(lambda: _gone(js_dir, "S-R3*"), "the replica's group folders gone")


async def test_a_replica_waiting_to_rejoin_is_deleted_with_its_stream(tmp_path: Path) -> None:
    """The replica beyond repair cannot rejoin while the stream has no leader; the stream
    deleted meanwhile, nothing of it is left on that server, and it serves on."""
    async with js_cluster("jetlake", tmp_path, timeout=5) as c:
        await fill(c)
        leader = await c.leader("S")
        victim = next(s for s in c.servers if s is not leader)
        victim.stop()
        hardstate = only(list((store_of(victim) / "$SYS" / "_js_").glob("S-R3*/hardstate")))
        flip(hardstate, SLOT_TERM)
        flip(hardstate, SLOT_SIZE + SLOT_TERM)
        leader.stop()  # one voter of S left: no leader to take the victim out
        victim.start(port=victim.port)
        said = r"\[ERR\].*stream '\$G > S' has no replica here: .*hardstate"
        await eventually(lambda: _found(victim, said), "the error naming the hardstate", 60)
        await eventually(lambda: c.js.delete_stream("S"), "S deleted by the meta group", 60)
        await eventually(lambda: _gone(store_of(victim) / "$SYS" / "_js_", "S-R3*"), "group gone")
        await eventually(lambda: _gone(store_of(victim) / "$G" / "streams", "S"), "stream gone")
        assert not _found_now(victim, "joining it afresh")
        await c.add_stream("T", ["t.>"], replicas=2)  # the two servers up still serve
        assert (await c.js.publish("t.x", b"x")).seq == 1
        assert victim.running and "Traceback" not in victim.log()


async def _gone(folder: Path, pattern: str) -> bool:
    return not list(folder.glob(pattern))


def _found_now(server: ServerProcess, pattern: str) -> bool:
    return server.find_log(re.compile(pattern)) is not None


async def _current(c: Running, name: str) -> bool:
    info = await c.js.stream_info("S")
    replicas = info.cluster.replicas if info.cluster is not None else None
    return any(r.name == name and r.current for r in replicas or [])


async def test_damaged_peers_file_while_another_server_is_down(tmp_path: Path) -> None:
    """The members are asked of a reachable peer: a server down does not keep the restarted
    one out of the meta group, and the two of them serve the R3 stream."""
    async with js_cluster("jetlake", tmp_path, timeout=5) as c:
        await fill(c)
        first, victim, down = c.servers
        down.stop()
        victim.stop()
        path = peers_file(store_of(victim))
        founders = path.read_bytes()
        flip(path, -3)
        victim.start(port=victim.port)
        said = rf"meta group members from {server_name(first)}"
        await eventually(lambda: _found(victim, said), "the members asked of a peer")
        assert path.read_bytes() == founders
        await check_served(c, victim)
        assert "Traceback" not in victim.log()


async def _exists(path: Path) -> bool:
    return path.is_file()
