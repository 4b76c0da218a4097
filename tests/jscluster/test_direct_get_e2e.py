"""Direct gets on an R3 stream, read through every server the way clients read.

Each server is asked alone (a client connected to it only): by sequence one at
a time, many in flight, and by subject; then right after a publish acknowledged
through another server (read-your-writes across servers). The cluster runs in
the global account and in a named account beside a system account, the shape
of a user's configuration. Both kinds must answer every get.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig

from tests.jscluster.support import APP_LOGIN, NAMED_ACCOUNTS, eventually, js_cluster, request
from tests.support.servers import ServerProcess, enabled_kinds

pytestmark = [pytest.mark.timeout(180), pytest.mark.parametrize("kind", enabled_kinds())]

LOGINS = {"global": ("", {}), "named": (NAMED_ACCOUNTS, APP_LOGIN)}
SYSTEM = {"global": "$SYS", "named": "SYS"}  # whose routes carry the group's Raft traffic
MESSAGES = 300
SUBJECTS = 10
IN_FLIGHT = 128
GET_TIMEOUT = 1.0


@pytest.fixture(params=sorted(LOGINS))
def login(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def alone(server: ServerProcess, login: str) -> nats.NATS:
    """A client of this one server: every get it makes enters the cluster there."""
    return await nats.connect(server.url, **LOGINS[login][1])


async def test_direct_gets_answered_through_every_server(
    kind: str, login: str, tmp_path: Path
) -> None:
    config, creds = LOGINS[login]
    async with js_cluster(kind, tmp_path, config=config, timeout=5, **creds) as c:
        stream = StreamConfig(name="K", subjects=["k.*"], num_replicas=3, allow_direct=True)
        await eventually(lambda: c.js.add_stream(stream), "stream K created")
        info = await request(c.nc, "$JS.API.STREAM.INFO.K")
        assert info["cluster"]["traffic_account"] == SYSTEM[login]
        for i in range(MESSAGES):
            await c.js.publish(f"k.{i % SUBJECTS}", f"m{i + 1}".encode())
        for server in c.servers:
            nc = await alone(server, login)
            try:
                js = nc.jetstream(timeout=GET_TIMEOUT)
                one_by_one = [await js.get_msg("K", seq, direct=True) for seq in range(1, 301)]
                assert [m.data for m in one_by_one] == [f"m{s}".encode() for s in range(1, 301)]
                many = await asyncio.gather(
                    *(js.get_msg("K", seq, direct=True) for seq in range(1, IN_FLIGHT + 1))
                )
                assert [m.seq for m in many] == list(range(1, IN_FLIGHT + 1))
                for n in range(SUBJECTS):
                    last = await js.get_msg("K", subject=f"k.{n}", direct=True)
                    assert last.seq == MESSAGES - SUBJECTS + 1 + n
            finally:
                await nc.close()


async def test_a_get_through_any_server_sees_a_write_acknowledged_through_another(
    kind: str, tmp_path: Path
) -> None:
    """Linearizable reads: the PubAck came from the leader, the get goes to a replica that
    may be any member; it must hold the message (jetlake reads at a ReadIndex)."""
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        stream = StreamConfig(name="RYW", subjects=["ryw"], num_replicas=3, allow_direct=True)
        await eventually(lambda: c.js.add_stream(stream), "stream RYW created")
        readers = [await alone(server, "global") for server in c.servers]
        writer = await alone(c.servers[0], "global")
        try:
            wjs = writer.jetstream(timeout=5)
            for i in range(60):
                ack = await wjs.publish("ryw", f"v{i}".encode())
                reader = readers[i % len(readers)].jetstream(timeout=GET_TIMEOUT)
                got = await reader.get_msg("RYW", subject="ryw", direct=True)
                if kind == "jetlake":  # the reference's followers may answer behind the leader
                    assert (got.seq, got.data) == (ack.seq, f"v{i}".encode())
                else:
                    assert got.seq <= ack.seq
        finally:
            for nc in [*readers, writer]:
                await nc.close()
